// Running real processes from integration tests: fork/exec with an exact environment,
// stdout/stderr captured, a wall-clock limit, and handles for processes a test wants
// to kill at a chosen moment.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fracgpu::testing {

using Environment = std::map<std::string, std::string>;

// Who a child runs as: the child drops its supplementary groups, then sets gid and uid
// before exec (the parent must be root). Unset: the test's own identity.
struct RunAs {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct ProcessResult {
  int exit_code = -1;  // valid when signal == 0
  int signal = 0;      // the signal that ended it, if any
  bool timed_out = false;
  std::string out;
  std::string err;
};

// The current environment minus the variables that steer fracgpu or the simulated GPU,
// so that tests start from a known state.
Environment clean_environment();

// Runs argv[0] (searched in PATH) with exactly `env`; kills it after `limit`.
ProcessResult run_process(const std::vector<std::string>& argv, const Environment& env,
                          std::chrono::milliseconds limit = std::chrono::seconds(60),
                          std::optional<RunAs> as = std::nullopt);

// A process started in the background with stdout/stderr sent to files.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv, const Environment& env,
                    const std::string& log_prefix, std::optional<RunAs> as = std::nullopt);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  void kill_now(int signal);
  // Waits for exit; returns the wait status, or -1 after `limit` (the process is then killed).
  int wait(std::chrono::milliseconds limit);
  // Polls `ready` every 20 ms until it holds: "" then, else why not (the process exited,
  // with its stderr, or `limit` passed). For daemons a test starts and then talks to.
  std::string wait_until_ready(const std::function<bool()>& ready, std::chrono::milliseconds limit);
  // SIGKILL, then reaps it (at most 5 s).
  void kill_and_reap();
  std::string out() const;
  std::string err() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string out_path_, err_path_;
};

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_text(const std::string& path);

// A name that no other test (or concurrent test run) uses, for shared-memory segments.
std::string unique_name(const std::string& tag);

}  // namespace fracgpu::testing
