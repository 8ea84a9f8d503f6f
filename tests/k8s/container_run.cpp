// fracgpu-test-container-run: the part of a container runtime that the pod test needs,
// and nothing more. It enters a private mount namespace (as root: unshare(CLONE_NEWNS);
// where that is refused: an unprivileged user namespace mapping the caller to root),
// applies a kubelet AllocateResponse's mounts (bind, read-only by remount), then execs the
// command with its own environment unchanged, so the command's PID is this process's PID.
// Mount targets that do not exist (/etc/ld.so.preload, /run/fracgpu, /usr/local/fracgpu)
// are never created on the host: the deepest existing directory gets a private view
// inside the namespace — the original bound to a stash under --scratch, a tmpfs over the
// directory, and one symlink per original entry pointing at the stash (symlinks are copied
// as they are, so relative ones keep their meaning) — and the missing parts are created in
// that tmpfs. So /etc/ld.so.cache and everything else in /etc stays reachable.
//
//   fracgpu-test-container-run --probe
//       enters the namespaces and prints which kind it got ("root" or "user"), exit 0;
//       exit 77 with the reason on stderr when neither can be had
//   fracgpu-test-container-run --scratch DIR [--mount HOST CONTAINER ro|rw]... -- CMD [ARG]...
//       setup errors exit 125 with one line on stderr; exec failure exits 127
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kNoNamespace = 77;  // the pod test turns this into GTEST_SKIP with the reason
constexpr int kSetupFailed = 125;

struct BindMount {
  std::string host, container;
  bool read_only = true;
};

std::string g_scratch;
std::vector<std::string> g_views;  // directories given a private tmpfs view

[[noreturn]] void fail(const std::string& what, int error = errno) {
  std::fprintf(stderr, "fracgpu-test-container-run: %s: %s\n", what.c_str(), std::strerror(error));
  _exit(kSetupFailed);
}

bool write_text(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// Returns "root" or "user", or "" with the reason in *why.
std::string enter_namespaces(std::string* why) {
  if (::unshare(CLONE_NEWNS) == 0) return "root";
  const int root_error = errno;
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) {
    // setgroups must be denied before an unprivileged process may write gid_map.
    const bool mapped = (write_text("/proc/self/setgroups", "deny") || errno == ENOENT) &&
                        write_text("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") &&
                        write_text("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
    if (mapped) return "user";
    *why = std::string("user namespace created but its uid/gid maps could not be written: ") +
           std::strerror(errno);
    return "";
  }
  *why = std::string("unshare(CLONE_NEWNS) as uid ") + std::to_string(uid) + ": " +
         std::strerror(root_error) +
         "; unshare(CLONE_NEWUSER|CLONE_NEWNS): " + std::strerror(errno) +
         " (unprivileged user namespaces disabled? see kernel.unprivileged_userns_clone / "
         "user.max_user_namespaces)";
  return "";
}

bool in_view(const std::string& path) {
  for (const auto& v : g_views) {
    if (path == v || path.rfind(v + "/", 0) == 0) return true;
  }
  return false;
}

// Gives `dir` a writable private view whose entries lead to the original ones.
void make_view(const std::string& dir) {
  if (dir == "/")
    fail("refusing to put a view over / (mount target under a missing top-level directory)",
         EINVAL);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) fail("stat " + dir);
  const std::string stash = g_scratch + "/stash" + std::to_string(g_views.size());
  if (::mkdir(stash.c_str(), 0700) != 0) fail("mkdir " + stash);
  // Recursive: a user namespace may not bind a tree without the mounts locked under it.
  if (::mount(dir.c_str(), stash.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    fail("bind " + dir);
  char options[32];
  std::snprintf(options, sizeof options, "mode=%o", static_cast<unsigned>(st.st_mode & 07777));
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options) != 0)
    fail("tmpfs on " + dir);
  DIR* listing = ::opendir(stash.c_str());
  if (listing == nullptr) fail("opendir " + stash);
  while (dirent* e = ::readdir(listing)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string original = stash + "/" + name, entry = dir + "/" + name;
    struct stat est {};
    if (::lstat(original.c_str(), &est) != 0) continue;  // gone meanwhile
    std::string target = original;
    if (S_ISLNK(est.st_mode)) {
      std::vector<char> link(4096);
      const ssize_t n = ::readlink(original.c_str(), link.data(), link.size() - 1);
      if (n < 0) fail("readlink " + original);
      target.assign(link.data(), static_cast<std::size_t>(n));
    }
    if (::symlink(target.c_str(), entry.c_str()) != 0) fail("symlink " + entry);
  }
  ::closedir(listing);
  g_views.push_back(dir);
}

// Makes `path` exist inside the namespace (a file, or a directory when `directory`),
// creating only inside private views.
void ensure_target(const std::string& path, bool directory) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return;  // mounting over it changes nothing on the host
  std::vector<std::string> parts;
  for (std::size_t at = 1; at <= path.size();) {
    const std::size_t slash = path.find('/', at);
    const std::size_t end = slash == std::string::npos ? path.size() : slash;
    if (end > at) parts.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  std::string existing;
  std::size_t i = 0;
  for (; i < parts.size(); ++i) {
    const std::string next = existing + "/" + parts[i];
    if (::lstat(next.c_str(), &st) != 0) break;
    // Following a link could lead out of the view and create things on the host.
    if (S_ISLNK(st.st_mode))
      fail("mount target " + path + " passes through the symlink " + next, ELOOP);
    existing = next;
  }
  if (existing.empty()) existing = "/";
  if (!in_view(existing)) make_view(existing);
  for (; i < parts.size(); ++i) {
    existing = (existing == "/" ? "" : existing) + "/" + parts[i];
    if (i + 1 == parts.size() && !directory) {
      const int fd = ::open(existing.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) fail("create " + existing);
      ::close(fd);
    } else if (::mkdir(existing.c_str(), 0755) != 0) {
      fail("mkdir " + existing);
    }
  }
}

// A bind mount as runc does it: bind, then a read-only remount that keeps the flags a
// user namespace may not drop (nosuid, nodev, noexec, atime).
void apply(const BindMount& m) {
  struct stat st {};
  if (::stat(m.host.c_str(), &st) != 0) fail("host path " + m.host);
  ensure_target(m.container, S_ISDIR(st.st_mode));
  if (::mount(m.host.c_str(), m.container.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    fail("bind " + m.host + " on " + m.container);
  }
  if (!m.read_only) return;
  struct statvfs vfs {};
  if (::statvfs(m.container.c_str(), &vfs) != 0) fail("statvfs " + m.container);
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY;
  if (vfs.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (vfs.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (vfs.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (vfs.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (vfs.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (vfs.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  if (::mount(nullptr, m.container.c_str(), nullptr, flags, nullptr) != 0)
    fail("read-only remount of " + m.container);
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: fracgpu-test-container-run --probe\n"
               "       fracgpu-test-container-run --scratch DIR [--mount HOST CONTAINER ro|rw]... "
               "-- CMD [ARG]...\n");
  _exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<BindMount> mounts;
  bool probe = false;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--probe") {
      probe = true;
    } else if (arg == "--scratch" && i + 1 < argc) {
      g_scratch = argv[++i];
    } else if (arg == "--mount" && i + 3 < argc &&
               (std::string(argv[i + 3]) == "ro" || std::string(argv[i + 3]) == "rw")) {
      mounts.push_back({argv[i + 1], argv[i + 2], std::string(argv[i + 3]) == "ro"});
      i += 3;
    } else {
      usage();
    }
  }
  if (!probe && (i + 1 >= argc || g_scratch.empty())) usage();
  std::string why;
  const std::string kind = enter_namespaces(&why);
  if (kind.empty()) {
    std::fprintf(stderr, "fracgpu-test-container-run: no mount namespace: %s\n", why.c_str());
    return kNoNamespace;
  }
  if (probe) {
    std::printf("%s\n", kind.c_str());
    return 0;
  }
  // Nothing mounted from here on may propagate back to the host's mount table.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("make / private");
  if (::mount("tmpfs", g_scratch.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") != 0)
    fail("tmpfs on scratch");
  for (const auto& m : mounts) apply(m);
  ::execvp(argv[i + 1], argv + i + 1);
  std::fprintf(stderr, "fracgpu-test-container-run: exec %s: %s\n", argv[i + 1],
               std::strerror(errno));
  return 127;
}
