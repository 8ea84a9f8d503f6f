// Table rendering for status and tenant list. Columns are sized to their content so
// the output stays aligned for any tenant name length.
#include "status_command.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "admin_client.h"
#include "core/quantity_parser.h"

namespace fracgpu::cli {
namespace {

using broker::format_size;
using nlohmann::json;
using Row = std::vector<std::string>;

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

Result<json> fetch_list(const std::string& run_dir) {
  auto client = AdminClient::connect(run_dir, std::chrono::seconds(5));
  if (!client) {
    return Result<json>::failure("no fracgpu broker answers at " + run_dir +
                                 "/admin.sock (start one with: fracgpu broker, or set --run-dir)");
  }
  return client->call({{"op", "list"}});
}

}  // namespace

std::string format_status_table(const json& reply) {
  std::string out;
  std::vector<Row> gpus{{"GPU", "UUID", "NAME", "MEMORY", "CAPACITY"}};
  for (const auto& g : reply.value("gpus", json::array())) {
    gpus.push_back({count_of(g, "index"), g.value("uuid", ""), g.value("name", ""), size_of(g, "memory_total"),
                    size_of(g, "memory_capacity")});
  }
  out += gpus.size() > 1 ? render(gpus) : "no GPU\n";
  const json tenants = reply.value("tenants", json::array());
  if (tenants.empty()) return out + "\nno tenants\n";
  std::vector<Row> rows{{"TENANT", "GPU", "LIMIT", "REQUEST", "GRANT", "USED", "PEAK", "PROCS", "OOM"}};
  for (const auto& t : tenants) {
    const std::string procs = std::to_string(t.value("processes", json::array()).size());
    for (const auto& d : t.value("devices", json::array())) {
      rows.push_back({t.value("name", "?"), count_of(d, "gpu"), size_of(d, "memory_limit"),
                      size_of(d, "memory_request"), size_of(d, "memory_grant"), size_of(d, "memory_used"),
                      size_of(d, "memory_peak"), procs, count_of(d, "oom_events")});
    }
  }
  return out + "\n" + render(rows);
}

int show_status(const std::string& run_dir, bool as_json) {
  auto reply = fetch_list(run_dir);
  if (!reply) {
    std::fprintf(stderr, "fracgpu: %s\n", reply.error().c_str());
    return 1;
  }
  reply->erase("ok");
  std::fputs(as_json ? (reply->dump(2) + "\n").c_str() : format_status_table(*reply).c_str(), stdout);
  return 0;
}

int list_tenants(const std::string& run_dir) {
  auto reply = fetch_list(run_dir);
  if (!reply) {
    std::fprintf(stderr, "fracgpu: %s\n", reply.error().c_str());
    return 1;
  }
  std::vector<Row> rows{{"NAME", "GPUS", "PROCESSES", "SOCKET"}};
  for (const auto& t : reply->value("tenants", json::array())) {
    std::string gpus;
    for (const auto& d : t.value("devices", json::array())) gpus += (gpus.empty() ? "" : ",") + count_of(d, "gpu");
    rows.push_back({t.value("name", "?"), gpus, std::to_string(t.value("processes", json::array()).size()),
                    t.value("socket", "")});
  }
  std::fputs(rows.size() > 1 ? render(rows).c_str() : "no tenants\n", stdout);
  return 0;
}

}  // namespace fracgpu::cli
