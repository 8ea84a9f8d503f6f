// Shared mappings of a tenant's segment files, for TenantSession (which registers) and
// TenantView (which only looks): the quota by path, read-only, and the ledger from the
// descriptor the broker passed (it has no path a tenant can reach). Plain mmap rather
// than Boost.Interprocess: the shim is built without exceptions, and both sides only
// need a shared file mapping of a POD layout. Runs at registration or a first NVML query,
// never on a hot path.
#pragma once

#include <cstddef>
#include <string>

namespace fracgpu {

// Maps all of `path` shared, read-write or read-only, and stores its size. Null when the
// file cannot be opened, is empty or cannot be mapped; *error (if given) then says which.
void* map_segment_file(const std::string& path, bool writable, std::size_t* size,
                       std::string* error = nullptr);

// Maps all of the file open on `fd` shared, read-write or read-only, and stores its size;
// `fd` stays open (the caller closes it: the mapping does not need it). Null when the
// descriptor is not a non-empty regular file or cannot be mapped so; *error then says why.
void* map_segment_fd(int fd, bool writable, std::size_t* size, std::string* error = nullptr);

// The directory a tenant socket lives in: its segment files are beside it.
std::string directory_of(const std::string& path);

}  // namespace fracgpu
