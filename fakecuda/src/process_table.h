// The per-process usage table of the shared device: which processes use the device,
// how much memory each holds per device, how long its work held the engine and how
// many kernels it ran. A process is identified by pid plus its start time, so a
// recycled pid is never mistaken for the process that held memory before it. When a
// process is found dead (sweep), its memory is returned to the device, as the real
// driver does when a process exits or is killed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "shared_segment.h"

namespace fakecuda {

// Start time (clock ticks since boot) of `pid`, or nullopt when the process does not
// exist or is a zombie: a SIGKILLed child that is not reaped yet no longer holds GPU
// memory on a real machine either.
std::optional<uint64_t> process_start_time(pid_t pid);

// True while the process that had `pid` at `start_time` is alive (not a zombie).
bool process_alive(int32_t pid, uint64_t start_time);
// The process is stopped (SIGSTOP, a debugger: /proc state T or t).
bool process_stopped(int32_t pid);

// The pid the device reports for a process (NVML, status): its pid in the device's host
// PID namespace, as the real driver records it (host_pid.h).
inline int32_t reported_pid(const ProcessRecord& record) {
  return record.place.host_pid > 0 ? record.place.host_pid : record.pid;
}

class ProcessTable {
 public:
  explicit ProcessTable(SegmentLayout* layout) : layout_(layout) {}

  // Claims a slot for the calling process, at `place` (resolve_own_place); returns its
  // index or -1 when full.
  int register_self(const ProcessPlace& place);

  // Returns the memory of every dead Live process to its devices. Returns bytes freed. A
  // process this PID namespace cannot see (host_pid.h) is left alone.
  uint64_t sweep_dead();

  ProcessRecord& slot(int index) { return layout_->processes[index]; }

  // Marks our own slot exited after releasing its memory (used by fakecuda_shutdown).
  void retire(int index);

 private:
  int claim_slot(ProcessState from, int32_t pid, uint64_t start_time, const ProcessPlace& place);
  void reclaim(ProcessRecord& record);

  SegmentLayout* layout_;
};

}  // namespace fakecuda
