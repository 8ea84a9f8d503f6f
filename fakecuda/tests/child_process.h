// A helper process for multi-process tests: fork + exec of a program with a pipe to
// its stdin and one from its stdout, so a test can wait for "ready", say "go", read
// results, and SIGKILL it to simulate a crashing GPU client.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fakecuda_test {

class ChildProcess {
 public:
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reads one line from the child's stdout (without '\n'); "" on EOF or timeout.
  std::string read_line(int timeout_ms = 10000);
  // Reads everything until the child closes its stdout.
  std::string read_all(int timeout_ms = 10000);
  void write_line(const std::string& line);
  void kill_hard();
  // Waits for exit; returns the exit status (or 128 + signal).
  int wait();

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string buffer_;
};

// Runs a command to completion and returns its stdout.
std::string run_and_capture(const std::vector<std::string>& argv, int* exit_status = nullptr);

}  // namespace fakecuda_test
