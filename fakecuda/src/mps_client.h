// MpsClient: this process as a client of a simulated MPS server (mps_state.h). At cuInit
// the driver joins the server whose fake control daemon (fakecuda-mps-control) runs in
// CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps, like the real driver), with the
// priority CUDA_MPS_CLIENT_PRIORITY gives (0 normal, 1 below normal). A process that
// finds no daemon there is an ordinary context and time-slices on the device engine.
// Its executors then run device work through occupy() instead of holding the engine:
// the work is added to the server's kernel table of the device and the executor sleeps
// until the table says it finished (spinning the last 50 us, like precise_clock.h): a
// kernel that holds all the SMs it wants sleeps until its end, one still waiting for SMs
// waits on the device's sequence word. Cost per kernel: two or three locks of the
// server record, a futex wake when its end frees SMs.
#pragma once

#include <cuda.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "mps_state.h"

namespace fakecuda {

struct SegmentLayout;

class MpsClient {
 public:
  // The server this process must join, or none: *failure is CUDA_SUCCESS and nullptr is
  // returned when no fake daemon serves the pipe directory; an error (the server is
  // stopping, or has no room) otherwise. A server that serves another uid with clients
  // makes this wait, as the real control daemon queues such a client.
  static std::unique_ptr<MpsClient> join(SegmentLayout* layout, int process_slot, pid_t pid,
                                         uint64_t start_time, CUresult* failure);
  ~MpsClient();
  MpsClient(const MpsClient&) = delete;
  MpsClient& operator=(const MpsClient&) = delete;

  // Runs `duration_ns` of solo work that can use `demand` of the SMs. False when the
  // server went away (its daemon exited or was killed) before the work finished.
  bool occupy(uint32_t device, uint64_t executor_id, double demand, int64_t duration_ns);

  // A fatal fault of some client of this server reached this process on `device`.
  bool fault_reached(uint32_t device) const;
  // This process raised a fatal fault on `device`: every client of the server gets it.
  void report_fault(uint32_t device);
  // New contexts on `device` are refused while a fault's clients are still there.
  bool refuses_contexts(uint32_t device);

  pid_t server_pid() const { return daemon_pid_; }
  uint32_t priority() const { return priority_; }

 private:
  MpsClient(SegmentLayout* layout, MpsServerRecord* server, uint32_t client, uint32_t priority);
  bool server_alive() const;
  // Sleeps until `deadline_ns` or until the device's sequence moves from `seen`.
  void wait_for_event(uint32_t device, uint32_t seen, int64_t deadline_ns);

  SegmentLayout* layout_;
  MpsServerRecord* server_;
  uint32_t client_;
  uint32_t priority_;
  int32_t daemon_pid_;
  uint64_t daemon_start_time_;
};

// CUDA_MPS_PIPE_DIRECTORY as the driver reads it (default /tmp/nvidia-mps).
std::string mps_pipe_directory();
// CUDA_MPS_CLIENT_PRIORITY: 0 (normal, the default) or 1 (below normal); anything else
// is 0 with one line on stderr.
uint32_t mps_client_priority();

}  // namespace fakecuda
