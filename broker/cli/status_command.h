// `fracgpu status [--json]`, `fracgpu top` and `fracgpu tenant list`: what the node
// broker holds, as tables of tenants x GPUs (memory: limit, request, grant, used, peak,
// processes, OOM events; compute: weight, the share the weights promise, ceiling,
// priority, measured share, GPU time, scheduler state) or as the broker's raw JSON.
// Compute fields a broker does not report (an older one) are shown as "-".
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"

namespace fracgpu::cli {

int show_status(const std::string& run_dir, bool as_json);
int list_tenants(const std::string& run_dir);

// The tables `fracgpu status` prints for a "list" reply (exposed for tests).
std::string format_status_table(const nlohmann::json& list_reply);

// One compact table of tenants x GPUs with memory use and every compute column, as
// `fracgpu top` and `fracgpu set` print it; with `only_tenant`, that tenant's rows only.
std::string format_tenant_table(const nlohmann::json& list_reply,
                                const std::string& only_tenant = "");

// The share of a GPU that the weights promise a tenant under full contention: its
// weight over the sum of the weights of the tenants on the same GPU with the same
// priority class, as "70%" or "33.3%"; "prio" for a high-priority tenant; "-" when
// unknown. `device` is one entry of the tenant's devices[].
std::string promised_share(const nlohmann::json& list_reply, const nlohmann::json& device);

// `fracgpu top`: the flags as typed, checked by parse_top_options before anything is
// contacted.
struct TopFlags {
  std::string interval = "1";  // seconds between refreshes, 0.1 .. 3600
  std::string count;           // number of refreshes; empty = until Ctrl-C
};
struct TopSettings {
  double interval_s = 1.0;
  unsigned long count = 0;  // 0 = until Ctrl-C
};
broker::Result<TopSettings> parse_top_options(const TopFlags& flags);

// One refresh of `fracgpu top` (header line with `clock`, GPUs, tenant table).
std::string format_top_frame(const nlohmann::json& list_reply, const std::string& clock,
                             double interval_s);

// Refreshes every interval: clears the screen first when stdout is a terminal, otherwise
// prints successive frames separated by a blank line. Exit 0 (Ctrl-C included), 1 when
// the broker does not answer the first time, 2 for bad flags.
int run_top(const std::string& run_dir, const TopFlags& flags);

}  // namespace fracgpu::cli
