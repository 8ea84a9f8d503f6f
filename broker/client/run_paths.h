// The paths a client of a broker needs, built from its run directory (the layout and its
// names are fracgpu/paths.h), and the short temporary directories private brokers live in.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "common/result.h"

namespace fracgpu::client {

std::filesystem::path admin_socket_path(const std::filesystem::path& run_dir);
std::filesystem::path tenant_dir(const std::filesystem::path& run_dir, std::string_view tenant);
std::filesystem::path tenant_socket_path(const std::filesystem::path& run_dir,
                                         std::string_view tenant);

// $TMPDIR when it is an absolute path short enough that tenant sockets below it fit a
// Unix socket path's 107 bytes, else /tmp.
std::filesystem::path short_temp_base();

// A new directory <short_temp_base()>/<prefix>-XXXXXX (mode 0700).
broker::Result<std::filesystem::path> make_temp_dir(const std::string& prefix);

}  // namespace fracgpu::client
