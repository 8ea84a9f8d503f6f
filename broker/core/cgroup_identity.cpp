// cgroup_identity (see cgroup_identity.h).
#include "core/cgroup_identity.h"

#include <array>
#include <optional>
#include <vector>

namespace fracgpu::broker {
namespace {

struct Line {
  std::string_view controllers;  // "" for the unified hierarchy
  std::string_view path;
};

// "ID:CONTROLLERS:PATH"; the path may itself contain ':'.
std::optional<Line> parse_line(std::string_view line) {
  const std::size_t first = line.find(':');
  if (first == std::string_view::npos) return std::nullopt;
  const std::size_t second = line.find(':', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  Line out{line.substr(first + 1, second - first - 1), line.substr(second + 1)};
  if (out.path.empty() || out.path.front() != '/') return std::nullopt;
  return out;
}

bool names(std::string_view controllers, std::string_view wanted) {
  while (!controllers.empty()) {
    const std::size_t comma = controllers.find(',');
    if (controllers.substr(0, comma) == wanted) return true;
    if (comma == std::string_view::npos) break;
    controllers.remove_prefix(comma + 1);
  }
  return false;
}

std::string spell(const Line& line) {
  std::string out(line.controllers.empty() ? std::string_view("0:") : line.controllers);
  out += ':';
  out += line.path;
  return out;
}

}  // namespace

std::string cgroup_identity(std::string_view text) {
  std::vector<Line> v1;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view raw = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const auto line = parse_line(raw);
    if (!line || line->path == "/") continue;
    if (line->controllers.empty()) return spell(*line);  // unified, not the root
    v1.push_back(*line);
  }
  constexpr std::array<std::string_view, 3> kPreferred = {"memory", "pids", "name=systemd"};
  for (std::string_view wanted : kPreferred)
    for (const Line& line : v1)
      if (names(line.controllers, wanted)) return spell(line);
  return v1.empty() ? std::string() : spell(v1.front());
}

}  // namespace fracgpu::broker
