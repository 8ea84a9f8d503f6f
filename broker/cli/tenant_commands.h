// `fracgpu tenant create|update|delete` and `fracgpu set`: tenant management through
// the node broker's admin socket (root or the broker's uid), including who may use a
// tenant (--owner: the uids its socket admits).
#pragma once

#include <string>
#include <vector>

#include "cli/cli_options.h"

namespace fracgpu::cli {

// `owners`: the --owner words (user names or uids, resolve_owners in cli_options.h); for a
// create, none = a Kubernetes-style tenant without owners; for an update, none = unchanged.
int create_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags,
                  const std::vector<std::string>& owners = {});
int update_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags,
                  const std::vector<std::string>& owners = {});
// `fracgpu set NAME ...`: `tenant update` for run-time changes (compute share, ceiling,
// priority, memory); needs at least one of them and prints the tenant's table row(s).
int set_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags);
int delete_tenant(const std::string& run_dir, const std::string& name);

}  // namespace fracgpu::cli
