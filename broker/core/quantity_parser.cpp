// Strict, exact parsing of sizes and percentages. Arithmetic is done on integers
// (unsigned __int128) rather than doubles so that "1.5GiB" is exactly 1610612736 and
// "18446744073709551616" is reported as overflow instead of silently wrapping.
#include "core/quantity_parser.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <limits>

namespace fracgpu::broker {
namespace {

struct Unit {
  std::string_view name;  // lowercase
  uint64_t factor;
};

constexpr std::array<Unit, 10> kUnits{{
    {"b", 1},
    {"kib", 1ull << 10},
    {"mib", 1ull << 20},
    {"gib", 1ull << 30},
    {"tib", 1ull << 40},
    {"kb", 1000ull},
    {"mb", 1000ull * 1000},
    {"gb", 1000ull * 1000 * 1000},
    {"tb", 1000ull * 1000 * 1000 * 1000},
    {"", 1},
}};

std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Built by appending: GCC 12 at -O3 reports a false -Wrestrict on "'" + std::string(s)
// (GCC bug 105329), which -Werror turns into a failed Release build.
std::string quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.append(1, '\'').append(s).append(1, '\'');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "1.5 GiB" into digits before the point, after it, and the unit text.
struct SizeParts {
  std::string_view whole, fraction, unit;
  bool has_point = false;
};

SizeParts split_size(std::string_view s) {
  SizeParts p;
  std::size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  p.whole = s.substr(0, i);
  if (i < s.size() && s[i] == '.') {
    p.has_point = true;
    std::size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    p.fraction = s.substr(start, i - start);
  }
  p.unit = trim(s.substr(i));
  return p;
}

const Unit* find_unit(std::string_view unit_text) {
  const std::string lower = lowercase(unit_text);
  for (const Unit& u : kUnits) {
    if (u.name == lower) return &u;
  }
  return nullptr;
}

Result<uint64_t> parse_size_impl(std::string_view text, std::string_view what, bool allow_zero) {
  const std::string_view s = trim(text);
  const std::string prefix = std::string(what) + " " + quoted(text);
  if (s.empty()) return Result<uint64_t>::failure(std::string(what) + " must not be empty");
  if (s.front() == '-') return Result<uint64_t>::failure(prefix + " must not be negative");
  const SizeParts p = split_size(s);
  if (p.whole.empty() && p.fraction.empty()) {
    return Result<uint64_t>::failure(prefix +
                                     " is not a size (examples: 8GiB, 512MiB, 1.5GB, 1073741824)");
  }
  if (p.has_point && p.fraction.empty()) {
    return Result<uint64_t>::failure(prefix + " has a decimal point but no digits after it");
  }
  const Unit* unit = find_unit(p.unit);
  if (unit == nullptr) {
    return Result<uint64_t>::failure(prefix + " has an unknown unit " + quoted(p.unit) +
                                     " (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  }
  if (p.whole.size() > 20 || p.fraction.size() > 18) {
    return Result<uint64_t>::failure(prefix + " is too large");
  }
  if (p.has_point && unit->factor == 1) {
    return Result<uint64_t>::failure(prefix + " is a fractional number of bytes");
  }
  unsigned __int128 whole = 0;
  for (char c : p.whole) whole = whole * 10 + static_cast<unsigned>(c - '0');
  unsigned __int128 frac = 0, scale = 1;
  for (char c : p.fraction) {
    frac = frac * 10 + static_cast<unsigned>(c - '0');
    scale *= 10;
  }
  const unsigned __int128 bytes = whole * unit->factor + frac * unit->factor / scale;
  if (bytes > std::numeric_limits<uint64_t>::max()) {
    return Result<uint64_t>::failure(prefix + " is too large (more than 2^64-1 bytes)");
  }
  if (bytes == 0 && !allow_zero)
    return Result<uint64_t>::failure(prefix + " must be larger than zero");
  return static_cast<uint64_t>(bytes);
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text, std::string_view what) {
  return parse_size_impl(text, what, false);
}

Result<uint64_t> parse_size_allow_zero(std::string_view text, std::string_view what) {
  return parse_size_impl(text, what, true);
}

Result<uint32_t> parse_percent(std::string_view text, std::string_view what) {
  std::string_view s = trim(text);
  const std::string bad = std::string(what) + " " + quoted(text) +
                          " must be a whole percentage of one GPU from 1 to 100 (e.g. 30 or 30%)";
  if (!s.empty() && s.back() == '%') s.remove_suffix(1);
  if (s.empty() || s.size() > 3) return Result<uint32_t>::failure(bad);
  uint32_t value = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return Result<uint32_t>::failure(bad);
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value < 1 || value > 100) return Result<uint32_t>::failure(bad);
  return value;
}

std::string format_size(uint64_t bytes) {
  static constexpr std::array<const char*, 5> kNames{"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t index = 0;
  uint64_t unit = 1;
  while (index + 1 < kNames.size() && bytes >= unit * 1024) {
    unit *= 1024;
    ++index;
  }
  char buf[64];
  if (bytes % unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(bytes / unit),
                  kNames[index]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s",
                  static_cast<double>(bytes) / static_cast<double>(unit), kNames[index]);
  }
  return buf;
}

}  // namespace fracgpu::broker
