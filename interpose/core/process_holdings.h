// ProcessHoldings: what this process holds per device, kept in its own memory beside its
// slot of the shared ledger, and the gate that lets a re-registration read it exactly.
// The slot lives in a file other processes and the broker can write (or wipe, or replace:
// tenant_segment.h, "A ledger lost"); when that happens this copy is what the process
// re-charges. Every MemoryLedger operation runs inside an Operation: enter (one RMW on the
// device's word: one more operation in flight), the ledger protocol, leave (one RMW: the
// bytes moved, one operation fewer). A re-registration close()s the gate — new operations
// wait, those in flight finish — reads the holdings, registers, and open()s it again, so
// the process's own reservations can neither slip between the snapshot and the re-charge
// nor land on the old slot after it.
// Cost on the allocation fast path: two uncontended RMWs on a line of this process's own
// memory (and a load of the gate's flag); while closed (a few milliseconds per rebuild),
// operations sleep on a futex.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "fracgpu/tenant_segment.h"

namespace fracgpu {

class ProcessHoldings {
 public:
  struct Device {
    uint64_t used = 0;     // resident bytes reserved and not released
    uint64_t swapped = 0;  // bytes moved to host and not back
  };
  using Snapshot = std::array<Device, kMaxDevices>;

  // One ledger operation of this process on `device`; null holdings: no bookkeeping (unit
  // tests and benchmarks that drive a MemoryLedger alone).
  class Operation {
   public:
    Operation(ProcessHoldings* holdings, uint32_t device) noexcept;
    ~Operation() noexcept;
    Operation(const Operation&) = delete;
    Operation& operator=(const Operation&) = delete;
    void add(uint64_t bytes) noexcept { delta_ += static_cast<int64_t>(bytes); }
    void remove(uint64_t bytes) noexcept { delta_ -= static_cast<int64_t>(bytes); }
    void to_host(uint64_t bytes) noexcept;
    void from_host(uint64_t bytes) noexcept;

   private:
    ProcessHoldings* holdings_;
    uint32_t device_;
    int64_t delta_ = 0;
  };

  // Stops new operations and waits (at most `timeout_ms`) for those in flight; false, with
  // the gate open again, when they did not finish in time.
  bool close(int timeout_ms) noexcept;
  void open() noexcept;
  bool closed() const noexcept { return closed_.load(std::memory_order_seq_cst) != 0; }
  // What the process holds now (exact while closed).
  Snapshot snapshot() const noexcept;
  // In a child after fork(): it holds nothing of its parent's, and no thread of the parent's
  // is inside an operation there.
  void reset_after_fork() noexcept;

 private:
  // word: bits 0..11 operations in flight, bits 12..63 resident bytes (4 PiB).
  static constexpr unsigned kCountBits = 12;
  static constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
  struct alignas(64) Line {
    std::atomic<uint64_t> word{0};
    std::atomic<uint64_t> swapped{0};
  };
  void enter(uint32_t device) noexcept;
  void leave(uint32_t device, int64_t delta) noexcept;

  std::array<Line, kMaxDevices> lines_;
  alignas(64) std::atomic<uint32_t> closed_{0};  // a futex word
};

}  // namespace fracgpu
