// The paths a client of a broker needs, built from its run directory (the layout and its
// names are fracgpu/paths.h), and the short temporary directories private brokers live in.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "common/result.h"

namespace fracgpu::client {

std::filesystem::path admin_socket_path(const std::filesystem::path& run_dir);
// A tenant's directory: <run_dir>/tenants/<name> for a tenant with owners, else
// <run_dir>/pods/<name> (fracgpu/paths.h). Where the broker's reply is at hand, its
// TENANT_STATUS "socket" and "run_dir" say the same and need no guess about the owners.
std::filesystem::path tenant_dir(const std::filesystem::path& run_dir, std::string_view tenant,
                                 bool has_owners);
std::filesystem::path tenant_socket_path(const std::filesystem::path& run_dir,
                                         std::string_view tenant, bool has_owners);
// The socket of an existing tenant whose kind the caller does not know (`fracgpu run
// --tenant`): the one under tenants/ if it is there, else the one under pods/ if the
// caller can see it (root), else the tenants/ path (whose connect then says why).
std::filesystem::path tenant_socket_path(const std::filesystem::path& run_dir,
                                         std::string_view tenant);
// <run_dir>/ledgers/<name>: readable by the broker's uid only (tests as root look at it).
std::filesystem::path ledger_path(const std::filesystem::path& run_dir, std::string_view tenant);

// $TMPDIR when it is an absolute path short enough that tenant sockets below it fit a
// Unix socket path's 107 bytes, else /tmp.
std::filesystem::path short_temp_base();

// A new directory <short_temp_base()>/<prefix>-XXXXXX (mode 0700).
broker::Result<std::filesystem::path> make_temp_dir(const std::string& prefix);

}  // namespace fracgpu::client
