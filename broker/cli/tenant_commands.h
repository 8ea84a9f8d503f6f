// `fracgpu tenant create|update|delete` and `fracgpu set`: tenant management through
// the node broker's admin socket (root or the broker's uid).
#pragma once

#include <string>

#include "cli/cli_options.h"

namespace fracgpu::cli {

int create_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags);
int update_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags);
// `fracgpu set NAME ...`: `tenant update` for run-time changes (compute share, ceiling,
// priority, memory); needs at least one of them and prints the tenant's table row(s).
int set_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags);
int delete_tenant(const std::string& run_dir, const std::string& name);

}  // namespace fracgpu::cli
