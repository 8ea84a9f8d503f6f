// The holdings' words and gate (see process_holdings.h). Enter and close meet Dekker-style
// over sequentially consistent RMWs and loads: either the closer sees the operation
// counted in, and waits for it, or the operation sees the gate closed, and backs out.
#include "core/process_holdings.h"

#include <sched.h>

#include "fracgpu/futex_word.h"
#include "fracgpu/monotonic_clock.h"

namespace fracgpu {
namespace {

constexpr int64_t kClosedWaitNs = 20'000'000;  // re-check the gate at least every 20 ms

uint64_t saturating_minus(uint64_t value, uint64_t bytes) {
  return value > bytes ? value - bytes : 0;
}

}  // namespace

ProcessHoldings::Operation::Operation(ProcessHoldings* holdings, uint32_t device) noexcept
    : holdings_(device < kMaxDevices ? holdings : nullptr), device_(device) {
  if (holdings_ != nullptr) holdings_->enter(device_);
}

ProcessHoldings::Operation::~Operation() noexcept {
  if (holdings_ != nullptr) holdings_->leave(device_, delta_);
}

void ProcessHoldings::Operation::to_host(uint64_t bytes) noexcept {
  if (holdings_ == nullptr) return;
  holdings_->lines_[device_].swapped.fetch_add(bytes, std::memory_order_relaxed);
}

void ProcessHoldings::Operation::from_host(uint64_t bytes) noexcept {
  if (holdings_ == nullptr) return;
  std::atomic<uint64_t>& swapped = holdings_->lines_[device_].swapped;
  uint64_t current = swapped.load(std::memory_order_relaxed);
  while (!swapped.compare_exchange_weak(current, saturating_minus(current, bytes),
                                        std::memory_order_relaxed)) {
  }
}

void ProcessHoldings::enter(uint32_t device) noexcept {
  std::atomic<uint64_t>& word = lines_[device].word;
  for (;;) {
    word.fetch_add(1, std::memory_order_seq_cst);
    if (closed_.load(std::memory_order_seq_cst) == 0) return;
    word.fetch_sub(1, std::memory_order_seq_cst);  // a re-registration holds the books
    while (closed_.load(std::memory_order_seq_cst) != 0) futex_wait_for(closed_, 1, kClosedWaitNs);
  }
}

void ProcessHoldings::leave(uint32_t device, int64_t delta) noexcept {
  std::atomic<uint64_t>& word = lines_[device].word;
  if (delta >= 0) {
    word.fetch_add((static_cast<uint64_t>(delta) << kCountBits) - 1, std::memory_order_seq_cst);
    return;
  }
  // A release never takes the bytes below zero (nor borrows from the count bits).
  const uint64_t bytes = static_cast<uint64_t>(-delta);
  uint64_t current = word.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = (saturating_minus(current >> kCountBits, bytes) << kCountBits) |
           ((current & kCountMask) - 1);
  } while (!word.compare_exchange_weak(current, next, std::memory_order_seq_cst,
                                       std::memory_order_relaxed));
}

bool ProcessHoldings::close(int timeout_ms) noexcept {
  closed_.store(1, std::memory_order_seq_cst);
  const int64_t deadline = monotonic_ns() + int64_t{timeout_ms} * 1'000'000;
  for (const Line& line : lines_) {
    while ((line.word.load(std::memory_order_seq_cst) & kCountMask) != 0) {
      if (monotonic_ns() > deadline) {
        open();
        return false;
      }
      sched_yield();  // an operation is a few dozen instructions: it is about to leave
    }
  }
  return true;
}

void ProcessHoldings::open() noexcept {
  closed_.store(0, std::memory_order_seq_cst);
  futex_wake_all(closed_);
}

ProcessHoldings::Snapshot ProcessHoldings::snapshot() const noexcept {
  Snapshot out;
  for (std::size_t d = 0; d < kMaxDevices; ++d) {
    out[d].used = lines_[d].word.load(std::memory_order_seq_cst) >> kCountBits;
    out[d].swapped = lines_[d].swapped.load(std::memory_order_seq_cst);
  }
  return out;
}

void ProcessHoldings::reset_after_fork() noexcept {
  for (Line& line : lines_) {
    line.word.store(0, std::memory_order_relaxed);
    line.swapped.store(0, std::memory_order_relaxed);
  }
  closed_.store(0, std::memory_order_relaxed);
}

}  // namespace fracgpu
