// /proc/<pid>/maps readers for scan_file_mappers and process_holds_file (see file_mappers.h). A
// maps line reads "start-end perms offset MAJ:MIN inode  path", the device printed by the kernel as
// "%02x:%02x", so a file mapped by a process shows as the text " MAJ:MIN inode " in it.
#include "core/file_mappers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "core/process_tracker.h"

namespace fracgpu::broker {
namespace {

constexpr std::size_t kMaxMapsBytes = 64u << 20;  // a pathological maps file stops here

std::string maps_needle(const FileIdentity& f) {
  char text[64];
  std::snprintf(text, sizeof text, " %02x:%02x %llu ", static_cast<unsigned>(major(f.dev)),
                static_cast<unsigned>(minor(f.dev)), static_cast<unsigned long long>(f.ino));
  return text;
}

bool read_maps(pid_t pid, std::string& out) {
  out.clear();
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%d/maps", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0 || out.size() > kMaxMapsBytes) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return true;
}

std::optional<pid_t> pid_of(const char* name) {
  pid_t pid = 0;
  for (const char* c = name; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return std::nullopt;
    pid = pid * 10 + (*c - '0');
  }
  return pid > 0 ? std::optional<pid_t>(pid) : std::nullopt;
}

}  // namespace

bool maps_text_names(const std::string& maps, const FileIdentity& file) {
  if (file.ino == 0) return false;  // inode 0: an anonymous mapping, never a file
  return maps.find(maps_needle(file)) != std::string::npos;
}

std::optional<bool> process_holds_file(pid_t pid, const FileIdentity& file) {
  if (pid <= 0) return false;
  std::string maps;
  if (!read_maps(pid, maps)) {
    struct stat st {};
    const std::string dir = "/proc/" + std::to_string(pid);
    return ::stat(dir.c_str(), &st) == 0 ? std::nullopt : std::optional<bool>(false);
  }
  if (maps_text_names(maps, file)) return true;
  // Between receiving the descriptor and mapping it, the process holds it open.
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = ::opendir(fds.c_str());
  if (dir == nullptr) return false;
  bool held = false;
  while (const dirent* e = ::readdir(dir)) {
    struct stat st {};
    if (e->d_name[0] != '.' && ::stat((fds + "/" + e->d_name).c_str(), &st) == 0 &&
        st.st_dev == file.dev && st.st_ino == file.ino) {
      held = true;
      break;
    }
  }
  ::closedir(dir);
  return held;
}

std::map<FileIdentity, std::vector<MappingProcess>> scan_file_mappers(
    const std::vector<FileIdentity>& files) {
  std::map<FileIdentity, std::vector<MappingProcess>> out;
  if (files.empty()) return out;
  std::vector<std::string> needles;
  for (const FileIdentity& f : files) needles.push_back(maps_needle(f));
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  const pid_t self = ::getpid();
  std::string maps;
  while (const dirent* entry = ::readdir(proc)) {
    const auto pid = pid_of(entry->d_name);
    if (!pid || *pid == self || !read_maps(*pid, maps)) continue;
    for (std::size_t i = 0; i < files.size(); ++i) {
      if (maps.find(needles[i]) == std::string::npos) continue;
      if (const auto start = process_start_time(*pid)) out[files[i]].push_back({*pid, *start});
    }
  }
  ::closedir(proc);
  return out;
}

}  // namespace fracgpu::broker
