// The CLI's compute views without a broker: the tables of `fracgpu status`, `top` and
// `set` rendered from canned "list" replies (with the scheduler's fields and without
// them, as an older broker sends), the share the weights promise, `top`'s flags, and
// the --compute-limit forms (none, 0 for a change, high priority without a ceiling).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_options.h"
#include "cli/status_command.h"
#include "cli/top_command.h"

namespace fracgpu::cli {
namespace {

using nlohmann::json;

json device(unsigned gpu, unsigned weight, const char* priority, unsigned ceiling = 0) {
  return {{"gpu", gpu},
          {"memory_limit", 4ull << 30},
          {"memory_request", 2ull << 30},
          {"memory_grant", 2ull << 30},
          {"memory_used", 1ull << 29},
          {"memory_peak", 1ull << 30},
          {"oom_events", 0},
          {"compute", weight},
          {"compute_limit", ceiling},
          {"priority", priority}};
}

json tenant(const std::string& name, std::vector<json> devices, unsigned processes = 1) {
  json procs = json::array();
  for (unsigned i = 0; i < processes; ++i) procs.push_back({{"pid", 100 + i}, {"slot", i}});
  return {{"name", name},
          {"devices", devices},
          {"processes", procs},
          {"socket", "/run/fracgpu/x/broker.sock"}};
}

json with_measurements(json d, double share, double seconds, const char* state) {
  d["compute_measured_share"] = share;
  d["compute_gpu_seconds"] = seconds;
  d["compute_state"] = state;
  return d;
}

// A GPU with three normal tenants 60/30/10, a high one, two low ones; a second GPU
// with one tenant.
json canned_reply(bool measured) {
  auto m = [&](json d, double share, double seconds, const char* state) {
    return measured ? with_measurements(std::move(d), share, seconds, state) : d;
  };
  json tenants = json::array();
  tenants.push_back(tenant("training", {m(device(0, 60, "normal"), 0.598, 12.34, "granted"),
                                        m(device(1, 60, "normal"), 0.999, 125.0, "granted")}));
  tenants.push_back(tenant("inference", {m(device(0, 30, "normal", 50), 0.301, 6.0, "waiting")}));
  tenants.push_back(tenant("notebook", {m(device(0, 10, "normal"), 0.0, 7300.0, "idle")}, 0));
  tenants.push_back(tenant("serving", {m(device(0, 100, "high"), 0.1, 1.0, "draining")}));
  tenants.push_back(tenant("batch-a", {m(device(0, 10, "low"), 0.0, 0.0, "waiting")}));
  tenants.push_back(tenant("batch-b", {m(device(0, 20, "low"), 0.0, 0.0, "waiting")}));
  json gpus = json::array();
  gpus.push_back({{"index", 0},
                  {"uuid", "GPU-0000"},
                  {"name", "Simulated"},
                  {"memory_total", 16ull << 30},
                  {"memory_capacity", 16ull << 30}});
  gpus.push_back({{"index", 1},
                  {"uuid", "GPU-0001"},
                  {"name", "Simulated"},
                  {"memory_total", 16ull << 30},
                  {"memory_capacity", 16ull << 30}});
  return {{"tenants", tenants}, {"gpus", gpus}};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The cells of the table row of `tenant` on `gpu` under the header that starts with
// `first_header`, by column name (tables of this CLI never have spaces inside cells
// except sizes, "512 MiB", so rows are read by the header's column offsets).
std::map<std::string, std::string> row(const std::string& text, const std::string& header_word,
                                       const std::string& tenant_name, const std::string& gpu) {
  const auto lines = lines_of(text);
  for (std::size_t h = 0; h < lines.size(); ++h) {
    const auto head = words(lines[h]);
    if (head.size() < 2 || head[0] != "TENANT" ||
        std::find(head.begin(), head.end(), header_word) == head.end()) {
      continue;
    }
    std::vector<std::size_t> offsets;
    for (const auto& name : head)
      offsets.push_back(lines[h].find(name, offsets.empty() ? 0 : offsets.back() + 1));
    for (std::size_t r = h + 1; r < lines.size() && !lines[r].empty(); ++r) {
      std::map<std::string, std::string> cells;
      for (std::size_t c = 0; c < head.size(); ++c) {
        const std::size_t from = offsets[c];
        const std::size_t to = c + 1 < head.size() ? offsets[c + 1] : std::string::npos;
        std::string cell = from < lines[r].size()
                               ? lines[r].substr(from, to == std::string::npos ? to : to - from)
                               : "";
        while (!cell.empty() && cell.back() == ' ') cell.pop_back();
        cells[head[c]] = cell;
      }
      if (cells["TENANT"] == tenant_name && cells["GPU"] == gpu) return cells;
    }
  }
  return {};
}

TEST(PromisedShare, WeightOverSumWithinGpuAndClass) {
  const json reply = canned_reply(true);
  const json& t = reply["tenants"];
  EXPECT_EQ(promised_share(reply, t[0]["devices"][0]), "60%");  // 60 / (60+30+10)
  EXPECT_EQ(promised_share(reply, t[1]["devices"][0]), "30%");
  EXPECT_EQ(promised_share(reply, t[2]["devices"][0]), "10%");
  EXPECT_EQ(promised_share(reply, t[0]["devices"][1]), "100%");   // alone on GPU 1
  EXPECT_EQ(promised_share(reply, t[3]["devices"][0]), "prio");   // high
  EXPECT_EQ(promised_share(reply, t[4]["devices"][0]), "33.3%");  // low: 10 / (10+20)
  EXPECT_EQ(promised_share(reply, t[5]["devices"][0]), "66.7%");
  EXPECT_EQ(promised_share(reply, json{{"gpu", 0}}), "-");  // no weight reported
}

TEST(StatusTable, ComputeColumnsFromTheBroker) {
  const std::string table = format_status_table(canned_reply(true));
  auto r = row(table, "WEIGHT", "training", "0");
  ASSERT_FALSE(r.empty()) << table;
  EXPECT_EQ(r["WEIGHT"], "60");
  EXPECT_EQ(r["SHARE"], "60%");
  EXPECT_EQ(r["CEILING"], "none");
  EXPECT_EQ(r["PRIORITY"], "normal");
  EXPECT_EQ(r["MEASURED"], "59.8%");
  EXPECT_EQ(r["GPU-TIME"], "12.3s");
  EXPECT_EQ(r["STATE"], "granted");
  r = row(table, "WEIGHT", "inference", "0");
  EXPECT_EQ(r["CEILING"], "50%");
  EXPECT_EQ(r["STATE"], "waiting");
  EXPECT_EQ(row(table, "WEIGHT", "training", "1")["GPU-TIME"], "2m05s");
  EXPECT_EQ(row(table, "WEIGHT", "notebook", "0")["GPU-TIME"], "2h01m");
  EXPECT_EQ(row(table, "WEIGHT", "serving", "0")["SHARE"], "prio");
  EXPECT_EQ(row(table, "WEIGHT", "serving", "0")["PRIORITY"], "high");
  // The memory table is still there.
  r = row(table, "LIMIT", "training", "0");
  EXPECT_EQ(r["LIMIT"], "4 GiB");
  EXPECT_EQ(r["USED"], "512 MiB");
  EXPECT_EQ(r["PROCS"], "1");
  for (const auto& line : lines_of(table)) EXPECT_LE(line.size(), 100u) << line;
}

TEST(StatusTable, OlderBrokerWithoutMeasurementsShowsDashes) {
  const std::string table = format_status_table(canned_reply(false));
  auto r = row(table, "WEIGHT", "training", "0");
  ASSERT_FALSE(r.empty()) << table;
  EXPECT_EQ(r["SHARE"], "60%");
  EXPECT_EQ(r["MEASURED"], "-");
  EXPECT_EQ(r["GPU-TIME"], "-");
  EXPECT_EQ(r["STATE"], "-");
  EXPECT_NE(format_status_table(json{{"gpus", json::array()}}).find("no tenants"),
            std::string::npos);
}

TEST(TenantTable, OneTenantOrAll) {
  const json reply = canned_reply(true);
  const std::string all = format_tenant_table(reply);
  EXPECT_EQ(lines_of(all).size(), 1u + 7u) << all;  // header + 7 tenant x GPU rows
  const std::string one = format_tenant_table(reply, "training");
  ASSERT_EQ(lines_of(one).size(), 3u) << one;
  auto r = row(one, "WEIGHT", "training", "1");
  EXPECT_EQ(r["SHARE"], "100%");
  EXPECT_EQ(r["MEASURED"], "99.9%");
  EXPECT_EQ(r["CEIL"], "none");
  EXPECT_EQ(r["PRIO"], "normal");
  EXPECT_EQ(r["USED"], "512 MiB");
  EXPECT_EQ(r["LIMIT"], "4 GiB");
  for (const auto& line : lines_of(all)) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_EQ(format_tenant_table(reply, "nobody"), "no tenants\n");
}

TEST(TopFrame, HeaderGpusAndTenants) {
  const std::string frame = format_top_frame(canned_reply(true), "12:34:56", 0.5);
  const auto lines = lines_of(frame);
  ASSERT_GE(lines.size(), 4u) << frame;
  EXPECT_NE(lines[0].find("12:34:56"), std::string::npos) << frame;
  EXPECT_NE(lines[0].find("every 0.5s"), std::string::npos) << frame;
  // GPU 0: 0.598 + 0.301 + 0 + 0.1 + 0 + 0 busy; 6 tenants.
  EXPECT_NE(frame.find("GPU 0  Simulated  memory 3 GiB of 16 GiB  6 tenants  busy 99.9%"),
            std::string::npos)
      << frame;
  EXPECT_NE(frame.find("GPU 1  Simulated  memory 512 MiB of 16 GiB  1 tenant  busy 99.9%"),
            std::string::npos)
      << frame;
  EXPECT_EQ(row(frame, "MEASURED", "inference", "0")["MEASURED"], "30.1%");
  EXPECT_EQ(frame.find('\033'),
            std::string::npos);  // the screen is cleared by run_top, on a terminal only
  const std::string old = format_top_frame(canned_reply(false), "12:34:56", 1);
  EXPECT_NE(old.find("busy -"), std::string::npos) << old;
}

TEST(TopOptions, IntervalAndCount) {
  auto ok = parse_top_options({});
  ASSERT_TRUE(ok.ok());
  EXPECT_DOUBLE_EQ(ok->interval_s, 1.0);
  EXPECT_EQ(ok->count, 0u);
  ok = parse_top_options({"0.25", "3"});
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_DOUBLE_EQ(ok->interval_s, 0.25);
  EXPECT_EQ(ok->count, 3u);
  for (const char* bad : {"0", "0.05", "-1", "abc", "1s", "", "nan", "inf", "3601"}) {
    auto r = parse_top_options({bad, ""});
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().find("--interval"), std::string::npos) << r.error();
    }
  }
  for (const char* bad : {"0", "-2", "x", "1.5", "9999999999"}) {
    auto r = parse_top_options({"1", bad});
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().find("--count"), std::string::npos) << r.error();
    }
  }
}

TEST(ComputeLimitFlag, NoneZeroAndHighPriority) {
  QuotaFlags f;
  f.memory = "1GiB";
  f.compute_limit = "none";
  auto d = device_entries(f, {0}, /*partial=*/false);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ((*d)[0]["compute_limit"], 0);
  f.compute_limit = "NONE";
  EXPECT_TRUE(device_entries(f, {0}, true).ok());
  // 0 removes a ceiling in a change, but is refused when creating (reads as "no compute").
  f.compute_limit = "0";
  d = device_entries(f, {0}, /*partial=*/true);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ((*d)[0]["compute_limit"], 0);
  f.compute_limit = "0%";
  EXPECT_TRUE(device_entries(f, {0}, true).ok());
  d = device_entries(f, {0}, false);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().find("none"), std::string::npos) << d.error();
  f.compute_limit = "150";
  d = device_entries(f, {0}, true);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().find("--compute-limit '150'"), std::string::npos) << d.error();
  f.compute_limit = "50%";
  d = device_entries(f, {0}, true);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)[0]["compute_limit"], 50);
  // A high-priority tenant may not have a ceiling; "none" with high is fine.
  f.priority = "high";
  d = device_entries(f, {0}, true);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().find("--priority high"), std::string::npos) << d.error();
  f.compute_limit = "none";
  EXPECT_TRUE(device_entries(f, {0}, true).ok());
  f.compute_limit.clear();
  EXPECT_TRUE(device_entries(f, {0}, true).ok());  // the broker judges high + an existing ceiling
}

}  // namespace
}  // namespace fracgpu::cli
