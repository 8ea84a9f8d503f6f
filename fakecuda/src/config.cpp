// Strict parsing of the FAKECUDA_* environment variables (see config.h). Parsing is
// hand-written rather than strtoull-based because strtoull accepts leading spaces,
// signs and partial numbers, all of which we want to reject loudly.
#include "config.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>

namespace fakecuda {
namespace {

struct SizeSuffix {
  std::string_view text;
  uint64_t multiplier;
};

constexpr std::array<SizeSuffix, 9> kSuffixes{{
    {"KiB", 1ull << 10},
    {"MiB", 1ull << 20},
    {"GiB", 1ull << 30},
    {"TiB", 1ull << 40},
    {"KB", 1000ull},
    {"MB", 1000ull * 1000},
    {"GB", 1000ull * 1000 * 1000},
    {"TB", 1000ull * 1000 * 1000 * 1000},
    {"B", 1ull},
}};

std::optional<uint64_t> parse_digits(std::string_view digits) {
  if (digits.empty() || digits.size() > 19) return std::nullopt;
  uint64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

void report_bad(const char* prefix, const char* var, const char* value, const char* why) {
  std::fprintf(stderr, "%s: ignoring %s=\"%s\" (%s); using the default\n", prefix, var, value, why);
}

// Reads one variable through `parse`; unset means default, malformed means default + log.
template <typename Parse>
void read_var(const char* prefix, const char* var, const char* why, uint64_t& target, Parse parse) {
  const char* raw = std::getenv(var);
  if (raw == nullptr) return;
  std::optional<uint64_t> parsed = parse(std::string_view(raw));
  if (parsed) {
    target = *parsed;
  } else {
    report_bad(prefix, var, raw, why);
  }
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view text) {
  for (const SizeSuffix& suffix : kSuffixes) {
    if (text.size() > suffix.text.size() && text.ends_with(suffix.text)) {
      std::optional<uint64_t> number =
          parse_digits(text.substr(0, text.size() - suffix.text.size()));
      if (!number || *number > UINT64_MAX / suffix.multiplier) return std::nullopt;
      return *number * suffix.multiplier;
    }
  }
  return parse_digits(text);
}

std::optional<uint64_t> parse_unsigned(std::string_view text, uint64_t min, uint64_t max) {
  std::optional<uint64_t> value = parse_digits(text);
  if (!value || *value < min || *value > max) return std::nullopt;
  return value;
}

DeviceConfig read_device_config(const char* log_prefix) {
  DeviceConfig config;
  uint64_t count = config.device_count;
  read_var(log_prefix, "FAKECUDA_DEVICE_COUNT", "expected 1..8", count,
           [](std::string_view t) { return parse_unsigned(t, 1, kMaxDevices); });
  config.device_count = static_cast<uint32_t>(count);
  read_var(log_prefix, "FAKECUDA_MEMORY", "expected bytes or a size such as 16GiB, 1 MiB..1 PiB",
           config.memory_bytes, [](std::string_view t) -> std::optional<uint64_t> {
             std::optional<uint64_t> v = parse_size(t);
             if (!v || *v < (1ull << 20) || *v > (1ull << 50)) return std::nullopt;
             return v;
           });
  uint64_t memory = config.memory_bytes;
  read_var(log_prefix, "FAKECUDA_CONTEXT_FOOTPRINT", "expected a size below the device memory",
           config.context_footprint_bytes, [memory](std::string_view t) -> std::optional<uint64_t> {
             std::optional<uint64_t> v = parse_size(t);
             if (!v || *v >= memory) return std::nullopt;
             return v;
           });
  if (config.context_footprint_bytes >= memory) config.context_footprint_bytes = memory / 2;
  read_var(log_prefix, "FAKECUDA_TIMESLICE_US", "expected 50..10000000", config.timeslice_us,
           [](std::string_view t) { return parse_unsigned(t, 50, 10'000'000); });
  uint64_t mode = config.shm_mode;
  read_var(log_prefix, "FAKECUDA_SHM_MODE", "expected an octal mode of 0600 or more, rw bits only",
           mode, [](std::string_view t) -> std::optional<uint64_t> {
             uint64_t value = 0;
             if (t.size() < 3 || t.size() > 4) return std::nullopt;
             for (char c : t) {
               if (c < '0' || c > '7') return std::nullopt;
               value = value * 8 + static_cast<uint64_t>(c - '0');
             }
             // The owner keeps read and write; nobody gets execute or special bits.
             if ((value & 0600) != 0600 || (value & ~uint64_t{0666}) != 0) return std::nullopt;
             return value;
           });
  config.shm_mode = static_cast<uint32_t>(mode);
  return config;
}

uint64_t copy_bytes_per_second(const char* log_prefix) {
  uint64_t bandwidth = 0;
  read_var(log_prefix, "FAKECUDA_COPY_BANDWIDTH",
           "expected bytes per second or a size such as 1GB, 1 MB..1000 GB", bandwidth,
           [](std::string_view t) -> std::optional<uint64_t> {
             std::optional<uint64_t> v = parse_size(t);
             if (!v || *v < 1000ull * 1000 || *v > 1000ull * 1000 * 1000 * 1000)
               return std::nullopt;
             return v;
           });
  return bandwidth;
}

std::string shared_segment_name(const char* log_prefix) {
  std::string fallback =
      "/fracgpu-fakecuda-" + std::to_string(static_cast<unsigned long>(getuid()));
  const char* raw = std::getenv("FAKECUDA_SHM_NAME");
  if (raw == nullptr || raw[0] == '\0') return fallback;
  std::string_view name(raw);
  bool valid = name.size() >= 2 && name.size() <= 200 && name[0] == '/' &&
               name.find('/', 1) == std::string_view::npos;
  if (!valid) {
    report_bad(log_prefix, "FAKECUDA_SHM_NAME", raw, "expected \"/name\" without further slashes");
    return fallback;
  }
  return std::string(name);
}

}  // namespace fakecuda
