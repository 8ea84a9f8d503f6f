// Table rendering for status, top and tenant list. Columns are sized to their content
// so the output stays aligned for any tenant name length; with tenant names of up to
// 12 characters every table fits in 100 columns.
#include "cli/status_command.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>
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
  if (!client && client::admin_access_denied(client.error()))
    return Result<json>::failure(client.error());
  if (!client) {
    return Result<json>::failure("no fracgpu broker answers at " +
                                 client::admin_socket_path(run_dir).string() +
                                 " (start one with: fracgpu broker, or set --run-dir)");
  }
  return client->call({{"op", "list"}});
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

std::string processes_of(const json& t) {
  return std::to_string(t.value("processes", json::array()).size());
}

bool has_number(const json& d, const char* key) {
  return d.contains(key) && d[key].is_number();
}

std::string one_decimal(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", value);
  return buf;
}

}  // namespace

std::string promised_share(const json& reply, const json& device) {
  if (!has_number(device, "compute") || !has_number(device, "gpu")) return "-";
  const std::string prio = priority_of(device);
  if (prio == "high") return "prio";
  const uint64_t gpu = device["gpu"].get<uint64_t>();
  uint64_t sum = 0;
  for (const auto& t : reply.value("tenants", json::array())) {
    for (const auto& d : t.value("devices", json::array())) {
      if (has_number(d, "gpu") && d["gpu"].get<uint64_t>() == gpu && has_number(d, "compute") &&
          priority_of(d) == prio) {
        sum += d["compute"].get<uint64_t>();
      }
    }
  }
  const uint64_t weight = device["compute"].get<uint64_t>();
  if (sum == 0 || weight == 0) return "-";
  return percent(100.0 * static_cast<double>(weight) / static_cast<double>(sum));
}

std::string format_status_table(const json& reply) {
  std::string out;
  std::vector<Row> gpus{{"GPU", "UUID", "NAME", "MEMORY", "CAPACITY"}};
  for (const auto& g : reply.value("gpus", json::array())) {
    gpus.push_back({count_of(g, "index"), g.value("uuid", ""), g.value("name", ""),
                    size_of(g, "memory_total"), size_of(g, "memory_capacity")});
  }
  out += gpus.size() > 1 ? render(gpus) : "no GPU\n";
  const json tenants = reply.value("tenants", json::array());
  if (tenants.empty()) return out + "\nno tenants\n";
  std::vector<Row> memory{
      {"TENANT", "GPU", "LIMIT", "REQUEST", "GRANT", "USED", "PEAK", "PROCS", "OOM"}};
  std::vector<Row> compute{
      {"TENANT", "GPU", "WEIGHT", "SHARE", "CEILING", "PRIORITY", "MEASURED", "GPU-TIME", "STATE"}};
  for (const auto& t : tenants) {
    const std::string name = t.value("name", "?");
    for (const auto& d : t.value("devices", json::array())) {
      memory.push_back({name, count_of(d, "gpu"), size_of(d, "memory_limit"),
                        size_of(d, "memory_request"), size_of(d, "memory_grant"),
                        size_of(d, "memory_used"), size_of(d, "memory_peak"), processes_of(t),
                        count_of(d, "oom_events")});
      compute.push_back({name, count_of(d, "gpu"), weight_of(d), promised_share(reply, d),
                         ceiling_of(d), priority_of(d), measured_of(d), gpu_time_of(d),
                         text_of(d, "compute_state")});
    }
  }
  out += "\n" + render(memory) + "\n" + render(compute);
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

std::string format_tenant_table(const json& reply, const std::string& only_tenant) {
  std::vector<Row> rows{{"TENANT", "GPU", "PROCS", "USED", "LIMIT", "WEIGHT", "SHARE", "CEIL",
                         "PRIO", "MEASURED", "GPU-TIME", "STATE"}};
  for (const auto& t : reply.value("tenants", json::array())) {
    const std::string name = t.value("name", "?");
    if (!only_tenant.empty() && name != only_tenant) continue;
    for (const auto& d : t.value("devices", json::array())) {
      rows.push_back({name, count_of(d, "gpu"), processes_of(t), size_of(d, "memory_used"),
                      size_of(d, "memory_limit"), weight_of(d), promised_share(reply, d),
                      ceiling_of(d), priority_of(d), measured_of(d), gpu_time_of(d),
                      text_of(d, "compute_state")});
    }
  }
  return rows.size() > 1 ? render(rows) : "no tenants\n";
}

std::string format_top_frame(const json& reply, const std::string& clock, double interval_s) {
  char head[160];
  std::snprintf(head, sizeof head, "fracgpu top  %s  every %gs  (Ctrl-C quits)\n", clock.c_str(),
                interval_s);
  std::string out = head;
  const json tenants = reply.value("tenants", json::array());
  const json gpus = reply.value("gpus", json::array());
  if (gpus.empty()) out += "no GPU\n";
  for (const auto& g : gpus) {
    const uint64_t index = has_number(g, "index") ? g["index"].get<uint64_t>() : 0;
    uint64_t used = 0;
    double busy = 0;
    bool measured = false;
    unsigned count = 0;
    for (const auto& t : tenants) {
      for (const auto& d : t.value("devices", json::array())) {
        if (!has_number(d, "gpu") || d["gpu"].get<uint64_t>() != index) continue;
        ++count;
        if (has_number(d, "memory_used")) used += d["memory_used"].get<uint64_t>();
        if (has_number(d, "compute_measured_share")) {
          busy += d["compute_measured_share"].get<double>();
          measured = true;
        }
      }
    }
    char line[256];
    std::snprintf(line, sizeof line, "GPU %llu  %s  memory %s of %s  %u tenant%s  busy %s\n",
                  static_cast<unsigned long long>(index), g.value("name", "").c_str(),
                  format_size(used).c_str(), size_of(g, "memory_capacity").c_str(), count,
                  count == 1 ? "" : "s", measured ? one_decimal(busy * 100.0).c_str() : "-");
    out += line;
  }
  return out + "\n" + format_tenant_table(reply);
}

int show_status(const std::string& run_dir, bool as_json) {
  auto reply = fetch_list(run_dir);
  if (!reply) {
    std::fprintf(stderr, "fracgpu: %s\n", reply.error().c_str());
    return 1;
  }
  reply->erase("ok");
  std::fputs(as_json ? (reply->dump(2) + "\n").c_str() : format_status_table(*reply).c_str(),
             stdout);
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
    for (const auto& d : t.value("devices", json::array())) {
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

Result<TopSettings> parse_top_options(const TopFlags& flags) {
  TopSettings settings;
  {
    const std::string& text = flags.interval;
    char* end = nullptr;
    errno = 0;
    const double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
    if (text.empty() || errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(v) ||
        v < 0.1 || v > 3600) {
      return Result<TopSettings>::failure(
          "--interval '" + text.substr(0, 40) +
          "' must be a number of seconds from 0.1 to 3600 (e.g. 1 or 0.5)");
    }
    settings.interval_s = v;
  }
  if (!flags.count.empty()) {
    const std::string& text = flags.count;
    const bool digits =
        text.size() <= 9 &&
        std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
    const unsigned long v = digits ? std::strtoul(text.c_str(), nullptr, 10) : 0;
    if (v == 0) {
      return Result<TopSettings>::failure(
          "--count '" + text.substr(0, 40) +
          "' must be a whole number of refreshes from 1 to 999999999");
    }
    settings.count = v;
  }
  return settings;
}

namespace {

std::atomic<bool> g_top_stop{false};

void request_top_stop(int) {
  g_top_stop.store(true);
}

std::string wall_clock() {
  const time_t now = time(nullptr);
  struct tm local {};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

}  // namespace

int run_top(const std::string& run_dir, const TopFlags& flags) {
  auto settings = parse_top_options(flags);
  if (!settings) {
    std::fprintf(stderr, "fracgpu: %s\n", settings.error().c_str());
    return 2;
  }
  const bool tty = isatty(STDOUT_FILENO) == 1;
  struct sigaction action {};
  action.sa_handler = request_top_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(settings->interval_s));
  auto next = std::chrono::steady_clock::now();
  for (unsigned long frame = 0; settings->count == 0 || frame < settings->count; ++frame) {
    if (frame > 0) {
      next += period;
      while (!g_top_stop.load() && std::chrono::steady_clock::now() < next) {
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            next - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
      }
    }
    if (g_top_stop.load()) break;
    auto reply = fetch_list(run_dir);
    if (!reply && frame == 0) {
      std::fprintf(stderr, "fracgpu: %s\n", reply.error().c_str());
      return 1;
    }
    std::string text = reply ? format_top_frame(*reply, wall_clock(), settings->interval_s)
                             : "fracgpu top  " + wall_clock() + "  " + reply.error() + "\n";
    if (tty) {
      text = "\033[H\033[2J" + text;
    } else if (frame > 0) {
      text = "\n" + text;
    }
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace fracgpu::cli
