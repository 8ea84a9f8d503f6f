// fork/exec with pipes (see child_process.h).
#include "child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace fakecuda_test {
namespace {

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> result;
  for (const std::string& arg : argv) result.push_back(const_cast<char*>(arg.c_str()));
  result.push_back(nullptr);
  return result;
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) std::abort();
  std::vector<char*> args = c_argv(argv);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill_hard();
    wait();
  }
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
}

std::string ChildProcess::read_line(int timeout_ms) {
  for (;;) {
    size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    pollfd fd{from_child_, POLLIN, 0};
    if (poll(&fd, 1, timeout_ms) <= 0) return "";
    char chunk[512];
    ssize_t n = read(from_child_, chunk, sizeof chunk);
    if (n <= 0) return "";
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

std::string ChildProcess::read_all(int timeout_ms) {
  std::string output = std::move(buffer_);
  buffer_.clear();
  for (;;) {
    pollfd fd{from_child_, POLLIN, 0};
    if (poll(&fd, 1, timeout_ms) <= 0) return output;
    char chunk[4096];
    ssize_t n = read(from_child_, chunk, sizeof chunk);
    if (n <= 0) return output;
    output.append(chunk, static_cast<size_t>(n));
  }
}

void ChildProcess::write_line(const std::string& line) {
  std::string data = line + "\n";
  ssize_t ignored = write(to_child_, data.data(), data.size());
  (void)ignored;
}

void ChildProcess::kill_hard() {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
}

int ChildProcess::wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

std::string run_and_capture(const std::vector<std::string>& argv, int* exit_status) {
  ChildProcess child(argv);
  std::string output = child.read_all();
  int status = child.wait();
  if (exit_status != nullptr) *exit_status = status;
  return output;
}

}  // namespace fakecuda_test
