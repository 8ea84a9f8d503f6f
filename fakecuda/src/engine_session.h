// How one executor thread uses its device's engine: it acquires the engine when work
// that takes device time starts, keeps it while its queue has more such work, yields
// at every timeslice boundary when another context is waiting (even in the middle of
// a kernel: compute preemption) and releases it when its queue runs dry. The time
// spent holding the engine for work is charged as busy time to this process.
// An MPS client's session (mps_client.h) holds no engine of its own: its work goes to
// the server's kernel table, which shares the device spatially among the server's
// clients and charges them SM time; the server's thread holds the engine for them.
#pragma once

#include <cstdint>
#include <utility>

#include "device_engine.h"
#include "mps_client.h"
#include "shared_segment.h"

namespace fakecuda {

class EngineSession {
 public:
  EngineSession(SegmentLayout* layout, uint32_t device, ProcessRecord* process, EngineParty self,
                MpsClient* mps = nullptr);

  // Occupies the device for `duration_ns` of engine-held time (preemptible).
  void occupy(int64_t duration_ns);

  // The fraction of the device's SMs the next work can use (an MPS client's kernels
  // share the device by it; ignored otherwise): set per operation by the executor.
  void set_demand(double demand) { demand_ = demand; }
  // MPS: the server went away during work (reported once), or a client's fatal fault
  // reached this process on this device.
  CUresult take_mps_failure() {
    const CUresult failure = mps_failure_;
    mps_failure_ = CUDA_SUCCESS;
    return failure;
  }
  bool mps_fault_reached() const { return mps_ != nullptr && mps_->fault_reached(device_index_); }
  void report_mps_fault() {
    if (mps_ != nullptr) mps_->report_fault(device_index_);
  }

  // Runs `work` while holding the engine and charges its wall time as busy time.
  template <typename Work>
  void run_holding(Work&& work) {
    if (mps_ != nullptr) {  // instantaneous here; its device time comes from occupy()
      work();
      return;
    }
    start_holding();
    int64_t begin = now();
    enter_chunk();
    work();
    leave_chunk();
    charge_busy(now() - begin);
  }

  // Runs `work` holding the engine, then keeps holding until at least `min_ns` passed:
  // memory-bound work takes as long as the simulated bandwidth says, or longer.
  template <typename Work>
  void run_at_least(int64_t min_ns, Work&& work) {
    int64_t begin = now();
    run_holding(std::forward<Work>(work));
    int64_t remaining = min_ns - (now() - begin);
    if (remaining > 0) occupy(remaining);
  }

  void count_kernel();

  // Gives the engine back if held (queue empty, or about to block on the host).
  void release();

 private:
  void start_holding();
  void yield_if_slice_over();
  void charge_busy(int64_t ns);
  void enter_chunk();
  void leave_chunk();
  static int64_t now();

  DeviceEngine engine_;
  MpsClient* mps_;
  EngineParty self_;
  double demand_ = 1.0;
  CUresult mps_failure_ = CUDA_SUCCESS;
  EngineRecord* engine_record_;
  DeviceRecord* device_;
  ProcessRecord* process_;
  uint32_t device_index_;
  int64_t timeslice_ns_;
  bool holding_ = false;
  int64_t slice_start_ns_ = 0;
};

}  // namespace fakecuda
