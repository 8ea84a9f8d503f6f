// The launch gate's slow paths (see grant_gate.h).
#include "core/grant_gate.h"

#include "core/shim_log.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/monotonic_clock.h"

namespace fracgpu {
namespace {

constexpr int64_t kReringNs =
    200'000'000;  // ring again while still waiting (lost datagram, new broker)

}  // namespace

// Records "launched in this epoch" and re-reads the word: if the broker revoked in
// between, the launch must wait after all. Returns true when the word still holds.
bool GrantGate::acknowledge(uint32_t word) noexcept {
  slot_.load(std::memory_order_relaxed)
      ->launched_epoch.store(grant_epoch(word), std::memory_order_seq_cst);
  if (quota_->grant_word.load(std::memory_order_seq_cst) != word) return false;
  seen_.store(word, std::memory_order_relaxed);
  if ((word & kGrantNotify) != 0) doorbell_->ring();
  return true;
}

void GrantGate::pass_slow(CaptureProbe probe, void* probe_context, bool* new_epoch) noexcept {
  for (;;) {
    const uint32_t word = quota_->grant_word.load(std::memory_order_acquire);
    if (word == seen_.load(std::memory_order_relaxed)) return;
    if ((word & kGrantGranted) != 0) {
      if (acknowledge(word)) {
        *new_epoch = true;
        return;
      }
      continue;
    }
    if (probe != nullptr && probe(probe_context)) return;  // captured, not executed: never gated
    if (!wait_for_grant(word)) {
      // Broker gone: pass while the word stays as it left it; a new broker's first
      // publication brings the gate back.
      seen_.store(word, std::memory_order_relaxed);
      return;
    }
  }
}

uint64_t GrantGate::lease() const noexcept {
  if (tenant_ == nullptr || tenant_->minor < 4) return 0;
  return tenant_->broker_heartbeat.load(std::memory_order_acquire);
}

// Sleeps in kWaitSliceNs slices until granted. Every wake-up counts as progress and looks
// at the broker: its doorbell (dead?) and its lease (stopped or hung?). A word that moved
// while ungranted (a grant this thread slept through, a new broker) rings at once.
bool GrantGate::wait_for_grant(uint32_t word) noexcept {
  SlotSchedule* const slot = slot_.load(std::memory_order_relaxed);  // counted out where counted in
  slot->waiting.fetch_add(1, std::memory_order_seq_cst);
  note_progress();
  bool reachable = doorbell_->ring();
  int64_t now = monotonic_ns();
  int64_t last_ring = now;
  uint64_t lease_seen = lease();
  int64_t lease_renewed_at = now;
  bool hung = false;
  while (reachable && (word & kGrantGranted) == 0) {
    futex_wait_for(quota_->grant_word, word, kWaitSliceNs);
    const uint32_t previous = word;
    word = quota_->grant_word.load(std::memory_order_acquire);
    if ((word & kGrantGranted) != 0) break;
    note_progress();
    now = monotonic_ns();
    if (word != previous || now - last_ring >= kReringNs) {
      last_ring = now;
      reachable = doorbell_->ring();
    } else {
      reachable = doorbell_->listening();
    }
    const uint64_t lease_now = lease();
    if (lease_now != lease_seen) {
      lease_seen = lease_now;
      lease_renewed_at = now;
    } else if (lease_now != 0 && now - lease_renewed_at >= kBrokerHungNs) {
      hung = true;
      break;
    }
  }
  if (!reachable || hung)
    FRACGPU_LOG_CAPPED(LogLevel::kWarn, 4,
                       "the fracgpu broker at %s %s; launching without a compute grant",
                       doorbell_->path().c_str(), hung ? "stopped renewing its lease" : "is gone");
  slot->waiting.fetch_sub(1, std::memory_order_seq_cst);
  return (word & kGrantGranted) != 0;
}

uint32_t GrantGate::wait_for_change(uint32_t seen, int64_t timeout_ns) const noexcept {
  uint32_t word = quota_->grant_word.load(std::memory_order_acquire);
  if (word == seen) {
    futex_wait_for(quota_->grant_word, seen, timeout_ns);
    word = quota_->grant_word.load(std::memory_order_acquire);
  }
  return word;
}

void GrantGate::report_drained(uint32_t epoch) noexcept {
  slot_.load(std::memory_order_relaxed)->drained_epoch.store(epoch, std::memory_order_seq_cst);
  doorbell_->ring();
}

}  // namespace fracgpu
