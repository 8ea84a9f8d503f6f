// `fracgpu top`'s frames without a broker: the bars (filled cells, the request and
// promised-share markers, colours only when asked), a whole frame rendered from a fixed
// status document (the table rows each followed by their bars, sized to the width, the
// pod of a Kubernetes tenant, lines cut at the width on a terminal), the terminal width
// (COLUMNS, else the terminal, else 80) and the --once flag.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "cli/status_command.h"
#include "cli/top_command.h"

namespace fracgpu::cli {
namespace {

using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Characters a terminal shows (escape sequences take no room).
std::size_t visible(const std::string& line) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\033') {
      i = line.find('m', i);
      if (i == std::string::npos) break;
      continue;
    }
    ++n;
  }
  return n;
}

json device(unsigned gpu, uint64_t used, uint64_t limit, uint64_t request, unsigned weight,
            const char* priority, double share) {
  return {{"gpu", gpu},
          {"memory_limit", limit},
          {"memory_request", request},
          {"memory_grant", request},
          {"memory_used", used},
          {"memory_peak", used},
          {"compute", weight},
          {"compute_limit", 0},
          {"priority", priority},
          {"compute_measured_share", share},
          {"compute_gpu_seconds", 12.5},
          {"compute_state", "granted"}};
}

// Two tenants sharing GPU 0 70/30, one of them a Kubernetes container; a high one on GPU 1.
json status_document() {
  json tenants = json::array();
  tenants.push_back({{"name", "s-3fa01c22-3"},
                     {"devices", {device(0, 2 * kGiB, 8 * kGiB, 8 * kGiB, 70, "normal", 0.69)}},
                     {"processes", json::array({{{"pid", 10}, {"slot", 0}}})},
                     {"pod", {{"namespace", "ml"}, {"pod", "trainer-0"}, {"container", "main"}}}});
  tenants.push_back({{"name", "etl"},
                     {"devices", {device(0, 3 * kGiB, 4 * kGiB, 1 * kGiB, 30, "normal", 0.3)}},
                     {"processes", json::array()}});
  tenants.push_back({{"name", "serving"},
                     {"devices", {device(1, 0, 2 * kGiB, 0, 100, "high", 0.0)}},
                     {"processes", json::array()}});
  json gpus = json::array();
  for (unsigned i = 0; i < 2; ++i) {
    gpus.push_back({{"index", i},
                    {"uuid", "GPU-000" + std::to_string(i)},
                    {"name", "Simulated"},
                    {"memory_total", 16 * kGiB},
                    {"memory_capacity", 16 * kGiB}});
  }
  return {{"api_version", 1}, {"tenants", tenants}, {"gpus", gpus}};
}

// The bar lines of a frame, in order.
std::vector<std::string> bar_lines(const std::string& frame) {
  std::vector<std::string> out;
  for (const auto& line : lines_of(frame))
    if (line.rfind("  memory [", 0) == 0) out.push_back(line);
  return out;
}

TEST(TopBars, MemoryFillAndRequestMarker) {
  // 1 of 4 GiB used, 2 GiB guaranteed: 5 of 20 cells filled, the marker on cell 10.
  EXPECT_EQ(memory_bar(1 * kGiB, 4 * kGiB, 2 * kGiB, 20), "[#####....|..........]");
  EXPECT_EQ(memory_bar(0, 4 * kGiB, 4 * kGiB, 10), "[.........|]");  // request = limit
  EXPECT_EQ(memory_bar(1, 4 * kGiB, 0, 10), "[#.........]");         // any use shows; no request
  EXPECT_EQ(memory_bar(5 * kGiB, 4 * kGiB, 0, 10), "[##########]");  // never past the end
  EXPECT_EQ(memory_bar(1, 0, 0, 5), "[.....]");                      // no limit known
  EXPECT_EQ(memory_bar(1 * kGiB, 4 * kGiB, 2 * kGiB, 20).find('\033'), std::string::npos);
  // Colours when asked: green within the request, yellow above it, red near the limit.
  EXPECT_NE(memory_bar(1 * kGiB, 4 * kGiB, 2 * kGiB, 20, true).find("\033[32m"), std::string::npos);
  EXPECT_NE(memory_bar(3 * kGiB, 4 * kGiB, 2 * kGiB, 20, true).find("\033[33m"), std::string::npos);
  EXPECT_NE(memory_bar(4 * kGiB, 4 * kGiB, 4 * kGiB, 20, true).find("\033[31m"), std::string::npos);
  EXPECT_EQ(visible(memory_bar(3 * kGiB, 4 * kGiB, 2 * kGiB, 20, true)), 22u);
}

TEST(TopBars, ComputeShareAndPromisedMarker) {
  EXPECT_EQ(compute_bar(0.3, 0.6, 10), "[###..|....]");
  EXPECT_EQ(compute_bar(0.598, 0.6, 10), "[#####|....]");         // the marker shows over the fill
  EXPECT_EQ(compute_bar(0.5, std::nullopt, 10), "[#####.....]");  // high priority: none
  EXPECT_EQ(compute_bar(0.0, 1.0, 4), "[...|]");
  EXPECT_NE(compute_bar(0.5, 0.5, 10, true).find("\033[36m"), std::string::npos);
}

TEST(TopFrame, EveryTenantRowHasItsBarsSizedToTheWidth) {
  const json status = status_document();
  const std::string frame = format_top_frame(status, "09:15:00", 1, TopStyle{80, false, false});
  const auto lines = lines_of(frame);
  ASSERT_GE(lines.size(), 3u) << frame;
  EXPECT_EQ(lines[0], "fracgpu top  09:15:00  every 1s  (Ctrl-C quits)");
  EXPECT_NE(frame.find("GPU 0  Simulated  memory 5 GiB of 16 GiB  2 tenants  busy 99.0%"),
            std::string::npos)
      << frame;
  EXPECT_EQ(frame.find('\033'), std::string::npos);
  // Each table row is followed by its bars.
  std::size_t header = 0;
  while (header < lines.size() && lines[header].rfind("TENANT", 0) != 0) ++header;
  ASSERT_LT(header + 6, lines.size()) << frame;
  EXPECT_NE(lines[header].find("MEASURED"), std::string::npos);
  EXPECT_EQ(lines[header + 1].rfind("s-3fa01c22-3", 0), 0u) << frame;
  EXPECT_EQ(lines[header + 2].rfind("  memory [", 0), 0u) << frame;
  EXPECT_EQ(lines[header + 3].rfind("etl", 0), 0u) << frame;
  EXPECT_EQ(lines[header + 5].rfind("serving", 0), 0u) << frame;
  const auto bars = bar_lines(frame);
  ASSERT_EQ(bars.size(), 3u) << frame;
  // s-3fa01c22-3: 2 of 8 GiB, all guaranteed; 69% of the GPU, 70% promised; its pod.
  EXPECT_NE(bars[0].find(" 25%   compute ["), std::string::npos) << bars[0];
  EXPECT_NE(bars[0].find("|]  25%"), std::string::npos) << bars[0];  // request = limit
  EXPECT_NE(bars[0].find(" 69.0%   ml/trainer-0/main"), std::string::npos) << bars[0];
  EXPECT_NE(bars[1].find(" 75%"), std::string::npos) << bars[1];  // etl: above its request
  EXPECT_NE(bars[2].find("  0.0%"), std::string::npos) << bars[2];
  EXPECT_EQ(bars[2].find('|'), std::string::npos) << bars[2];  // high, nothing guaranteed
  // Bars of one frame line up, and fit the width with the pod.
  EXPECT_EQ(bars[1].size(), bars[2].size());
  for (const auto& b : bars) EXPECT_LE(visible(b), 80u) << b;
  EXPECT_NE(frame.find("bars: #"), std::string::npos);  // the legend

  // Wider terminal, wider bars.
  const auto wide = bar_lines(format_top_frame(status, "09:15:00", 1, TopStyle{160, false, false}));
  ASSERT_EQ(wide.size(), 3u);
  EXPECT_GT(wide[1].size(), bars[1].size() + 40);
  for (const auto& b : wide) EXPECT_LE(visible(b), 160u) << b;
}

TEST(TopFrame, OnATerminalLinesAreCutAtTheWidthAndBarsColoured) {
  const json status = status_document();
  const std::string frame = format_top_frame(status, "09:15:00", 0.5, TopStyle{60, true, true});
  EXPECT_NE(frame.find("\033[32m"), std::string::npos) << frame;
  for (const auto& line : lines_of(frame)) EXPECT_LE(visible(line), 60u) << line;
  // Every line leaves the terminal uncoloured: its last escape is the reset.
  for (const auto& line : lines_of(frame)) {
    const auto last_escape = line.rfind('\033');
    if (last_escape != std::string::npos) {
      EXPECT_EQ(line.substr(last_escape, 4), "\033[0m") << line;
    }
  }
  // Narrow: the bars keep their minimum and still come.
  EXPECT_EQ(bar_lines(format_top_frame(status, "x", 1, TopStyle{40, false, false})).size(), 3u);
}

TEST(TopFrame, NoTenantsNoGpu) {
  const std::string frame = format_top_frame(json{{"api_version", 1}}, "x", 1);
  EXPECT_NE(frame.find("no GPU"), std::string::npos) << frame;
  EXPECT_NE(frame.find("no tenants"), std::string::npos) << frame;
}

TEST(TopWidth, ColumnsElseTerminalElseEighty) {
  const int not_a_terminal = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(not_a_terminal, 0);
  const char* saved = std::getenv("COLUMNS");
  const std::string old = saved ? saved : "";
  ::setenv("COLUMNS", "132", 1);
  EXPECT_EQ(terminal_width(not_a_terminal), 132);
  for (const char* bad : {"abc", "5", "100000", "", "80x"}) {
    ::setenv("COLUMNS", bad, 1);
    EXPECT_EQ(terminal_width(not_a_terminal), 80) << bad;
  }
  ::unsetenv("COLUMNS");
  EXPECT_EQ(terminal_width(not_a_terminal), 80);
  if (saved != nullptr) ::setenv("COLUMNS", old.c_str(), 1);
  ::close(not_a_terminal);
}

TEST(TopOptions, OnceIsOneFrameAndExcludesCount) {
  TopFlags flags;
  flags.once = true;
  auto once = parse_top_options(flags);
  ASSERT_TRUE(once.ok()) << once.error();
  EXPECT_TRUE(once->once);
  EXPECT_EQ(once->count, 1u);
  flags.count = "2";
  auto both = parse_top_options(flags);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().find("--once and --count"), std::string::npos) << both.error();
  flags.once = false;
  auto two = parse_top_options(flags);
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(two->once);
  EXPECT_EQ(two->count, 2u);
}

}  // namespace
}  // namespace fracgpu::cli
