// `fracgpu status [--json]` and `fracgpu tenant list`: what the node broker holds,
// as a table of tenants x GPUs (limit, request, grant, used, peak, processes, OOM
// events) or as the broker's raw JSON.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace fracgpu::cli {

int show_status(const std::string& run_dir, bool as_json);
int list_tenants(const std::string& run_dir);

// The table `fracgpu status` prints for a "list" reply (exposed for tests).
std::string format_status_table(const nlohmann::json& list_reply);

}  // namespace fracgpu::cli
