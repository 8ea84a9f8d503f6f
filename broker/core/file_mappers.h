// Which processes map a given file: the broker's way to find a tenant's live processes
// when their ledger slots are gone (tenant_segment.h, "A ledger lost"). Every process of a
// tenant maps the tenant's quota file by path for its whole life, so the processes that
// map its inode are exactly the tenant's, whatever pid namespace or mount they live in (a
// pod's bind mount shows the host's inode). Read from /proc/<pid>/maps: the broker runs as
// root on a node (every process readable) or as the tenants' own uid on a workstation.
// Cost: one read of every process's maps; it runs only when a ledger was rebuilt or
// re-created (at start, or when a header is found zeroed), once for all such tenants.
//
// process_holds_file: the check a restarted broker makes before it re-attaches a Live slot
// it finds in a tenant's ledger (Broker::adopt_processes, issue 27). A slot's pid and start
// time are words the tenant can write: while no broker watched, a tenant could write a
// Live slot naming ANOTHER tenant's process with its true start time; re-attached on those
// alone, that process would be watched as this tenant's (its memory attributed here by the
// audit, and stopped by this tenant's `--reclaim kill`). A process that registered with the
// tenant holds its ledger — mapped for its lifetime (interpose/core/tenant_session.cpp), or,
// between receiving the descriptor and mapping it, open. Another tenant's process cannot:
// the ledger is 0600, the broker's, and reaches a process only as a descriptor sent over
// that tenant's socket. Cost: one maps read per Live slot at a broker start; the fd table
// only when the maps do not show the file.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
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

// True when process `pid` maps `file`, or holds a descriptor of it; false when it does not,
// or is gone; nullopt when its maps cannot be read (a broker without the privilege over the
// process: not root, another uid), which a caller must not take as "does not": that would
// drop a live process's books.
std::optional<bool> process_holds_file(pid_t pid, const FileIdentity& file);

// Whether the text of a /proc/<pid>/maps names `file` (its device and inode). Pure.
bool maps_text_names(const std::string& maps, const FileIdentity& file);

}  // namespace fracgpu::broker
