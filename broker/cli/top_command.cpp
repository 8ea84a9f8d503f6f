// The frames and the refresh loop of `fracgpu top` (see top_command.h). A frame is built
// from one status document; the bars of a frame all have the same widths so that they
// line up, and only the bars carry colour, so column widths are those of plain text.
#include "cli/top_command.h"

#include <signal.h>
#include <sys/ioctl.h>
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
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "cli/status_command.h"
#include "core/quantity_parser.h"

namespace fracgpu::cli {

using broker::Result;
using nlohmann::json;

namespace {

constexpr int kDefaultWidth = 80;
constexpr int kMinBarCells = 10;
constexpr int kMaxBarCells = 50;
// The bar line without its bars: "  memory [] 100%   compute [] 100.0%".
constexpr int kBarLineText = 36;
// A broker that has not answered for this long, and two refreshes in a row, has gone.
constexpr auto kGoneAfter = std::chrono::seconds(3);

constexpr const char* kReset = "\033[0m";
constexpr const char* kGreen = "\033[32m";
constexpr const char* kYellow = "\033[33m";
constexpr const char* kRed = "\033[31m";
constexpr const char* kCyan = "\033[36m";
constexpr const char* kBold = "\033[1m";

bool has_number(const json& d, const char* key) {
  return d.is_object() && d.contains(key) && d[key].is_number();
}

uint64_t bytes_of(const json& d, const char* key) {
  return d.is_object() && d.contains(key) && d[key].is_number_unsigned() ? d[key].get<uint64_t>()
                                                                         : 0;
}

std::string size_or_dash(const json& d, const char* key) {
  return d.is_object() && d.contains(key) && d[key].is_number_unsigned()
             ? broker::format_size(d[key].get<uint64_t>())
             : "-";
}

std::string one_decimal(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", value);
  return buf;
}

// Filled cells for `fraction`: at least one for anything above 0, all from 1 on.
int filled_cells(double fraction, int cells) {
  if (!(fraction > 0)) return 0;
  return std::clamp(static_cast<int>(std::lround(fraction * cells)), 1, cells);
}

// The last cell within `fraction`, or -1 for none.
int marker_cell(std::optional<double> fraction, int cells) {
  if (!fraction || !(*fraction > 0)) return -1;
  return std::clamp(static_cast<int>(std::ceil(*fraction * cells)) - 1, 0, cells - 1);
}

std::string bar(int filled, int marker, int cells, const char* fill_color, bool color) {
  std::string out = "[";
  const char* current = nullptr;
  for (int i = 0; i < cells; ++i) {
    const bool is_marker = i == marker;
    const char* want = is_marker ? kBold : i < filled ? fill_color : nullptr;
    if (color && want != current) {
      if (current != nullptr) out += kReset;
      if (want != nullptr) out += want;
      current = want;
    }
    out += is_marker ? '|' : i < filled ? '#' : '.';
  }
  if (color && current != nullptr) out += kReset;
  return out + "]";
}

// `line` cut after `width` visible characters (escape sequences take no room).
std::string cut(const std::string& line, int width) {
  std::string out;
  int visible = 0;
  bool escaped = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\033') {
      const std::size_t end = line.find('m', i);
      if (end == std::string::npos) break;
      out += line.substr(i, end - i + 1);
      escaped = true;
      i = end;
      continue;
    }
    if (visible == width) break;
    out += line[i];
    ++visible;
  }
  if (escaped && out.size() < line.size()) out += kReset;
  return out;
}

std::string pod_text(const json& tenant) {
  const json pod = tenant.value("pod", json::object());
  if (!pod.is_object() || !pod.contains("pod")) return "";
  return pod.value("namespace", std::string()) + "/" + pod.value("pod", std::string()) + "/" +
         pod.value("container", std::string());
}

struct BarWidths {
  int memory = kMinBarCells;
  int compute = kMinBarCells;
  bool with_pod = false;
};

// The bars share what the width leaves; the pods' text is counted in when it leaves
// room for bars of the minimum width.
BarWidths bar_widths(int width, std::size_t longest_pod) {
  BarWidths w;
  int room = width - kBarLineText;
  const int pod_room = longest_pod == 0 ? 0 : static_cast<int>(longest_pod) + 3;
  if (pod_room > 0 && room - pod_room >= 2 * kMinBarCells) {
    room -= pod_room;
    w.with_pod = true;
  }
  w.memory = std::clamp(room / 2, kMinBarCells, kMaxBarCells);
  w.compute = std::clamp(room - room / 2, kMinBarCells, kMaxBarCells);
  return w;
}

std::string bar_line(const json& status, const json& tenant, const json& device,
                     const BarWidths& widths, bool color) {
  const uint64_t limit = bytes_of(device, "memory_limit");
  const uint64_t used = bytes_of(device, "memory_used");
  char memory_pct[16] = "   -";
  if (limit > 0)
    std::snprintf(memory_pct, sizeof memory_pct, "%3.0f%%",
                  std::min(999.0, 100.0 * static_cast<double>(used) / static_cast<double>(limit)));
  const bool measured = has_number(device, "compute_measured_share");
  const double share = measured ? device["compute_measured_share"].get<double>() : 0.0;
  char compute_pct[16] = "     -";
  if (measured) std::snprintf(compute_pct, sizeof compute_pct, "%5.1f%%", share * 100.0);
  std::string line =
      "  memory " +
      memory_bar(used, limit, bytes_of(device, "memory_request"), widths.memory, color) + " " +
      memory_pct + "   compute " +
      compute_bar(share, promised_fraction(status, device), widths.compute, color) + " " +
      compute_pct;
  const std::string pod = pod_text(tenant);
  if (!pod.empty()) line += "   " + pod;
  return line;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The header and one line per GPU: its memory in use and how busy the tenants keep it.
std::string gpu_lines(const json& status) {
  std::string out;
  const json tenants = status.value("tenants", json::array());
  const json gpus = status.value("gpus", json::array());
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
        used += bytes_of(d, "memory_used");
        if (has_number(d, "compute_measured_share")) {
          busy += d["compute_measured_share"].get<double>();
          measured = true;
        }
      }
    }
    char line[256];
    std::snprintf(line, sizeof line, "GPU %llu  %s  memory %s of %s  %u tenant%s  busy %s\n",
                  static_cast<unsigned long long>(index), g.value("name", "").c_str(),
                  broker::format_size(used).c_str(), size_or_dash(g, "memory_capacity").c_str(),
                  count, count == 1 ? "" : "s", measured ? one_decimal(busy * 100.0).c_str() : "-");
    out += line;
  }
  return out;
}

// Rows of the tenant table, each followed by its bar line.
std::string tenant_lines(const json& status, const TopStyle& style) {
  const auto rows = tenant_table_rows(status);
  if (rows.size() <= 1) return "no tenants\n";
  std::vector<std::pair<const json*, const json*>> order;  // tenant, device: the rows' order
  std::size_t longest_pod = 0;
  const json tenants = status.value("tenants", json::array());
  const json no_devices = json::array();
  for (const auto& t : tenants) {
    longest_pod = std::max(longest_pod, pod_text(t).size());
    const json& devices = t.is_object() && t.contains("devices") ? t["devices"] : no_devices;
    if (!devices.is_array()) continue;
    for (const auto& d : devices) order.emplace_back(&t, &d);
  }
  const auto table = lines_of(render_table(rows));
  const BarWidths widths = bar_widths(style.width, longest_pod);
  std::string out = table[0] + "\n";
  for (std::size_t i = 0; i + 1 < table.size() && i < order.size(); ++i) {
    out += table[i + 1] + "\n";
    std::string bars = bar_line(status, *order[i].first, *order[i].second, widths, style.color);
    out += bars + "\n";
  }
  return out + "\nbars: # memory used or measured share, | guaranteed request or promised share\n";
}

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

std::string cut_lines(const std::string& text, int width) {
  std::string out;
  for (const auto& line : lines_of(text)) out += cut(line, width) + "\n";
  return out;
}

// Sleeps until `until`, or until Ctrl-C.
void wait_until(std::chrono::steady_clock::time_point until) {
  while (!g_top_stop.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        until - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
  }
}

}  // namespace

std::string memory_bar(uint64_t used, uint64_t limit, uint64_t request, int cells, bool color) {
  cells = std::max(cells, 1);
  if (limit == 0) return bar(0, -1, cells, nullptr, false);
  const double l = static_cast<double>(limit);
  const char* fill = static_cast<double>(used) >= 0.95 * l ? kRed
                     : used > request                      ? kYellow
                                                           : kGreen;
  return bar(filled_cells(static_cast<double>(used) / l, cells),
             request > 0 ? marker_cell(static_cast<double>(request) / l, cells) : -1, cells, fill,
             color);
}

std::string compute_bar(double measured, std::optional<double> promised, int cells, bool color) {
  cells = std::max(cells, 1);
  return bar(filled_cells(measured, cells), marker_cell(promised, cells), cells, kCyan, color);
}

int terminal_width(int fd) {
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr && *columns != '\0') {
    char* end = nullptr;
    const long v = std::strtol(columns, &end, 10);
    if (end != nullptr && *end == '\0' && v >= 20 && v <= 1000) return static_cast<int>(v);
  }
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col >= 20) return size.ws_col;
  return kDefaultWidth;
}

std::string format_top_frame(const json& status, const std::string& clock, double interval_s,
                             const TopStyle& style) {
  char head[160];
  std::snprintf(head, sizeof head, "fracgpu top  %s  every %gs  (Ctrl-C quits)\n", clock.c_str(),
                interval_s);
  std::string out = head + gpu_lines(status) + "\n" + tenant_lines(status, style);
  return style.truncate ? cut_lines(out, style.width) : out;
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
    if (flags.once) {
      return Result<TopSettings>::failure(
          "--once and --count cannot be combined (--once prints one frame)");
    }
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
  settings.once = flags.once;
  if (settings.once) settings.count = 1;
  return settings;
}

int run_top(const std::string& run_dir, const TopFlags& flags) {
  auto settings = parse_top_options(flags);
  if (!settings) {
    std::fprintf(stderr, "fracgpu: %s\n", settings.error().c_str());
    return 2;
  }
  const bool tty = isatty(STDOUT_FILENO) == 1;
  const char* no_color = std::getenv("NO_COLOR");  // https://no-color.org
  const bool color = tty && (no_color == nullptr || *no_color == '\0');
  const bool clear = tty && !settings->once;
  struct sigaction action {};
  action.sa_handler = request_top_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(settings->interval_s));
  auto next = std::chrono::steady_clock::now();
  auto failing_since = std::chrono::steady_clock::time_point::min();  // min: not failing
  int failures = 0;
  for (unsigned long frame = 0; settings->count == 0 || frame < settings->count; ++frame) {
    if (frame > 0) wait_until(next += period);
    if (g_top_stop.load()) break;
    auto status = fetch_status(run_dir);
    std::string text;
    if (status) {
      failing_since = std::chrono::steady_clock::time_point::min();
      failures = 0;
      text = format_top_frame(*status, wall_clock(), settings->interval_s,
                              TopStyle{terminal_width(STDOUT_FILENO), color, tty});
    } else {
      const auto now = std::chrono::steady_clock::now();
      if (failing_since == std::chrono::steady_clock::time_point::min()) failing_since = now;
      if (frame == 0 || (++failures >= 2 && now - failing_since >= kGoneAfter)) {
        std::fprintf(stderr, "fracgpu: %s%s\n",
                     frame == 0 ? "" : "the broker has gone: ", status.error().c_str());
        return 1;
      }
      text = "fracgpu top  " + wall_clock() + "  " + status.error() + " (retrying)\n";
    }
    if (clear) {
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
