// Starting a fracgpu broker as a child process and waiting until it serves: the one
// launcher behind `fracgpu run`'s private broker, `fracgpu demo`, the tests' brokers and
// the benchmarks'. The child gets --run-dir, --state-dir and --ready-fd (the broker writes
// one byte to that fd once its admin socket listens; EOF without the byte means it failed
// and has said why on its stderr), then the caller's extra flags.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace fracgpu::client {

using broker::Status;
using Environment = std::map<std::string, std::string>;

struct BrokerLaunch {
  // The broker's command before the flags: {"/path/fracgpu-broker"}, or
  // {"/proc/self/exe", "broker"} for the CLI's own `fracgpu broker`. An absolute path.
  std::vector<std::string> program;
  std::filesystem::path run_dir;
  std::filesystem::path state_dir;
  std::vector<std::string> args;  // after the standard flags: --driver, --log-level ...
  // The child's exact environment; nullopt: this process's.
  std::optional<Environment> environment;
  // stdout and stderr appended to this file; empty: inherited.
  std::filesystem::path log_file;
  // In its own process group (so the terminal's Ctrl-C is not for it) and sent SIGTERM
  // when the thread that started it ends (PR_SET_PDEATHSIG): for a broker that must not
  // outlive a CLI command.
  bool detach = false;
  std::chrono::milliseconds ready_timeout = std::chrono::seconds(60);
  std::string description = "the broker";  // how errors name it
};

// This process's environment as a map (to start a broker with a few variables changed).
Environment current_environment();

// A started broker; the destructor kills it (SIGKILL) if it still runs.
class BrokerProcess {
 public:
  BrokerProcess() = default;
  ~BrokerProcess() { kill(); }
  BrokerProcess(const BrokerProcess&) = delete;
  BrokerProcess& operator=(const BrokerProcess&) = delete;

  // Starts the broker and waits until it serves: "", or why not (then it is not running).
  Status start(const BrokerLaunch& launch);

  pid_t pid() const { return pid_; }
  bool running();  // reaps it once it has exited
  void signal(int sig);
  // Waits up to `limit` for it to exit: its status as a shell gives it (the exit code,
  // 128+N after signal N), or nullopt while it still runs.
  std::optional<int> wait(std::chrono::milliseconds limit);
  // SIGTERM, and SIGKILL after `grace`; the exit status as wait() gives it (also when it
  // had already exited), -1 when none was started.
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  // SIGKILL and reap.
  void kill();

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;  // set once reaped
};

}  // namespace fracgpu::client
