// Hermetic test processes (issue 28): every test program that starts shim'd processes,
// brokers or the CLI links this file (through fracgpu_test_process), and before main() —
// before any thread exists, since unshare(CLONE_NEWNS) refuses a multi-threaded process
// with EINVAL — it moves into a private mount namespace in which the node's run directory
// (/run/fracgpu) and the containers' MPS directory (/run/fracgpu-mps) are empty tmpfs
// directories. The shim reads the node's facts from those fixed paths (include/fracgpu/
// paths.h; no environment can move them, which is a security property), so without this a
// node broker that runs or ran on the machine (a stale /run/fracgpu) changes what the
// tests' shim'd processes do. Every process the test starts inherits the namespace.
//
// /run itself gets a private view: a tmpfs over /run whose entries are bind mounts of the
// host's, except the two directories above, which are new and empty. Nothing is created
// or changed on the host, even where /run/fracgpu does not exist there.
//
// As root only. Without root (no CAP_SYS_ADMIN) the tests keep the host's /run: when a
// node layout is there, one line on stderr names it. An unprivileged user namespace is
// not tried: the tests create unprivileged users and need real root.
// Cost: a few mount(2) calls once per test program; nothing per test.
#include "hermetic_node.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "fracgpu/paths.h"

namespace fracgpu::testing {
namespace {

constexpr const char* kRun = "/run";
// The node's directories under /run: kRunDir and kContainerMpsPipeDir's parent.
constexpr const char* kNodeDirs[] = {paths::kRunDir, "/run/fracgpu-mps"};
static_assert(std::string_view(paths::kContainerMpsPipeDir) == "/run/fracgpu-mps/pipe");

// Plain data, constant-initialized: the constructor below runs before this file's dynamic
// initializers would.
char g_state[512] = "not set up";
bool g_private = false;

bool is_hidden(const std::string& name) {
  for (const char* dir : kNodeDirs) {
    if (std::string(kRun) + "/" + name == dir) return true;
  }
  return false;
}

std::string failed(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// Puts a tmpfs over /run holding the host's entries (bind mounts, symlinks copied) but
// empty node directories. `old_run` is an O_PATH descriptor of the host's /run.
bool make_run_view(int old_run, std::string* error) {
  struct stat st {};
  if (::fstat(old_run, &st) != 0) return *error = failed("fstat /run"), false;
  char options[32];
  std::snprintf(options, sizeof options, "mode=%o", static_cast<unsigned>(st.st_mode & 07777));
  if (::mount("tmpfs", kRun, "tmpfs", MS_NOSUID | MS_NODEV, options) != 0)
    return *error = failed("tmpfs over /run"), false;
  const int listing_fd = ::openat(old_run, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* listing = listing_fd >= 0 ? ::fdopendir(listing_fd) : nullptr;
  if (listing == nullptr) return *error = failed("list the host's /run"), false;
  bool ok = true;
  while (dirent* e = ::readdir(listing)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || is_hidden(name)) continue;
    const std::string original = "/proc/self/fd/" + std::to_string(old_run) + "/" + name;
    const std::string entry = std::string(kRun) + "/" + name;
    struct stat est {};
    if (::lstat(original.c_str(), &est) != 0) continue;  // gone meanwhile
    if (S_ISLNK(est.st_mode)) {
      char target[4096];
      const ssize_t n = ::readlink(original.c_str(), target, sizeof target - 1);
      if (n < 0 || (target[n] = '\0', ::symlink(target, entry.c_str()) != 0))
        ok = (*error = failed("copy the link /run/" + name), false);
      continue;
    }
    // A mount point of the entry's kind, then the host's entry bound over it (MS_REC: with
    // whatever is mounted below it, like /run/user/0).
    const int made = S_ISDIR(est.st_mode)
                         ? ::mkdir(entry.c_str(), 0700)
                         : ::close(::open(entry.c_str(), O_CREAT | O_WRONLY, 0600));
    if (made != 0 ||
        ::mount(original.c_str(), entry.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
      ok = (*error = failed("bind the host's /run/" + name), false);
  }
  ::closedir(listing);
  if (!ok) return false;
  // The node's directories: present and empty, as on a machine no broker ever served.
  for (const char* dir : kNodeDirs) {
    if (::mkdir(dir, paths::kRunDirMode) != 0 || ::chmod(dir, paths::kRunDirMode) != 0)
      return *error = failed(std::string("mkdir ") + dir), false;
  }
  return true;
}

// What a node broker leaves behind, for the message when the view cannot be made.
std::string node_layout_on_host() {
  for (const std::string name :
       {paths::kBrokerLockName, paths::kTenantSocketName, paths::kAdminSocketName}) {
    const std::string path = std::string(paths::kRunDir) + "/" + name;
    if (::access(path.c_str(), F_OK) == 0) return path;
  }
  return "";
}

void set_state(const std::string& text) {
  std::snprintf(g_state, sizeof g_state, "%s", text.c_str());
}

void set_up() {
  if (::geteuid() != 0) {
    set_state("not root: the host's /run is used");
  } else if (::unshare(CLONE_NEWNS) != 0) {
    set_state(failed("unshare(CLONE_NEWNS)"));  // EINVAL: a thread already runs
  } else if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    // Without this the tmpfs would propagate to the host's mount namespace.
    set_state(failed("make / private"));
  } else {
    const int old_run = ::open(kRun, O_PATH | O_DIRECTORY | O_CLOEXEC);
    std::string error;
    if (old_run < 0) {
      set_state(failed("open /run"));
    } else if (!make_run_view(old_run, &error)) {
      set_state(error);
    } else {
      g_private = true;
      set_state("private");
    }
    // The bind mounts hold the host's entries; the descriptor is no longer needed.
    if (old_run >= 0) ::close(old_run);
  }
  if (g_private) return;
  const std::string stale = node_layout_on_host();
  if (!stale.empty()) {
    std::fprintf(stderr,
                 "fracgpu tests: %s exists (a node broker runs or ran here) and this test "
                 "program cannot hide it (%s); tests of shim'd processes may fail. Run the "
                 "tests as root, or remove %s if its broker is gone\n",
                 stale.c_str(), g_state, paths::kRunDir);
  }
}

// Priority 101: before the test program's other constructors, none of which may start a
// thread before this one ran.
__attribute__((constructor(101))) void enter_hermetic_namespace() {
  set_up();
}

}  // namespace

bool node_run_dir_is_private() {
  return g_private;
}

const char* node_run_dir_state() {
  return g_state;
}

}  // namespace fracgpu::testing
