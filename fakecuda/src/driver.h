// The per-process state of the fake driver, created by cuInit and torn down only by
// fakecuda_shutdown (a test hook): the mapping of the shared device segment, this
// process's slot in it, the handle and allocation registries, primary contexts and
// memory pools. It is deliberately leaked at process exit: executor threads may still
// be running then, and the real driver does not tear down at exit either.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "allocation_registry.h"
#include "handle_registry.h"
#include "ipc_memory.h"
#include "memory_accounting.h"
#include "mps_client.h"
#include "process_table.h"
#include "shared_segment.h"
#include "virtual_memory.h"

namespace fakecuda {

class Context;

struct PrimaryContextSlot {
  std::mutex mutex;
  std::shared_ptr<Context> context;  // null while inactive
  int retain_count = 0;
  unsigned flags = 0;
};

class Driver {
 public:
  Driver() = default;
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Maps the shared device, registers this process and joins the MPS server of
  // CUDA_MPS_PIPE_DIRECTORY if a fake daemon serves it; false + `error` (and the
  // CUresult cuInit returns) on failure.
  bool start(std::string& error, CUresult& failure);
  // Releases everything this process holds on the device (test hook only).
  void stop();

  SegmentLayout* layout() const { return segment_.layout(); }
  const std::string& segment_name() const { return segment_.name(); }
  // Devices as this process sees them: CUDA_VISIBLE_DEVICES (indexes or GPU-UUIDs,
  // read once at cuInit) selects and orders the simulated devices, like the real
  // driver. A CUdevice is an ordinal among the visible devices; everything inside the
  // driver (contexts, memory, engine, status) uses the physical device index.
  uint32_t device_count() const { return visible_count_; }
  uint32_t physical_device_count() const { return layout()->device_count; }
  bool valid_device(int ordinal) const {
    return ordinal >= 0 && static_cast<uint32_t>(ordinal) < device_count();
  }
  // Physical index of a valid ordinal.
  uint32_t physical(int ordinal) const { return visible_[static_cast<size_t>(ordinal)]; }
  // Ordinal of a physical device, or -1 when this process does not see it.
  int ordinal_of(uint32_t physical_device) const {
    for (uint32_t i = 0; i < visible_count_; ++i)
      if (visible_[i] == physical_device) return static_cast<int>(i);
    return -1;
  }
  uint64_t context_footprint() const { return layout()->context_footprint_bytes; }
  ProcessRecord& process_record() { return processes_->slot(process_slot_); }
  ProcessTable& processes() { return *processes_; }
  MemoryAccounting& memory() { return *memory_; }
  EngineParty engine_party(uint64_t executor_id) const;
  // This process's MPS server membership (null: an ordinary, time-sliced context).
  MpsClient* mps() const { return mps_.get(); }
  uint64_t next_id() { return next_id_.fetch_add(1); }

  HandleRegistry handles;
  AllocationRegistry allocations;
  VirtualMemoryTable virtual_memory;
  IpcMemory ipc_memory;  // legacy IPC: what this process opened of others' memory
  std::array<PrimaryContextSlot, kMaxDevices> primary_contexts;

  // Memory pools: default pool per device and the device's current pool.
  std::mutex pools_mutex;
  std::array<CUmemoryPool, kMaxDevices> default_pools{};
  std::array<CUmemoryPool, kMaxDevices> current_pools{};

 private:
  SharedSegment segment_;
  std::unique_ptr<ProcessTable> processes_;
  std::unique_ptr<MemoryAccounting> memory_;
  std::unique_ptr<MpsClient> mps_;
  int process_slot_ = -1;
  std::array<uint32_t, kMaxDevices> visible_{};
  uint32_t visible_count_ = 0;
  int32_t pid_ = 0;
  uint64_t start_time_ = 0;
  ProcessPlace place_;  // its PID namespace and host pid (host_pid.h)
  std::atomic<uint64_t> next_id_{1};
};

// The initialised driver, or null before cuInit (and after fakecuda_shutdown).
Driver* current_driver();

// cuInit's work: idempotent, thread-safe.
CUresult initialize_driver(unsigned flags);

// Destroys all contexts and releases every resource of this process (test hook).
void shutdown_driver();

// Bumped by every shutdown so that thread-local state from before can be recognised.
uint64_t driver_generation();

}  // namespace fakecuda
