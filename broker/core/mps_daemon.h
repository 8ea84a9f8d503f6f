// MpsDaemon: the NVIDIA MPS control daemon the broker runs with --mps (docs/design.md
// "MPS mode"). It starts `nvidia-cuda-mps-control -d` (--mps-control) with
// CUDA_MPS_PIPE_DIRECTORY=<run-dir>/mps/pipe and CUDA_MPS_LOG_DIRECTORY=<run-dir>/mps/log
// (both created 0755, owned by the broker), learns the daemon's pid from the
// nvidia-cuda-mps-control.pid file the daemon writes into the pipe directory, and watches
// it with a pidfd on the broker's event loop: a daemon that dies is restarted with
// exponential backoff (0.5 s doubling to 30 s, reset after a minute of uptime). A daemon
// that cannot start never stops the broker: it logs the reason, retries with the same
// backoff, and until a daemon runs the tenants' processes are told nothing of MPS, so
// they time-slice as without --mps. A daemon left running by a previous broker (its pid
// file names a live process whose command is the control binary) is adopted, not
// restarted: its clients keep their contexts across a broker restart. At shutdown it is
// sent `quit` (which the daemon honours once its clients have exited) when no tenant
// process is registered; otherwise it is left running for the next broker, since a
// tenant's GPU context lives in its MPS server.
// One uid at a time: the MPS server runs as the uid of its first client, and the real
// control daemon queues a client of another uid until that server has exited (cuInit
// hangs meanwhile). So a registering process becomes a client only when its uid is the
// uid of the clients already registered (or there are none); others are told nothing of
// MPS and time-slice beside the server, with one log line.
// Cost: nothing on hot paths; a 20 ms timer only while a start is pending.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/result.h"
#include "core/event_loop.h"

namespace fracgpu::broker {

struct MpsDaemonOptions {
  std::string control = "nvidia-cuda-mps-control";  // --mps-control: a path, or a name on PATH
  std::string run_dir;                              // the broker's --run-dir
};

class MpsDaemon {
 public:
  enum class State { kStarting, kRunning, kBackingOff };

  MpsDaemon(EventLoop& loop, MpsDaemonOptions options);
  ~MpsDaemon();
  MpsDaemon(const MpsDaemon&) = delete;
  MpsDaemon& operator=(const MpsDaemon&) = delete;

  // Creates the directories and starts (or adopts) the daemon; failures are retried.
  void start();
  // The same, then waits up to `timeout_ms` for the start to succeed or fail (at broker
  // start-up, so that the first registrations already get MPS).
  void start_and_wait(int timeout_ms);
  // Broker shutdown: `quit` when `clients_alive` is 0, else leave it to the next broker.
  void shutdown(unsigned clients_alive);

  // Called on the loop thread whenever running() changes.
  void set_on_change(std::function<void(bool running)> on_change) {
    on_change_ = std::move(on_change);
  }

  // Whether the registering process `pid` of `uid` may be an MPS client: nullopt = yes
  // (recorded until it exits), otherwise why not (the daemon is down, or its server
  // serves another uid).
  std::optional<std::string> admit_client(pid_t pid, uid_t uid);
  // A process registered before a broker restart, still running: counted with its uid.
  void adopt_client(pid_t pid);
  void client_exited(pid_t pid);

  bool running() const { return state_ == State::kRunning; }
  pid_t pid() const { return pid_; }
  const std::string& pipe_dir() const { return pipe_dir_; }
  const std::string& log_dir() const { return log_dir_; }
  unsigned restarts() const { return restarts_; }
  // {"mode":"mps","state":"running"|"starting"|"failed","pid":N,"restarts":N,
  //  "pipe_dir":"...","log_dir":"...","error":"..." (the last failure, when not running)}
  nlohmann::json status_json() const;

 private:
  Status prepare_directories();
  bool adopt();
  void launch();
  void poll_launch();
  Status watch(pid_t pid);
  void on_daemon_exit();
  void fail(const std::string& why);
  void arm_poll();
  void disarm_poll();
  std::string launcher_output() const;
  void set_state(State state);
  void forget_dead_clients();

  struct Client {
    uid_t uid;
    uint64_t start_time;
  };

  EventLoop& loop_;
  MpsDaemonOptions options_;
  std::string pipe_dir_, log_dir_;
  State state_ = State::kBackingOff;
  pid_t pid_ = 0;       // the daemon
  pid_t launcher_ = 0;  // `control -d` while it runs
  int pidfd_ = -1;
  EventLoop::Id pidfd_id_ = 0;
  EventLoop::Id poll_id_ = 0;
  int64_t launched_at_ = 0;  // monotonic ns of the current start
  int64_t running_since_ = 0;
  int64_t retry_at_ = 0;
  int64_t backoff_ns_ = 0;
  unsigned restarts_ = 0;  // starts after the first one
  unsigned failures_ = 0;  // consecutive
  bool started_once_ = false;
  std::string error_;
  std::function<void(bool)> on_change_;
  std::map<pid_t, Client> clients_;  // registered MPS clients, by pid
};

// The daemon's command for `pid` is `control` (argv[0]'s file name): a pid file of a
// previous daemon may name a pid since reused by another program.
bool is_control_daemon(pid_t pid, const std::string& control);

}  // namespace fracgpu::broker
