// SwapArenaPort: AsyncArena's port onto the shim (core/async_arena.h). Chunks are
// SwapEngine allocations (VMM-backed, charged to the ledger, moved to host with the rest);
// events and the context synchronisation of a synchronous free are the real driver's
// (DriverCalls), event queries run in relaxed capture mode and the synchronisation only
// while no capture is open (core/capture_tracker.h rules 2 and 4).
// Cost: what each call forwards to, plus two thread-local driver calls around a batch of
// event queries (RelaxedScope).
#pragma once

#include "core/async_arena.h"
#include "core/capture_tracker.h"
#include "core/driver_calls.h"
#include "core/swap_engine.h"

namespace fracgpu {

class SwapArenaPort final : public ArenaPort {
 public:
  SwapArenaPort(SwapEngine& swap, const DriverCalls& calls, CaptureTracker& captures)
      : swap_(swap), calls_(calls), captures_(captures) {}

  uint64_t granularity(const TenantDevice& device) override;
  std::optional<CUresult> allocate_chunk(const TenantDevice& device, uint64_t bytes,
                                         CUdeviceptr* base) override;
  void free_chunk(CUdeviceptr base) override;
  CUcontext current_context() override;
  CUevent create_event() override;
  CUresult record_event(CUevent event, CUstream stream) override;
  void events_done(const CUevent* events, bool* done, std::size_t n) override;
  void destroy_event(CUevent event) override;
  void synchronize_context() override;

 private:
  SwapEngine& swap_;
  const DriverCalls& calls_;
  CaptureTracker& captures_;
};

}  // namespace fracgpu
