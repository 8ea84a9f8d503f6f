// Parsing of the FRACGPU_* environment (see shim_config.h).
#include "core/shim_config.h"

#include <cstdlib>
#include <cstring>

namespace fracgpu {
namespace {

bool parse_bool(const char* text, bool* out) {
  static constexpr const char* kTrue[] = {"1", "true", "yes", "on"};
  static constexpr const char* kFalse[] = {"0", "false", "no", "off", ""};
  for (const char* t : kTrue) {
    if (strcasecmp(text, t) == 0) return *out = true, true;
  }
  for (const char* f : kFalse) {
    if (strcasecmp(text, f) == 0) return *out = false, true;
  }
  return false;
}

}  // namespace

ShimConfig parse_shim_config(const EnvLookup& lookup) {
  ShimConfig config;
  if (const char* v = lookup("FRACGPU_DISABLE")) {
    if (!parse_bool(v, &config.disabled)) {
      config.problems.push_back(std::string("FRACGPU_DISABLE='") + v +
                                "' is not a boolean (use 1 or 0); fracgpu stays enabled");
    }
  }
  if (const char* v = lookup("FRACGPU_LOG_LEVEL")) {
    if (!parse_log_level(v, &config.log_level)) {
      config.problems.push_back(std::string("FRACGPU_LOG_LEVEL='") + v +
                                "' is not one of error, warn, info, debug, trace");
    }
  }
  if (const char* v = lookup("FRACGPU_REAL_DRIVER"); v && *v) config.real_driver = v;
  if (const char* v = lookup("FRACGPU_HOOK_STATS"); v && *v) config.hook_stats_path = v;
  if (const char* v = lookup("FRACGPU_SOCKET"); v && *v) {
    config.socket_path = v;
    config.socket_explicit = true;
  }
  return config;
}

ShimConfig shim_config_from_environment() {
  return parse_shim_config([](const char* name) { return std::getenv(name); });
}

std::string expand_pid_pattern(const std::string& pattern, int pid) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      out += std::to_string(pid);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace fracgpu
