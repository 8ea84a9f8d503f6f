// SwapEngine: device memory that the broker can move to host and back at the same
// addresses (overcommit with guarantees; docs/design.md "Overcommit and swap").
//
// For a tenant whose quota says kSwapAllow, cuMemAlloc of a size the VMM granularity
// suits (a multiple of it, or at least 8 granules) is backed by the shim itself:
// cuMemAddressReserve + cuMemCreate + cuMemMap + cuMemSetAccess (the owner and every
// device that can access it as a peer). When the broker lowers the tenant's
// resident_target, a swap thread of this process copies such allocations to pinned host
// memory (core/host_staging.h: pinned chunk by chunk on a few worker threads while the
// copies run), unmaps them and releases their physical pages, keeping the address range
// reserved; the next call of the application that can touch device memory (a launch, a
// copy, a memset: the ResidencyGate below) brings everything back first — reserving the
// bytes against the grant again, which waits while the broker has lent them to a
// guaranteed tenant — at the same addresses. The application's own VMM mappings join the
// same moves when core/app_vmm.h finds them swappable (records with `app` set), and the
// stream-ordered allocations of the default pool are carved from allocations of this engine
// (core/async_arena.h). Everything else (managed, pitched, the application's own pools,
// arrays, small allocations, swap "never") stays native and resident.
//
// Sharing (core/ipc_exporter.h): an allocation another process maps through legacy IPC is
// pinned — brought back first if it is on host, never moved again — and its physical memory
// is created exportable as a POSIX descriptor (requested at cuMemCreate where the device
// supports it, as PyTorch's expandable segments do). Its free tells the exporter (the
// handle's export goes); the importer's mapping keeps the physical memory alive until it
// closes.
//
// The swap reserve (core/host_reserve.h): while the broker lets the tenant hold one
// (DeviceQuota.host_reserve: for what it borrows), the swap thread pins host memory ahead,
// up to that less what the tenant's other processes hold and at most this process's own
// resident swappable bytes, 1 GiB per look, while no demand is open; a swap-out copies
// into it first, at the host link's speed. What it holds is published in
// TenantLedger.host_reserved (counted in the node's host budget), in the order the
// segment's specification gives.
//
// Capture safety: a swap-out runs only while no stream capture is open in the process
// (CaptureTracker::run_unless_capturing, which also keeps new captures from beginning
// while it runs), from a thread in relaxed capture mode.
//
// Cost: a tenant with swap "never" pays one relaxed load per allocation. With "allow",
// each gated or resident call pays two uncontended atomic RMWs on a process-local line
// (the gate) once the process holds a swappable allocation; a swappable allocation costs
// the four VMM calls instead of cuMemAlloc, its free an unmap, a release and a context
// synchronisation (what cuMemFree implies).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/capture_tracker.h"
#include "core/driver_calls.h"
#include "core/host_staging.h"
#include "core/ipc_shareable.h"
#include "core/memory_policy.h"

namespace fracgpu {

// The process-local gate between the application's device-memory calls and a swap.
// enter() counts the caller in while the gate is open; close_and_wait() shuts it and
// waits for those inside to leave (Dekker over seq_cst RMWs and loads).
class ResidencyGate {
 public:
  bool armed() const noexcept { return armed_.load(std::memory_order_acquire); }
  void arm() noexcept { armed_.store(true, std::memory_order_release); }
  // calls_: low 32 bits the threads inside now, high 32 bits the calls completed (what the
  // swap thread reads to tell an idle process from a busy one; no extra RMW per call).
  bool enter() noexcept {
    calls_.fetch_add(1, std::memory_order_seq_cst);
    if (open_.load(std::memory_order_seq_cst)) return true;
    calls_.fetch_sub(1, std::memory_order_seq_cst);
    return false;
  }
  void leave() noexcept { calls_.fetch_add(kLeave, std::memory_order_seq_cst); }
  uint32_t completed() const noexcept {
    return static_cast<uint32_t>(calls_.load(std::memory_order_relaxed) >> 32);
  }
  void close_and_wait() noexcept;
  void open() noexcept { open_.store(true, std::memory_order_seq_cst); }
  bool is_open() const noexcept { return open_.load(std::memory_order_seq_cst); }

 private:
  static constexpr uint64_t kLeave = (1ull << 32) - 1;  // one inside fewer, one completed more
  std::atomic<bool> armed_{false};
  alignas(64) std::atomic<bool> open_{true};
  std::atomic<uint64_t> calls_{0};
};

class SwapEngine final : public ShareableMemory {
 public:
  SwapEngine(MemoryPolicy& memory, CaptureTracker& captures, const FenceOps& fence_ops);
  SwapEngine(const SwapEngine&) = delete;
  SwapEngine& operator=(const SwapEngine&) = delete;

  // cuMemAlloc on `device`: nullopt when the allocation is not one to back (the caller
  // allocates natively), else the result (on success *dptr is set and charged).
  std::optional<CUresult> allocate(const TenantDevice& device, CUdeviceptr* dptr, uint64_t bytes);
  // cuMemFree: nullopt when `ptr` is not a swappable allocation.
  std::optional<CUresult> free(CUdeviceptr ptr);

  // --- Sharing with other processes (core/ipc_shareable.h) ---
  // The allocation containing `ptr`, made resident and pinned; nullopt when it is not one
  // the engine backs. CUDA_ERROR_OUT_OF_MEMORY when it is on host and cannot come back.
  std::optional<CUresult> pin_for_sharing(CUdeviceptr ptr,
                                          ShareableAllocation* out) noexcept override;
  // The application exports a physical handle itself (cuMemExportToShareableHandle, e.g.
  // after cuMemRetainAllocationHandle): if it is one of ours, that allocation is pinned.
  // True when it was.
  bool pin_handle(CUmemGenericAllocationHandle handle) noexcept;
  // Told when a pinned allocation is freed (set once, at the first cuIpc* call).
  void set_share_listener(SharedFreeListener* listener) noexcept {
    share_listener_.store(listener, std::memory_order_release);
  }

  // Around every call that can touch device memory: brings swapped memory back first.
  class Section {
   public:
    explicit Section(SwapEngine& engine) noexcept : engine_(engine) {
      if (__builtin_expect(engine_.gate_.armed(), 0)) entered_ = engine_.enter_slow();
    }
    ~Section() {
      if (entered_) engine_.gate_.leave();
    }
    Section(const Section&) = delete;
    Section& operator=(const Section&) = delete;

   private:
    SwapEngine& engine_;
    bool entered_ = false;
  };

  // Moves this process's swappable allocations on tenant device `index` to host until the
  // tenant's resident bytes there are at most `target`. Returns the bytes moved; 0 also
  // when a capture is open (the swap thread tries again). The swap thread calls it on the
  // broker's demand; tests call it directly.
  uint64_t swap_out(int index, uint64_t target) noexcept;
  // Brings every swapped allocation back (waits for the grant). Called by enter_slow.
  void swap_in_all() noexcept;

  // Status and tests.
  uint64_t swapped_bytes() const noexcept { return swapped_bytes_.load(std::memory_order_relaxed); }
  // Bytes pinned for sharing: they never move to host. Not yet in the ledger the broker
  // reads (docs/design.md "Overcommit and swap").
  uint64_t pinned_bytes() const noexcept { return pinned_bytes_.load(std::memory_order_relaxed); }
  std::size_t backed_allocations() const;
  void after_fork_in_child() noexcept;

  // --- The application's own VMM mappings (core/app_vmm.h; defined in app_vmm.cpp) ---
  // What a swap-in needs to rebuild a mapping the application made.
  struct AppMapping {
    CUmemGenericAllocationHandle app = 0;  // the application's value
    CUmemAllocationProp prop{};            // as the application created it
    std::vector<CUmemAccessDesc> access;   // as the application set it
    bool released = false;  // the application holds no reference (the mapping holds the memory)
  };
  // A mapping the application unmapped.
  struct AppLeft {
    CUmemGenericAllocationHandle real = 0;  // 0: its bytes are on host, in `host`
    void* host = nullptr;
    bool pinned = false;
  };
  // The mapping at `va` of `real` (`size` bytes, tenant device `device`) joins the moves.
  void adopt_app_mapping(CUdeviceptr va, const TenantDevice& device, uint64_t size,
                         CUmemGenericAllocationHandle real, AppMapping mapping) noexcept;
  // It leaves them (before the application's cuMemUnmap); nullopt when not adopted.
  std::optional<AppLeft> leave_app_mapping(CUdeviceptr va) noexcept;
  // The driver's handle mapped at adopted `va` now (0 on host); with `pin`, brought back
  // first and never moved again; with `referenced`, the application holds a reference again
  // (cuMemRetainAllocationHandle after its release). nullopt when not adopted (or it cannot
  // come back).
  std::optional<CUmemGenericAllocationHandle> app_real(CUdeviceptr va, bool pin,
                                                       bool referenced = false) noexcept;
  // The application's last reference to the handle mapped at `va` goes: the real one is
  // released when resident; nothing when on host.
  CUresult release_app_reference(CUdeviceptr va) noexcept;
  // An unmapped handle's host copy back in new physical memory (the application maps it
  // again): *real on success; the copy is retired.
  CUresult restore_app_handle(const TenantDevice& device, uint64_t size,
                              const CUmemAllocationProp& prop, void* host,
                              CUmemGenericAllocationHandle* real) noexcept;
  // A host copy nobody needs any more: unpinned by the swap thread.
  void retire_host(void* host, uint64_t size) noexcept;

 private:
  struct Backed {
    int index = 0;                            // tenant device
    CUdevice ordinal = 0;                     // the driver's device
    uint64_t size = 0;                        // rounded to the granularity: what the ledger holds
    CUmemGenericAllocationHandle handle = 0;  // 0 while on host
    void* host = nullptr;                     // pinned copy while on host
    CUcontext context = nullptr;              // current at allocation: synchronised before a move
    bool pinned = false;                      // shared with another process: never moves
    std::shared_ptr<AppMapping> app;          // the application's own mapping (app_vmm.h)
  };

  bool enter_slow() noexcept;
  uint64_t granularity(CUdevice ordinal) noexcept;
  CUresult map_physical(CUdeviceptr va, const Backed& b, CUmemGenericAllocationHandle* handle);
  CUresult create_physical(const Backed& b, CUmemGenericAllocationHandle* handle);
  std::map<CUdeviceptr, Backed>::iterator containing(CUdeviceptr ptr);  // under mutex_
  void pin(Backed& b) noexcept;                                         // under mutex_
  bool wants(uint64_t bytes, uint64_t granule) const noexcept;
  void synchronise(int index) noexcept;
  bool move_to_host(CUdeviceptr va, Backed& b) noexcept;
  bool bring_back(CUdeviceptr va, Backed& b) noexcept;
  void reserve_back(const Backed& b) noexcept;
  void start_thread() noexcept;
  static void* thread_main(void* engine) noexcept;
  void serve_demands() noexcept;
  void free_retired_hosts() noexcept;
  void log_swap_out(uint64_t moved, int64_t elapsed_ns) const noexcept;
  // The reserve (swap_reserve_keeper.cpp): one look of the swap thread; true when it grew
  // (the thread looks again at once).
  bool keep_reserve() noexcept;
  std::optional<uint64_t> reserve_allowed() noexcept;
  // Stores in the ledger what the reserve holds free, plus the reserve pieces of host copies
  // waiting to be retired, plus `extra` (about to be pinned). Under mutex_.
  void publish_reserve_locked(uint64_t extra = 0) noexcept;
  CUresult map_app_physical(CUdeviceptr va, const Backed& b, CUmemGenericAllocationHandle* handle);

  MemoryPolicy& memory_;
  CaptureTracker& captures_;
  const DriverCalls& calls_;
  const FenceOps& fence_ops_;
  ResidencyGate gate_;
  mutable std::mutex mutex_;  // backed_, moves; held across a whole swap-out or swap-in
  std::map<CUdeviceptr, Backed> backed_;
  std::vector<std::pair<void*, uint64_t>>
      retired_hosts_;  // under mutex_: host copies to unpin after a swap-in
  std::atomic<uint64_t> swapped_bytes_{0};
  std::atomic<uint32_t> devices_used_{0};  // bit per tenant device with backed allocations
  std::atomic<bool> thread_started_{false};
  uint32_t seen_completed_ = 0;  // swap thread only: gate_.completed() at its last look
  uint64_t granule_[kMaxDevices] = {};
  // Per tenant device: may physical memory be created exportable as a POSIX descriptor?
  // 0 not known yet, 1 yes, -1 no (the driver refused it; sharing then fails cleanly).
  std::atomic<int8_t> exportable_[kMaxDevices] = {};
  std::atomic<uint64_t> pinned_bytes_{0};
  std::atomic<SharedFreeListener*> share_listener_{nullptr};
  HostStaging staging_;          // the host copies: pinned and copied chunk by chunk
  uint64_t reserve_logged_ = 0;  // swap thread: the reserve's size at its last log line
  CopyOutStats round_stats_;     // under mutex_: the swap-out round's, for its log line
};

}  // namespace fracgpu
