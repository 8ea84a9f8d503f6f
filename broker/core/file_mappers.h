// Which processes map a given file: the broker's way to find a tenant's live processes
// when their ledger slots are gone (tenant_segment.h, "A ledger lost"). Every process of a
// tenant maps the tenant's quota file by path for its whole life, so the processes that
// map its inode are exactly the tenant's, whatever pid namespace or mount they live in (a
// pod's bind mount shows the host's inode). Read from /proc/<pid>/maps: the broker runs as
// root on a node (every process readable) or as the tenants' own uid on a workstation.
// Cost: one read of every process's maps; it runs only when a ledger was rebuilt or
// re-created (at start, or when a header is found zeroed), once for all such tenants.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace fracgpu::broker {

struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator<(const FileIdentity& o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
};

struct MappingProcess {
  pid_t pid = 0;
  uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat, as ProcessTracker keeps it
};

// For each file, the processes (other than this one) that map it now.
using FileMappersScan = std::function<std::map<FileIdentity, std::vector<MappingProcess>>(
    const std::vector<FileIdentity>&)>;

std::map<FileIdentity, std::vector<MappingProcess>> scan_file_mappers(
    const std::vector<FileIdentity>& files);

}  // namespace fracgpu::broker
