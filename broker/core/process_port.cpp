// /proc parsing and the pidfd kill for the usage audit (process_port.h).
#include "core/process_port.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fracgpu::broker {
namespace {

// Up to `size` - 1 bytes of a small /proc file, or "" when it cannot be read.
std::string read_small(const std::string& path, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return {};
  std::string text(size, '\0');
  const std::size_t n = std::fread(text.data(), 1, size - 1, f);
  std::fclose(f);
  text.resize(n);
  return text;
}

}  // namespace

std::string ProcfsCgroupReader::read(int32_t pid) {
  std::string text = read_small(root_ + "/" + std::to_string(pid) + "/cgroup", 4096);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

ProcfsProcessPort::ProcfsProcessPort(std::string proc_root)
    : root_(std::move(proc_root)),
      own_cgroups_(root_),
      cgroups_(own_cgroups_),
      pidfds_(system_pidfd_ops()) {}

ProcfsProcessPort::ProcfsProcessPort(CgroupReader& cgroups, PidfdOps& pidfds, std::string proc_root)
    : root_(std::move(proc_root)), own_cgroups_(root_), cgroups_(cgroups), pidfds_(pidfds) {}

std::optional<ProcessFacts> ProcfsProcessPort::describe(int32_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::string dir = root_ + "/" + std::to_string(pid);
  const std::string stat = read_small(dir + "/stat", 1024);
  // comm (field 2) may contain spaces and parentheses: fields resume after the LAST ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  const char* cursor = stat.c_str() + close + 1;
  ProcessFacts facts;
  for (int field = 3; field <= 22; ++field) {
    while (*cursor == ' ') ++cursor;
    if (*cursor == '\0') return std::nullopt;
    if (field == 3 && (*cursor == 'Z' || *cursor == 'X')) return std::nullopt;  // holds no GPU
    if (field == 4) facts.ppid = static_cast<int32_t>(std::strtol(cursor, nullptr, 10));
    if (field == 22) facts.start_time = std::strtoull(cursor, nullptr, 10);
    while (*cursor != ' ' && *cursor != '\0') ++cursor;
  }
  facts.cgroup = cgroups_.read(pid);
  return facts;
}

bool ProcfsProcessPort::kill(int32_t pid, uint64_t start_time) {
  return signal_exact_process(pidfds_, pid, start_time, SIGKILL);
}

}  // namespace fracgpu::broker
