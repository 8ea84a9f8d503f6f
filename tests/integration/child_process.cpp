// Implementation of the integration tests' process helpers (see child_process.h).
#include "child_process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace fracgpu::testing {
namespace {

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> env_strings(const Environment& env) {
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

// What a child execs, built in the PARENT: between fork() and exec the child of a
// multi-threaded test process (gRPC servers, the fake kubelet) may only make
// async-signal-safe calls. Allocating there deadlocked now and then under AddressSanitizer,
// whose allocator lock another thread held at the fork (the child asleep in a futex, no
// exec, an empty log: 2026-12-07, tests/k8s); glibc's own malloc resets its locks at fork,
// ASan's does not.
struct ExecImage {
  std::vector<std::string> args, envs;
  std::vector<char*> arg_ptrs, env_ptrs;
  ExecImage(const std::vector<std::string>& argv, const Environment& env)
      : args(argv), envs(env_strings(env)) {
    arg_ptrs = c_strings(args);
    env_ptrs = c_strings(envs);
  }
};

void write_stderr(const char* text) {
  (void)!::write(2, text, strlen(text));
}

// In the child: exec the image (as `as`, when given); never returns. Async-signal-safe only.
[[noreturn]] void exec_child(ExecImage& image, const std::optional<RunAs>& as) {
  setpgid(0, 0);
  if (as && (setgroups(0, nullptr) != 0 || setgid(as->gid) != 0 || setuid(as->uid) != 0)) {
    write_stderr("cannot switch to the test user's uid and gid\n");
    _exit(126);
  }
  if (strchr(image.arg_ptrs[0], '/') != nullptr)
    execve(image.arg_ptrs[0], image.arg_ptrs.data(), image.env_ptrs.data());
  else
    execvpe(image.arg_ptrs[0], image.arg_ptrs.data(), image.env_ptrs.data());
  write_stderr("exec failed: ");
  write_stderr(image.arg_ptrs[0]);
  write_stderr("\n");
  _exit(127);
}

void drain(int fd, std::string* into) {
  char buffer[8192];
  ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n > 0) into->append(buffer, static_cast<size_t>(n));
}

}  // namespace

Environment clean_environment() {
  Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    std::string key = entry.substr(0, eq);
    // CUDA_VISIBLE_DEVICES too: the simulated driver honours it, and a runner that sets
    // it must not change which simulated devices the tests see.
    if (key.rfind("FRACGPU_", 0) == 0 || key.rfind("FAKECUDA_", 0) == 0 || key == "LD_PRELOAD" ||
        key == "LD_LIBRARY_PATH" || key == "CUDA_VISIBLE_DEVICES") {
      continue;
    }
    env[key] = entry.substr(eq + 1);
  }
  return env;
}

ProcessResult run_process(const std::vector<std::string>& argv, const Environment& env,
                          std::chrono::milliseconds limit, std::optional<RunAs> as) {
  ProcessResult result;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  ExecImage image(argv, env);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    exec_child(image, as);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP))) {
        std::string* into = i == 0 ? &result.out : &result.err;
        size_t before = into->size();
        drain(fds[i].fd, into);
        if (into->size() == before) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
        }
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv, const Environment& env,
                                     const std::string& log_prefix, std::optional<RunAs> as)
    : out_path_(log_prefix + ".out"), err_path_(log_prefix + ".err") {
  ExecImage image(argv, env);
  pid_ = fork();
  if (pid_ == 0) {
    int out = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    exec_child(image, as);
  }
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

bool BackgroundProcess::running() {
  if (reaped_) return false;
  pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

void BackgroundProcess::kill_now(int signal) {
  if (!reaped_) kill(pid_, signal);
}

int BackgroundProcess::wait(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill_now(SIGKILL);
      waitpid(pid_, &status_, 0);
      reaped_ = true;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return status_;
}

std::string BackgroundProcess::wait_until_ready(const std::function<bool()>& ready,
                                                std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (!running()) return "exited: " + err();
    if (std::chrono::steady_clock::now() > deadline)
      return "not ready within " + std::to_string(limit.count()) + " ms";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "";
}

void BackgroundProcess::kill_and_reap() {
  kill_now(SIGKILL);
  wait(std::chrono::seconds(5));
}

std::string BackgroundProcess::out() const {
  return read_text(out_path_);
}
std::string BackgroundProcess::err() const {
  return read_text(err_path_);
}

TempDir::TempDir(const std::string& tag) {
  const char* base = getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/fracgpu-" + tag + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) != nullptr) path_ = buffer.data();
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string unique_name(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "fracgpu-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

}  // namespace fracgpu::testing
