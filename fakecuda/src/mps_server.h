// MpsServer: the simulated MPS server inside the fake control daemon
// (tools/fakecuda_mps_control.cpp). It registers the daemon's server record in the
// shared device segment (mps_state.h) and runs one thread per device that holds the
// device engine (device_engine.h) on behalf of all its clients while any of them has
// work: the server is one context on the GPU, so its clients run together, side by
// side, and the server as a whole time-slices against ordinary contexts (yielding at
// the segment's timeslice when one waits). An idle server keeps the engine for up to
// kIdleHoldNs unless someone else wants it, as a GPU keeps a context resident: the next
// request of a client then starts without a handoff. Cost: a futex wait while idle, a
// look every 2 ms while busy (clients wake nobody but each other when SMs free up).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "mps_state.h"
#include "shared_segment.h"

namespace fakecuda {

class MpsServer {
 public:
  MpsServer() = default;
  ~MpsServer() { stop(); }
  MpsServer(const MpsServer&) = delete;
  MpsServer& operator=(const MpsServer&) = delete;

  // Registers the record for `pipe_dir` and starts the device threads.
  bool start(SegmentLayout* layout, const std::string& pipe_dir, std::string& error);
  // quit: refuse new clients; present ones run on.
  void stop_accepting();
  uint32_t live_clients();
  // PIDs of the live clients (get_client_list).
  std::vector<pid_t> clients();
  // Stops the threads (giving the engines back) and frees the record.
  void stop();

 private:
  void serve_device(uint32_t device);
  void set_holding(uint32_t device, bool holding);

  SegmentLayout* layout_ = nullptr;
  MpsServerRecord* record_ = nullptr;
  pid_t pid_ = 0;
  uint64_t start_time_ = 0;
  ProcessPlace place_;  // the daemon's PID namespace and host pid (host_pid.h)
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

}  // namespace fakecuda
