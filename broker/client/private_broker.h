// A broker started by `fracgpu run` (and `fracgpu demo`) for its own command when no node
// broker serves us: the same code (`fracgpu broker`, re-executed from /proc/self/exe) in a
// child process, with its run and state directories in a private temporary directory. It
// lives in its own process group, so the terminal's Ctrl-C reaches the command but not the
// broker, and it is told to exit (PR_SET_PDEATHSIG) should the CLI itself die.
#pragma once

#include <filesystem>

#include "client/broker_launcher.h"
#include "common/result.h"

namespace fracgpu::client {

class PrivateBroker {
 public:
  PrivateBroker() = default;
  ~PrivateBroker() { stop(); }
  PrivateBroker(const PrivateBroker&) = delete;
  PrivateBroker& operator=(const PrivateBroker&) = delete;

  // Starts the broker and waits until it serves (or fails, or 60 s pass).
  Status start();
  // Stops it (SIGTERM, then SIGKILL after 5 s) and removes the temporary directory.
  void stop();

  const std::filesystem::path& run_dir() const { return run_dir_; }
  pid_t pid() const { return process_.pid(); }  // -1 before start()

 private:
  BrokerProcess process_;
  std::filesystem::path temp_dir_;
  std::filesystem::path run_dir_;
};

}  // namespace fracgpu::client
