// Spawning, readiness and teardown of the private broker. Readiness is a pipe: the
// broker writes one byte once its admin socket is listening (--ready-fd); EOF without
// that byte means it failed to start, and it has already said why on stderr.
#include "private_broker.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace fracgpu::cli {
namespace {

// Short base: tenant sockets must fit the 107-byte limit of a Unix socket path.
std::filesystem::path temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  if (tmp != nullptr && *tmp == '/' && std::strlen(tmp) < 32) return tmp;
  return "/tmp";
}

[[noreturn]] void exec_broker(const std::filesystem::path& run_dir, const std::filesystem::path& state_dir,
                              int ready_fd, pid_t parent) {
  ::setpgid(0, 0);                   // out of the terminal's foreground group: Ctrl-C is for the command
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // and gone with the CLI
  if (::getppid() != parent) ::_exit(1);  // the CLI died before PDEATHSIG was armed
  const std::string fd = std::to_string(ready_fd);
  const std::string run = run_dir.string(), state = state_dir.string();
  const char* argv[] = {"fracgpu", "broker", "--run-dir", run.c_str(), "--state-dir", state.c_str(),
                        "--log-level", "error", "--ready-fd", fd.c_str(), nullptr};
  ::execv("/proc/self/exe", const_cast<char* const*>(argv));
  std::fprintf(stderr, "fracgpu: cannot start a private broker: %s\n", std::strerror(errno));
  ::_exit(127);
}

}  // namespace

Status PrivateBroker::make_temp_dir() {
  std::string pattern = (temp_base() / "fracgpu-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::failure("cannot create a temporary directory in " + temp_base().string() + ": " +
                           std::strerror(errno));
  }
  temp_dir_ = pattern;
  run_dir_ = temp_dir_ / "run";
  return {};
}

Status PrivateBroker::start() {
  if (auto s = make_temp_dir(); !s) return s;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::failure(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) return Status::failure(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    ::close(pipe_fds[0]);
    const int ready = ::fcntl(pipe_fds[1], F_DUPFD, 3);  // a copy without close-on-exec
    exec_broker(run_dir_, temp_dir_ / "state", ready, parent);
  }
  ::close(pipe_fds[1]);
  Status status = wait_until_ready(pipe_fds[0]);
  ::close(pipe_fds[0]);
  if (!status) stop();
  return status;
}

Status PrivateBroker::wait_until_ready(int ready_fd) {
  pollfd p{ready_fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, 60000);
  } while (rc < 0 && errno == EINTR);
  char byte = 0;
  if (rc == 1 && ::read(ready_fd, &byte, 1) == 1) return {};
  return Status::failure(rc == 0 ? "the private broker did not start within 60 s" : "the private broker failed to start");
}

void PrivateBroker::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
  }
  if (!temp_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
    temp_dir_.clear();
  }
}

}  // namespace fracgpu::cli
