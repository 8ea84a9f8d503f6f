// Logging for the shim: one line per message on stderr, "fracgpu[pid]: ...", written
// with a single write(2) so lines from several threads never interleave. No stdout,
// no allocation, no locks — it is safe on any path. Repeated warnings on hot paths go
// through FRACGPU_LOG_CAPPED, which prints a bounded number and then says so.
#pragma once

#include <atomic>
#include <cstdarg>

namespace fracgpu {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Parses "error|warn|info|debug|trace" (case-insensitive) or a digit 0-4.
bool parse_log_level(const char* text, LogLevel* out);

void set_log_level(LogLevel level);
LogLevel log_level();

void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Counts occurrences at one call site; true while under the cap (and prints the
// "further messages suppressed" note exactly once when the cap is reached).
bool log_capped_allow(std::atomic<int>* counter, int cap);

}  // namespace fracgpu

#define FRACGPU_LOG(level, ...)                                              \
  do {                                                                       \
    if (static_cast<int>(level) <= static_cast<int>(::fracgpu::log_level())) \
      ::fracgpu::log_message(level, __VA_ARGS__);                            \
  } while (0)

#define FRACGPU_LOG_CAPPED(level, cap, ...)                                    \
  do {                                                                         \
    static std::atomic<int> fracgpu_log_site_count{0};                         \
    if (static_cast<int>(level) <= static_cast<int>(::fracgpu::log_level()) && \
        ::fracgpu::log_capped_allow(&fracgpu_log_site_count, cap))             \
      ::fracgpu::log_message(level, __VA_ARGS__);                              \
  } while (0)
