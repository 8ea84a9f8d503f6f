// JSON rendering and file output of the hook counters (see hook_stats.h).
#include "core/hook_stats.h"

#include <fcntl.h>
#include <unistd.h>

namespace fracgpu {
namespace {

std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      continue;  // paths never legitimately hold control chars
    out += c;
  }
  return out;
}

}  // namespace

std::string HookStats::to_json(int pid, const std::string& driver_path,
                               const ProcAddressResolver::Stats& proc_address) {
  std::string json = "{\"pid\":" + std::to_string(pid) + ",\"driver\":\"" +
                     json_escape(driver_path) + "\",\"hooks\":{";
  bool first = true;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    uint64_t n = counts_[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    json += first ? "\"" : ",\"";
    json += kHookCatalog[i].symbol;
    json += "\":" + std::to_string(n);
    first = false;
  }
  json += "},\"proc_address\":{\"by_pointer\":" + std::to_string(proc_address.by_pointer) +
          ",\"by_name\":" + std::to_string(proc_address.by_name) +
          ",\"passed_through\":" + std::to_string(proc_address.passed_through) + "}}\n";
  return json;
}

bool HookStats::write_file(const std::string& path, const std::string& json) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = ::write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size());
  return ::close(fd) == 0 && ok;
}

}  // namespace fracgpu
