// /proc parsing and the pidfd kill for the usage audit (process_port.h).
#include "core/process_port.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/proc_stat.h"

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
  const auto stat = read_proc_stat(pid, root_);
  if (!stat || stat->gone()) return std::nullopt;  // a zombie holds no GPU memory
  ProcessFacts facts;
  facts.ppid = static_cast<int32_t>(stat->ppid);
  facts.start_time = stat->start_time;
  facts.cgroup = cgroups_.read(pid);
  return facts;
}

bool ProcfsProcessPort::kill(int32_t pid, uint64_t start_time) {
  return signal_exact_process(pidfds_, pid, start_time, SIGKILL);
}

}  // namespace fracgpu::broker
