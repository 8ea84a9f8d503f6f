// Where fracgpu's files are, spelled once for the broker, the CLI, the device plugin and
// the shim:
//   <run dir>/admin.sock                      the admin socket (root, or the broker's uid)
//   <run dir>/tenants/<name>/broker.sock      a tenant's socket; quota and ledger next to it
//                                             (their names are in protocol.h's register reply)
// The node broker's run directory is kRunDir. A container sees its own tenant's directory
// at the same path (the device plugin mounts it there), so a tenant process finds its
// socket at kDefaultTenantSocket: FRACGPU_SOCKET's default.
#pragma once

#include <string_view>

namespace fracgpu::paths {

inline constexpr const char* kRunDir = "/run/fracgpu";        // --run-dir / FRACGPU_RUN_DIR default
inline constexpr const char* kStateDir = "/var/lib/fracgpu";  // the broker's --state-dir default
inline constexpr const char* kAdminSocketName = "admin.sock";
inline constexpr const char* kTenantsDirName = "tenants";
inline constexpr const char* kTenantSocketName = "broker.sock";
inline constexpr const char* kDefaultTenantSocket =
    "/run/fracgpu/broker.sock";  // kRunDir/kTenantSocketName

namespace detail {
constexpr bool is_joined(std::string_view whole, std::string_view dir, std::string_view name) {
  return whole.size() == dir.size() + 1 + name.size() && whole.substr(0, dir.size()) == dir &&
         whole[dir.size()] == '/' && whole.substr(dir.size() + 1) == name;
}
}  // namespace detail
static_assert(detail::is_joined(kDefaultTenantSocket, kRunDir, kTenantSocketName));

}  // namespace fracgpu::paths
