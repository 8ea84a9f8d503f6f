// The run's own cgroup (see run_cgroup.h).
#include "cli/run_cgroup.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace fracgpu::cli {
namespace {

// mountinfo escapes ' ', '\t', '\n' and '\\' in paths as \ooo.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto octal = [&](std::size_t k) { return s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  while (!line.empty()) {
    const std::size_t space = line.find(' ');
    if (space != 0) out.push_back(line.substr(0, space));
    if (space == std::string_view::npos) break;
    line.remove_prefix(space + 1);
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool write_pid(const std::string& procs, pid_t pid, std::string* error) {
  std::FILE* f = std::fopen(procs.c_str(), "we");
  if (f == nullptr) {
    *error = std::strerror(errno);
    return false;
  }
  const bool ok = std::fprintf(f, "%d\n", static_cast<int>(pid)) > 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;  // the kernel's verdict comes with the write
  if (!ok || !closed) {
    *error = std::strerror(ok ? errno : err);
    return false;
  }
  return true;
}

constexpr std::string_view kPrefix = "fracgpu-run-";

// The cgroups of runs that were killed before they could remove theirs (SIGKILL): empty
// ones whose pid is gone. rmdir refuses a cgroup that still holds a process, so nothing
// in use is touched; a live run's pid exists, so its cgroup is skipped.
void sweep_stale(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name.substr(0, kPrefix.size()) != kPrefix) continue;
    const long pid = std::strtol(e->d_name + kPrefix.size(), nullptr, 10);
    if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))
      ::rmdir((dir + "/" + e->d_name).c_str());
  }
  ::closedir(d);
}

}  // namespace

CgroupPlan plan_run_cgroup(std::string_view mountinfo, std::string_view self_cgroup) {
  std::string path;
  bool have_v2 = false;
  while (!self_cgroup.empty()) {
    const std::size_t end = self_cgroup.find('\n');
    const std::string_view line = self_cgroup.substr(0, end);
    self_cgroup.remove_prefix(end == std::string_view::npos ? self_cgroup.size() : end + 1);
    if (line.substr(0, 3) == "0::") {
      path = std::string(line.substr(3));
      have_v2 = true;
    }
  }
  if (!have_v2 || path.empty() || path.front() != '/')
    return {"", "this process is in no cgroup v2 hierarchy"};
  bool mounted = false;
  while (!mountinfo.empty()) {
    const std::size_t end = mountinfo.find('\n');
    const std::string_view line = mountinfo.substr(0, end);
    mountinfo.remove_prefix(end == std::string_view::npos ? mountinfo.size() : end + 1);
    const std::vector<std::string_view> f = split(line);
    std::size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash < 5 || dash + 1 >= f.size() || f[dash + 1] != "cgroup2") continue;
    mounted = true;
    const std::string root = unescape(f[3]);
    const std::string point = unescape(f[4]);
    std::string rel;
    if (root == "/") {
      rel = path;
    } else if (path == root || path.rfind(root + "/", 0) == 0) {
      rel = path.substr(root.size());
    } else {
      continue;  // a mount of another part of the hierarchy
    }
    if (rel == "/") rel.clear();
    return {point + rel, ""};
  }
  return {"", mounted ? "its cgroup " + path + " is not under a cgroup2 mount this process sees"
                      : std::string("no cgroup2 file system is mounted (a cgroup v1 node)")};
}

RunCgroup RunCgroup::enter(Mode mode) {
  RunCgroup cg;
  if (mode == Mode::kOff) {
    cg.why_not_ = "--cgroup off";
    return cg;
  }
  const CgroupPlan plan =
      plan_run_cgroup(read_file("/proc/self/mountinfo"), read_file("/proc/self/cgroup"));
  if (plan.dir.empty()) {
    cg.why_not_ = plan.why_not;
    return cg;
  }
  const pid_t self = ::getpid();
  sweep_stale(plan.dir);
  const std::string child = plan.dir + "/" + std::string(kPrefix) + std::to_string(self);
  if (::mkdir(child.c_str(), 0755) != 0) {
    cg.why_not_ = "cannot create " + child + ": " + std::strerror(errno);
    return cg;
  }
  std::string error;
  if (!write_pid(child + "/cgroup.procs", self, &error)) {
    ::rmdir(child.c_str());
    cg.why_not_ = "cannot move into " + child + ": " + error;
    return cg;
  }
  cg.parent_ = plan.dir;
  cg.path_ = child;
  return cg;
}

RunCgroup::RunCgroup(RunCgroup&& other) noexcept
    : parent_(std::move(other.parent_)),
      path_(std::exchange(other.path_, std::string())),
      why_not_(std::move(other.why_not_)) {}

std::string RunCgroup::attribution() const {
  if (active())
    return "its own cgroup " + path_ + ", and ancestry (fracgpu run is the child subreaper)";
  return "ancestry only (fracgpu run is the child subreaper; no cgroup of its own: " + why_not_ +
         ")";
}

std::vector<pid_t> RunCgroup::pids() const {
  std::vector<pid_t> out;
  if (!active()) return out;
  std::istringstream in(read_file(path_ + "/cgroup.procs"));
  for (long pid; in >> pid;) out.push_back(static_cast<pid_t>(pid));
  return out;
}

void RunCgroup::leave() {
  if (!active()) return;
  std::string error;
  if (!write_pid(parent_ + "/cgroup.procs", ::getpid(), &error))
    std::fprintf(stderr, "fracgpu: cannot move back to %s: %s\n", parent_.c_str(), error.c_str());
  if (::rmdir(path_.c_str()) != 0)
    std::fprintf(stderr, "fracgpu: cannot remove the run's cgroup %s: %s\n", path_.c_str(),
                 std::strerror(errno));
  path_.clear();
}

}  // namespace fracgpu::cli
