// Shared mappings of a tenant's segment files (quota, ledger), for TenantSession (which
// registers) and TenantView (which only looks). Plain mmap rather than
// Boost.Interprocess: the shim is built without exceptions, and both sides only need a
// shared file mapping of a POD layout. Runs at registration or a first NVML query, never
// on a hot path.
#pragma once

#include <cstddef>
#include <string>

namespace fracgpu {

// Maps all of `path` shared, read-write or read-only, and stores its size. Null when the
// file cannot be opened, is empty or cannot be mapped; *error (if given) then says which.
void* map_segment_file(const std::string& path, bool writable, std::size_t* size,
                       std::string* error = nullptr);

// The directory a tenant socket lives in: its segment files are beside it.
std::string directory_of(const std::string& path);

}  // namespace fracgpu
