// `fracgpu status [--json]` and `fracgpu tenant list`: what the node broker holds, as
// tables of tenants x GPUs (memory: limit, request, grant, used, peak, processes, OOM
// events; compute: weight, the share the weights promise, ceiling, priority, measured
// share, GPU time, scheduler state) or as the status document of docs/status-api.md.
// Compute fields a broker does not report (an older one) are shown as "-". The document
// comes from fetch_status, which `fracgpu top` (top_command.h) reads too.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
// `fracgpu top` lived here; its declarations are kept visible to includers of this header.

namespace fracgpu::cli {

// The version of the status document (docs/status-api.md): fields are only ever added;
// removing one or changing its meaning bumps it.
inline constexpr int kStatusApiVersion = 1;

// The status document: the broker's "list" reply without "ok", with "api_version". The
// error is one sentence (no broker there, or access denied).
broker::Result<nlohmann::json> fetch_status(const std::string& run_dir);

int show_status(const std::string& run_dir, bool as_json);
int list_tenants(const std::string& run_dir);

// The tables `fracgpu status` prints for a "list" reply (exposed for tests).
std::string format_status_table(const nlohmann::json& list_reply);

// One compact table of tenants x GPUs with memory use and every compute column, as
// `fracgpu set` prints it; with `only_tenant`, that tenant's rows only.
std::string format_tenant_table(const nlohmann::json& list_reply,
                                const std::string& only_tenant = "");
// Its rows: the header, then one per tenant and GPU in the order of tenants[] and their
// devices[]; and rows as aligned columns two spaces apart, one line per row.
using TableRow = std::vector<std::string>;
std::vector<TableRow> tenant_table_rows(const nlohmann::json& list_reply,
                                        const std::string& only_tenant = "");
std::string render_table(const std::vector<TableRow>& rows);

// The share of a GPU that the weights promise a tenant under full contention: its
// weight over the sum of the weights of the tenants on the same GPU with the same
// priority class, as "70%" or "33.3%"; "prio" for a high-priority tenant; "-" when
// unknown. `device` is one entry of the tenant's devices[].
std::string promised_share(const nlohmann::json& list_reply, const nlohmann::json& device);
// The same as a fraction (0..1); nullopt for a high-priority tenant or when unknown.
std::optional<double> promised_fraction(const nlohmann::json& list_reply,
                                        const nlohmann::json& device);

// The weight sums behind promised_share, per GPU and priority class, added up once per
// reply: a table of N tenants asks for N shares, and summing the reply for each one is
// O(N^2) (seconds at 1,000 tenants).
class WeightSums {
 public:
  explicit WeightSums(const nlohmann::json& list_reply);
  std::optional<double> fraction(const nlohmann::json& device) const;
  std::string share(const nlohmann::json& device) const;

 private:
  std::map<std::pair<uint64_t, std::string>, uint64_t> sums_;  // (gpu, priority) -> weights
};

}  // namespace fracgpu::cli
