// `fracgpu top`: a live view of the node broker's tenants, refreshed every --interval
// seconds (default 1) until Ctrl-C, or one frame with --once (for scripts and tests).
// A frame is a header line, one line per GPU, and per tenant and GPU the row of
// `fracgpu set`'s table with a line of bars under it: memory used of the limit, with the
// guaranteed request marked, and the measured share of the GPU's time, with the share
// the weights promise marked (and the tenant's pod, in Kubernetes). It reads the same
// document as `fracgpu status --json` (fetch_status, docs/status-api.md). The width comes
// from COLUMNS, else the terminal, else 80; colour, screen clearing and cutting lines at
// the width happen only when stdout is a terminal. One "list" request per frame.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/result.h"

namespace fracgpu::cli {

// The flags as typed, checked by parse_top_options before anything is contacted.
struct TopFlags {
  std::string interval = "1";  // seconds between refreshes, 0.1 .. 3600
  std::string count;           // number of refreshes; empty = until Ctrl-C
  bool once = false;           // one frame, no screen clearing (= --count 1)
};
struct TopSettings {
  double interval_s = 1.0;
  unsigned long count = 0;  // 0 = until Ctrl-C
  bool once = false;
};
broker::Result<TopSettings> parse_top_options(const TopFlags& flags);

struct TopStyle {
  int width = 80;         // columns the bars are sized for
  bool color = false;     // ANSI colours in the bars
  bool truncate = false;  // cut every line at `width` (a terminal would wrap it)
};

// COLUMNS when it is a number from 20 to 1000, else the width of the terminal on `fd`,
// else 80.
int terminal_width(int fd);

// One frame for the status document `status` (header with `clock`, GPUs, tenants).
std::string format_top_frame(const nlohmann::json& status, const std::string& clock,
                             double interval_s, const TopStyle& style = {});

// The bars, `cells` characters between brackets: '#' filled, '.' empty, '|' the marker
// (the last cell within the request or the promised share; none when that is 0 or
// unknown). Exposed for tests.
std::string memory_bar(uint64_t used, uint64_t limit, uint64_t request, int cells,
                       bool color = false);
std::string compute_bar(double measured, std::optional<double> promised, int cells,
                        bool color = false);

// Exit 0 (Ctrl-C included), 1 when the broker does not answer (at the first frame, or
// for 3 s and two refreshes in a row later: it has gone), 2 for bad flags.
int run_top(const std::string& run_dir, const TopFlags& flags);

}  // namespace fracgpu::cli
