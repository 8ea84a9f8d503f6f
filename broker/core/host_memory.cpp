// The node's memory (see host_memory.h).
#include "core/host_memory.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <fstream>

namespace fracgpu::broker {

uint64_t node_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

std::optional<uint64_t> mem_available(const std::string& meminfo) {
  std::ifstream in(meminfo);
  std::string line;
  constexpr std::string_view kKey = "MemAvailable:";
  while (std::getline(in, line)) {
    if (!line.starts_with(kKey)) continue;
    // "MemAvailable:   12345678 kB"
    std::size_t at = kKey.size();
    while (at < line.size() && std::isspace(static_cast<unsigned char>(line[at]))) ++at;
    uint64_t kib = 0;
    const char* begin = line.data() + at;
    const char* end = line.data() + line.size();
    auto [next, error] = std::from_chars(begin, end, kib);
    if (error != std::errc() || next == begin) return std::nullopt;
    std::string_view unit(next, static_cast<std::size_t>(end - next));
    while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front())))
      unit.remove_prefix(1);
    if (unit != "kB" || kib > (UINT64_MAX >> 10)) return std::nullopt;
    return kib << 10;
  }
  return std::nullopt;
}

}  // namespace fracgpu::broker
