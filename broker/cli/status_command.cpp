// The status document (fetch_status) and its tables for status and tenant list.
// Columns are sized to their content so the output stays aligned for any tenant name
// length; with tenant names of up to 12 characters every table fits in 100 columns.
// Cost: linear in the reply (the weight sums behind SHARE are added up once per table,
// arrays are read by reference); at 1,000 tenants the broker's reply dominates.
#include "cli/status_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "client/admin_client.h"
#include "client/run_paths.h"
#include "core/quantity_parser.h"

namespace fracgpu::cli {

using broker::Result;
using client::AdminClient;

namespace {

using broker::format_size;
using nlohmann::json;
using Row = TableRow;

std::string render(const std::vector<Row>& rows) {
  std::vector<std::size_t> width;
  for (const Row& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::ostringstream out;
  for (const Row& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out << line << '\n';
  }
  return out.str();
}

std::string size_of(const json& d, const char* key) {
  return d.contains(key) && d[key].is_number_unsigned() ? format_size(d[key].get<uint64_t>()) : "-";
}

std::string count_of(const json& d, const char* key) {
  return d.contains(key) && d[key].is_number() ? std::to_string(d[key].get<uint64_t>()) : "-";
}

std::string text_of(const json& d, const char* key) {
  return d.contains(key) && d[key].is_string() ? d[key].get<std::string>() : "-";
}

std::string priority_of(const json& d) {
  return d.contains("priority") ? text_of(d, "priority") : "normal";
}

// "70%" for whole numbers, "33.3%" otherwise.
std::string percent(double value) {
  char buf[32];
  if (std::fabs(value - std::round(value)) < 0.05) {
    std::snprintf(buf, sizeof buf, "%.0f%%", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f%%", value);
  }
  return buf;
}

std::string weight_of(const json& d) {
  return count_of(d, "compute");
}

std::string ceiling_of(const json& d) {
  if (!d.contains("compute_limit") || !d["compute_limit"].is_number()) return "-";
  const uint64_t v = d["compute_limit"].get<uint64_t>();
  return v == 0 ? "none" : std::to_string(v) + "%";
}

// compute_measured_share (0..1) as a percentage with one decimal.
std::string measured_of(const json& d) {
  if (!d.contains("compute_measured_share") || !d["compute_measured_share"].is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", d["compute_measured_share"].get<double>() * 100.0);
  return buf;
}

// compute_gpu_seconds: "12.3s", "25m03s", "3h12m".
std::string gpu_time_of(const json& d) {
  if (!d.contains("compute_gpu_seconds") || !d["compute_gpu_seconds"].is_number()) return "-";
  const double s = std::max(0.0, d["compute_gpu_seconds"].get<double>());
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  } else if (s < 3600) {
    const auto whole = static_cast<unsigned long long>(s);
    std::snprintf(buf, sizeof buf, "%llum%02llus", whole / 60, whole % 60);
  } else {
    const auto minutes = static_cast<unsigned long long>(s / 60);
    std::snprintf(buf, sizeof buf, "%lluh%02llum", minutes / 60, minutes % 60);
  }
  return buf;
}

// j[key] when it is an array, else an empty one; by reference (json::value copies).
const json& array_of(const json& j, const char* key) {
  static const json empty = json::array();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

std::string processes_of(const json& t) {
  return std::to_string(array_of(t, "processes").size());
}

bool has_number(const json& d, const char* key) {
  return d.contains(key) && d[key].is_number();
}

}  // namespace

Result<json> fetch_status(const std::string& run_dir) {
  auto client = AdminClient::connect(run_dir, std::chrono::seconds(5));
  if (!client && client::admin_access_denied(client.error()))
    return Result<json>::failure(client.error());
  if (!client) {
    return Result<json>::failure("no fracgpu broker answers at " +
                                 client::admin_socket_path(run_dir).string() +
                                 " (start one with: fracgpu broker, or set --run-dir)");
  }
  auto reply = client->call({{"op", "list"}});
  if (!reply) return reply;
  reply->erase("ok");
  (*reply)["api_version"] = kStatusApiVersion;
  return reply;
}

WeightSums::WeightSums(const json& reply) {
  for (const auto& t : array_of(reply, "tenants")) {
    for (const auto& d : array_of(t, "devices")) {
      if (has_number(d, "gpu") && has_number(d, "compute"))
        sums_[{d["gpu"].get<uint64_t>(), priority_of(d)}] += d["compute"].get<uint64_t>();
    }
  }
}

std::optional<double> WeightSums::fraction(const json& device) const {
  if (!has_number(device, "compute") || !has_number(device, "gpu")) return std::nullopt;
  const std::string prio = priority_of(device);
  if (prio == "high") return std::nullopt;
  auto it = sums_.find({device["gpu"].get<uint64_t>(), prio});
  const uint64_t sum = it == sums_.end() ? 0 : it->second;
  const uint64_t weight = device["compute"].get<uint64_t>();
  if (sum == 0 || weight == 0) return std::nullopt;
  return static_cast<double>(weight) / static_cast<double>(sum);
}

std::string WeightSums::share(const json& device) const {
  if (!has_number(device, "compute") || !has_number(device, "gpu")) return "-";
  if (priority_of(device) == "high") return "prio";
  const auto f = fraction(device);
  return f ? percent(100.0 * *f) : "-";
}

std::optional<double> promised_fraction(const json& reply, const json& device) {
  return WeightSums(reply).fraction(device);
}

std::string promised_share(const json& reply, const json& device) {
  return WeightSums(reply).share(device);
}

std::string format_status_table(const json& reply) {
  std::string out;
  // OUTSIDE: memory held outside every tenant ("-" until the audit read the GPU).
  std::vector<Row> gpus{{"GPU", "UUID", "NAME", "MEMORY", "CAPACITY", "OUTSIDE"}};
  std::string outside_lines;
  for (const auto& g : array_of(reply, "gpus")) {
    const json outside = g.value("outside", json::object());
    gpus.push_back({count_of(g, "index"), g.value("uuid", ""), g.value("name", ""),
                    size_of(g, "memory_total"), size_of(g, "memory_capacity"),
                    size_of(outside, "bytes")});
    for (const auto& p : outside.value("processes", json::array()))
      outside_lines += "\noutside: pid " + count_of(p, "pid") + " holds " + size_of(p, "bytes") +
                       " of GPU " + count_of(g, "index") + " in no tenant";
    const uint64_t reported = outside.value("violations", json::object()).value("total", 0ull);
    if (reported > 0)
      outside_lines += "\nwarning: GPU " + count_of(g, "index") + ": " + std::to_string(reported) +
                       " outside violation(s) (--fracgpu-only)";
  }
  out += gpus.size() > 1 ? render(gpus) : "no GPU\n";
  if (!outside_lines.empty()) out += outside_lines.substr(1) + "\n";
  const json& tenants = array_of(reply, "tenants");
  if (tenants.empty()) return out + "\nno tenants\n";
  const WeightSums weights(reply);
  std::vector<Row> memory{
      {"TENANT", "GPU", "LIMIT", "REQUEST", "GRANT", "USED", "PEAK", "PROCS", "OOM"}};
  std::vector<Row> compute{
      {"TENANT", "GPU", "WEIGHT", "SHARE", "CEILING", "PRIORITY", "MEASURED", "GPU-TIME", "STATE"}};
  for (const auto& t : tenants) {
    const std::string name = t.value("name", "?");
    for (const auto& d : array_of(t, "devices")) {
      memory.push_back({name, count_of(d, "gpu"), size_of(d, "memory_limit"),
                        size_of(d, "memory_request"), size_of(d, "memory_grant"),
                        size_of(d, "memory_used"), size_of(d, "memory_peak"), processes_of(t),
                        count_of(d, "oom_events")});
      compute.push_back({name, count_of(d, "gpu"), weight_of(d), weights.share(d), ceiling_of(d),
                         priority_of(d), measured_of(d), gpu_time_of(d),
                         text_of(d, "compute_state")});
    }
  }
  out += "\n" + render(memory) + "\n" + render(compute);
  // Tenants of tenants.json the broker could not restore (--keep-going): not served.
  for (const auto& t : tenants) {
    if (t.value("quarantined", false))
      out += "\nquarantined: tenant " + t.value("name", std::string("?")) +
             " is not served: " + t.value("reason", std::string("?"));
  }
  // The broker's audit and books check (issue 12): one warning line per tenant caught.
  for (const auto& t : tenants) {
    const json v = t.value("violations", json::object());
    const uint64_t total = v.value("total", uint64_t{0});
    if (total == 0) continue;
    std::string kinds;
    const json by_kind = v.value("by_kind", json::object());
    for (const auto& [kind, n] : by_kind.items()) {
      if (!n.is_number_unsigned() || n.get<uint64_t>() == 0) continue;
      if (!kinds.empty()) kinds += ", ";
      kinds += kind + " " + std::to_string(n.get<uint64_t>());
    }
    out += "\nwarning: tenant " + t.value("name", std::string("?")) + ": " + std::to_string(total) +
           " violation(s) (" + kinds + ")";
    const json recent = v.value("recent", json::array());
    if (!recent.empty()) {
      const json& last = recent.back();
      out += "; latest: " + last.value("kind", std::string("?")) + ", pid " +
             std::to_string(last.value("pid", 0)) + " on GPU " +
             std::to_string(last.value("gpu", 0)) + ", " + last.value("action", std::string("?"));
    }
    if (v.value("flagged", false)) out += "; bursts refused";
    out += "\n";
  }
  return out;
}

std::vector<TableRow> tenant_table_rows(const json& reply, const std::string& only_tenant) {
  std::vector<Row> rows{{"TENANT", "GPU", "PROCS", "USED", "LIMIT", "WEIGHT", "SHARE", "CEIL",
                         "PRIO", "MEASURED", "GPU-TIME", "STATE"}};
  const WeightSums weights(reply);
  for (const auto& t : array_of(reply, "tenants")) {
    const std::string name = t.value("name", "?");
    if (!only_tenant.empty() && name != only_tenant) continue;
    for (const auto& d : array_of(t, "devices")) {
      rows.push_back({name, count_of(d, "gpu"), processes_of(t), size_of(d, "memory_used"),
                      size_of(d, "memory_limit"), weight_of(d), weights.share(d), ceiling_of(d),
                      priority_of(d), measured_of(d), gpu_time_of(d), text_of(d, "compute_state")});
    }
  }
  return rows;
}

std::string render_table(const std::vector<TableRow>& rows) {
  return render(rows);
}

std::string format_tenant_table(const json& reply, const std::string& only_tenant) {
  const auto rows = tenant_table_rows(reply, only_tenant);
  return rows.size() > 1 ? render(rows) : "no tenants\n";
}

int show_status(const std::string& run_dir, bool as_json) {
  auto reply = fetch_status(run_dir);
  if (!reply) {
    std::fprintf(stderr, "fracgpu: %s\n", reply.error().c_str());
    return 1;
  }
  std::fputs(as_json ? (reply->dump(2) + "\n").c_str() : format_status_table(*reply).c_str(),
             stdout);
  return 0;
}

int list_tenants(const std::string& run_dir) {
  auto reply = fetch_status(run_dir);
  if (!reply) {
    std::fprintf(stderr, "fracgpu: %s\n", reply.error().c_str());
    return 1;
  }
  std::vector<Row> rows{{"NAME", "GPUS", "PROCESSES", "SOCKET"}};
  for (const auto& t : array_of(*reply, "tenants")) {
    std::string gpus;
    for (const auto& d : array_of(t, "devices")) {
      if (!gpus.empty()) gpus += ',';  // not operator+ on a literal: GCC 12's false -Wrestrict
      gpus += count_of(d, "gpu");
    }
    rows.push_back({t.value("name", "?"), gpus,
                    std::to_string(t.value("processes", json::array()).size()),
                    t.value("socket", "")});
  }
  std::fputs(rows.size() > 1 ? render(rows).c_str() : "no tenants\n", stdout);
  return 0;
}

}  // namespace fracgpu::cli
