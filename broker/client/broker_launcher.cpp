// fork/exec of a broker and its readiness pipe (see broker_launcher.h). Everything the
// child needs (argv, environment, log file) is made before fork, so that between fork
// and exec the child only makes system calls: a test may start a broker from one thread
// while others run.
#include "client/broker_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

extern char** environ;

namespace fracgpu::client {
namespace {

// The readiness pipe's write end in the child: a fixed number, so that --ready-fd can be
// put into argv before fork.
constexpr int kReadyFd = 3;

int shell_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child; never returns.
[[noreturn]] void exec_child(char* const* argv, char* const* envp, int log_fd, int ready_fd,
                             bool detach, pid_t parent) {
  if (detach) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // the parent ended before PDEATHSIG was armed
  }
  if (log_fd >= 0) {
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
  }
  if (ready_fd == kReadyFd) {
    ::fcntl(kReadyFd, F_SETFD, 0);  // keep it across exec
  } else {
    ::dup2(ready_fd, kReadyFd);  // the copy is not close-on-exec
  }
  ::execve(argv[0], argv, envp);
  const char* what = "fracgpu: cannot start the broker: ";
  (void)!::write(STDERR_FILENO, what, std::strlen(what));
  const char* why = std::strerror(errno);
  (void)!::write(STDERR_FILENO, why, std::strlen(why));
  (void)!::write(STDERR_FILENO, "\n", 1);
  ::_exit(127);
}

}  // namespace

Environment current_environment() {
  Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

Status BrokerProcess::start(const BrokerLaunch& launch) {
  kill();
  status_.reset();
  if (launch.program.empty()) return Status::failure("no broker program given");
  std::vector<std::string> args = launch.program;
  args.insert(args.end(), {"--run-dir", launch.run_dir.string(), "--state-dir",
                           launch.state_dir.string(), "--ready-fd", std::to_string(kReadyFd)});
  args.insert(args.end(), launch.args.begin(), launch.args.end());
  std::vector<std::string> env;
  for (const auto& [key, value] :
       launch.environment ? *launch.environment : current_environment()) {
    env.push_back(key + "=" + value);
  }
  auto argv = pointers(args);
  auto envp = pointers(env);
  int log_fd = -1;
  if (!launch.log_file.empty()) {
    log_fd = ::open(launch.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
      return Status::failure("cannot open " + launch.log_file.string() + ": " +
                             std::strerror(errno));
  }
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    if (log_fd >= 0) ::close(log_fd);
    return Status::failure(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) exec_child(argv.data(), envp.data(), log_fd, ready[1], launch.detach, parent);
  const int fork_errno = errno;
  ::close(ready[1]);
  if (log_fd >= 0) ::close(log_fd);
  if (pid_ < 0) {
    ::close(ready[0]);
    return Status::failure(std::string("fork: ") + std::strerror(fork_errno));
  }
  pollfd p{ready[0], POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(launch.ready_timeout.count()));
  } while (rc < 0 && errno == EINTR);
  char byte = 0;
  const bool serving = rc == 1 && ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  if (serving) return {};
  if (rc == 0) {
    kill();
    return Status::failure(launch.description + " did not start within " +
                           std::to_string(launch.ready_timeout.count() / 1000) + " s");
  }
  const auto status = wait(std::chrono::seconds(5));
  kill();
  return Status::failure(
      launch.description + " failed to start" +
      (status ? " (exit status " + std::to_string(*status) + ")" : std::string()));
}

bool BrokerProcess::running() {
  if (pid_ <= 0 || status_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    status_ = shell_status(status);
    return false;
  }
  return true;
}

void BrokerProcess::signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

std::optional<int> BrokerProcess::wait(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

int BrokerProcess::stop(std::chrono::milliseconds grace) {
  if (!running()) return status_.value_or(-1);
  ::kill(pid_, SIGTERM);
  if (auto status = wait(grace)) return *status;
  kill();
  return status_.value_or(-1);
}

void BrokerProcess::kill() {
  if (!running()) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  if (::waitpid(pid_, &status, 0) == pid_) status_ = shell_status(status);
}

}  // namespace fracgpu::client
