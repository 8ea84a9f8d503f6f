// Where fracgpu's files are, spelled once for the broker, the CLI, the device plugin and
// the shim. Under the run directory R (the node broker's is kRunDir):
//   R/admin.sock              the admin socket (root, or the broker's uid)
//   R/tenants/                0711: no listing, so a host user cannot enumerate tenants
//   R/tenants/<name>/         a tenant WITH owners (uids; `fracgpu run`, `tenant create
//                             --owner`): dir 0711, quota 0600 (the broker passes it to each
//                             registered process as a read-only descriptor: no other user
//                             can read it by guessing the name), broker.sock owned by its
//                             one owner 0600, or 0666 guarded by the broker's uid check
//   R/pods/                   0700: tenants WITHOUT owners (Kubernetes). No host user may
//                             traverse it; a pod reaches its own directory only through the
//                             device plugin's read-only bind mount at kRunDir
//   R/pods/<name>/            as R/tenants/<name>/, the quota 0644 (read by path through
//                             the pod's read-only mount), the socket 0666
//   R/ledgers/                0700
//   R/ledgers/<name>          0600: the tenant's ledger. Never reachable by path from a
//                             tenant: the broker passes each registered process a descriptor
//                             (protocol.h, "register")
//   R/mps/pipe, R/mps/log     0755: with --mps, the MPS control daemon's pipe and log
//                             directories (CUDA_MPS_PIPE_DIRECTORY / _LOG_DIRECTORY)
// Everything is owned by the broker's uid (root on a node) except a one-owner socket. A
// pod's quota sits beside the socket because the shim opens it by path, read-only, through
// the mount the pod sees (read-only), never through a descriptor of the broker's (its
// /proc/self/fd link would reopen the file through the broker's read-write mount). On a
// host there is no such mount; there the descriptor is what keeps the file private.
// A container sees its own tenant's directory at kRunDir (the device plugin mounts it
// there), so a tenant process finds its socket at kDefaultTenantSocket: FRACGPU_SOCKET's
// default.
#pragma once

#include <string_view>

namespace fracgpu::paths {

inline constexpr const char* kRunDir = "/run/fracgpu";        // --run-dir / FRACGPU_RUN_DIR default
inline constexpr const char* kStateDir = "/var/lib/fracgpu";  // the broker's --state-dir default
inline constexpr const char* kAdminSocketName = "admin.sock";
inline constexpr const char* kBrokerLockName = "broker.lock";  // see fracgpu/node_broker.h
inline constexpr const char* kTenantsDirName = "tenants";      // tenants with owners
inline constexpr const char* kPodsDirName = "pods";            // tenants without owners
inline constexpr const char* kLedgersDirName = "ledgers";
inline constexpr const char* kTenantSocketName = "broker.sock";
inline constexpr const char* kDefaultTenantSocket =
    "/run/fracgpu/broker.sock";                    // kRunDir/kTenantSocketName
inline constexpr const char* kMpsDirName = "mps";  // R/mps/{pipe,log}
// Where a container sees R/mps/pipe when its mount namespace hides R (the device
// plugin's mount; the register reply names the host path, protocol.h).
inline constexpr const char* kContainerMpsPipeDir = "/run/fracgpu-mps/pipe";

// File modes of the layout above (set with chmod after creation: the umask never decides).
inline constexpr unsigned kRunDirMode = 0755;
inline constexpr unsigned kTenantsDirMode = 0711;
inline constexpr unsigned kPodsDirMode = 0700;
inline constexpr unsigned kLedgersDirMode = 0700;
inline constexpr unsigned kTenantDirMode = 0711;
inline constexpr unsigned kQuotaMode = 0644;       // a tenant without owners (pods/)
inline constexpr unsigned kOwnedQuotaMode = 0600;  // a tenant with owners (tenants/)
inline constexpr unsigned kLedgerMode = 0600;
inline constexpr unsigned kAdminSocketMode = 0600;
inline constexpr unsigned kOwnerSocketMode = 0600;   // a tenant with exactly one owner
inline constexpr unsigned kSharedSocketMode = 0666;  // several or no owners: the uid check guards

// The directory (under R) that holds a tenant's directory.
constexpr const char* tenant_parent_dir_name(bool has_owners) {
  return has_owners ? kTenantsDirName : kPodsDirName;
}

namespace detail {
constexpr bool is_joined(std::string_view whole, std::string_view dir, std::string_view name) {
  return whole.size() == dir.size() + 1 + name.size() && whole.substr(0, dir.size()) == dir &&
         whole[dir.size()] == '/' && whole.substr(dir.size() + 1) == name;
}
}  // namespace detail
static_assert(detail::is_joined(kDefaultTenantSocket, kRunDir, kTenantSocketName));

}  // namespace fracgpu::paths
