// Implementation of the shim's stderr logger (see shim_log.h).
#include "core/shim_log.h"

#include <strings.h>
#include <unistd.h>

#include <cstdio>

namespace fracgpu {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
constexpr const char* kLevelNames[] = {"error", "warn", "info", "debug", "trace"};
}  // namespace

bool parse_log_level(const char* text, LogLevel* out) {
  if (text == nullptr || *text == '\0') return false;
  if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0') {
    *out = static_cast<LogLevel>(text[0] - '0');
    return true;
  }
  for (int i = 0; i < 5; ++i) {
    if (strcasecmp(text, kLevelNames[i]) == 0) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  if (strcasecmp(text, "warning") == 0) {
    *out = LogLevel::kWarn;
    return true;
  }
  return false;
}

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

void log_message(LogLevel level, const char* fmt, ...) {
  char line[1024];
  int n = std::snprintf(line, sizeof(line), "fracgpu[%d] %s: ", static_cast<int>(getpid()),
                        kLevelNames[static_cast<int>(level)]);
  va_list args;
  va_start(args, fmt);
  int m = std::vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n) - 1, fmt, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t ignored = ::write(STDERR_FILENO, line, len);
  (void)ignored;
}

bool log_capped_allow(std::atomic<int>* counter, int cap) {
  int seen = counter->fetch_add(1, std::memory_order_relaxed);
  if (seen < cap) return true;
  if (seen == cap) {
    log_message(LogLevel::kWarn, "(further messages of this kind suppressed after %d)", cap);
  }
  return false;
}

}  // namespace fracgpu
