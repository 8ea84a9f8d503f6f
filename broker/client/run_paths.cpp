// Run-directory paths and temporary directories for clients (see run_paths.h).
#include "client/run_paths.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "fracgpu/paths.h"

namespace fracgpu::client {

std::filesystem::path admin_socket_path(const std::filesystem::path& run_dir) {
  return run_dir / paths::kAdminSocketName;
}

std::filesystem::path tenant_dir(const std::filesystem::path& run_dir, std::string_view tenant,
                                 bool has_owners) {
  return run_dir / paths::tenant_parent_dir_name(has_owners) / std::string(tenant);
}

std::filesystem::path tenant_socket_path(const std::filesystem::path& run_dir,
                                         std::string_view tenant, bool has_owners) {
  return tenant_dir(run_dir, tenant, has_owners) / paths::kTenantSocketName;
}

std::filesystem::path tenant_socket_path(const std::filesystem::path& run_dir,
                                         std::string_view tenant) {
  const auto owned = tenant_socket_path(run_dir, tenant, true);
  const auto pod = tenant_socket_path(run_dir, tenant, false);
  struct stat st {};
  if (::lstat(owned.c_str(), &st) != 0 && ::lstat(pod.c_str(), &st) == 0) return pod;
  return owned;
}

std::filesystem::path ledger_path(const std::filesystem::path& run_dir, std::string_view tenant) {
  return run_dir / paths::kLedgersDirName / std::string(tenant);
}

std::filesystem::path short_temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  if (tmp != nullptr && *tmp == '/' && std::strlen(tmp) < 32) return tmp;
  return "/tmp";
}

broker::Result<std::filesystem::path> make_temp_dir(const std::string& prefix) {
  std::string pattern = (short_temp_base() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return broker::Result<std::filesystem::path>::failure(
        "cannot create a temporary directory in " + short_temp_base().string() + ": " +
        std::strerror(errno));
  }
  return std::filesystem::path(pattern);
}

}  // namespace fracgpu::client
