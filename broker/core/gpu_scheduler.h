// GpuScheduler: the compute scheduler of one GPU — pure decisions over a clock and a
// SchedulingPort per tenant, so unit tests drive it with a fake port and fake time.
//  * normal and low tenants hold the GPU exclusively, one at a time, in slices. Each
//    is charged the GPU time it actually held: grant -> its processes reported
//    "drained" after the revoke, drain included. The next holder is the waiting
//    tenant with the least virtual time (held ns x 1024 / weight), so under
//    contention shares converge to the weights whatever the slice or drain lengths;
//    a tenant that starts waiting after being idle is placed at most one slice of
//    credit behind the least virtual time of the others (no banking of idle time),
//    while one that merely paused (a host-side sync, shorter than pause_grace) keeps
//    its place; time a holder runs while nobody else waits or pauses is lent, not
//    owed: it counts in its measured GPU time but not in its virtual time. An idle holder is
//    revoked as soon as someone else waits (work-conserving); a lone holder keeps the GPU, no
//    handoffs.
//  * low tenants only get slices no normal tenant wants, except that one waiting
//    longer than low_starvation gets the next slice (bounded waiting).
//  * a ceiling is a token bucket of held time refilled at ceiling% of wall time; an
//    empty bucket revokes the grant even on an idle GPU.
//  * a tenant granted the GPU that does not acknowledge the grant before it counts as
//    idle (its threads were waiting at the gate, yet none woke to launch), or that does
//    not drain within drain_timeout after a revoke, is unresponsive: stopped (SIGSTOP),
//    frozen or hung. It is not granted again until its processes show progress (their
//    gate threads' wake-up counter moves, tenant_segment.h "Liveness"); meanwhile it
//    neither counts as competing nor shortens anyone's slice or in-flight bound, so the
//    others get the whole share they would get without it.
//  * high tenants are always granted and never wait; while one is active (launched
//    within high_hold), every other tenant on the GPU keeps at most high_inflight_us
//    of GPU work in flight, so a high launch waits at most that plus one kernel. In MPS
//    mode (the tenants' processes are clients of one MPS server, docs/design.md "MPS
//    mode") the high tenant's kernel runs beside the holder's without a context switch,
//    and what it waits for is the lower-class kernel running when it arrives: the bound
//    is mps_high_inflight_us, and the burst guard is off unless mps_burst_guard (then it
//    leads by mps_guard_lead_us more).
// It also counts, for monitoring (tenant_metrics.h), each tenant's time waiting for the
// GPU, the GPU's handoffs and a histogram of grant waits: a few additions per grant or
// wait change, never read on a decision.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

struct ComputeConfig {
  int64_t slice_ns = 20'000'000;
  int64_t tick_ns = 2'000'000;          // sampling period while contended
  int64_t idle_tick_ns = 10'000'000;    // sampling period of a lone holder / high tenants
  int64_t idle_revoke_ns = 50'000'000;  // a lone holder that stops launching this long is revoked
  int64_t drain_timeout_ns = 1'000'000'000;
  int64_t high_hold_ns = 100'000'000;
  int64_t low_starvation_ns = 2'000'000'000;
  int64_t share_window_ns = 2'000'000'000;
  // Not wanting the GPU for less than this is a pause (a host-side synchronisation
  // between batches), not idleness: the tenant keeps its credit and still competes.
  int64_t pause_grace_ns = 20'000'000;
  uint32_t contended_inflight_us = 4000;
  uint32_t shared_inflight_us = 50000;  // others have processes on the GPU but are idle
  uint32_t high_inflight_us = 500;
  // MPS mode: on while the broker's MPS control daemon runs (ComputeService::set_mps);
  // lower classes then keep at most mps_high_inflight_us queued while a high tenant is active.
  bool mps = false;
  uint32_t mps_high_inflight_us = 500;
  // MPS mode: the burst guard only with mps_burst_guard (off by default: on the H200 it
  // starved batch tenants of regular request loops while MPS mode's tail was as short
  // without it, docs/benchmarks.md), and then mps_guard_lead_us earlier than in time-slice
  // mode (GpuScheduler::apply_guard).
  bool mps_burst_guard = false;
  uint32_t mps_guard_lead_us = 0;
  bool burst_guard = true;  // hold lower classes back before a high tenant's regular bursts

  // The bound on lower classes while a high tenant is active, in the current mode.
  uint32_t behind_high_inflight_us() const { return mps ? mps_high_inflight_us : high_inflight_us; }
};

// One tenant on one GPU as the scheduler sees it (LedgerPort in the broker).
class SchedulingPort {
 public:
  virtual ~SchedulingPort() = default;
  virtual uint32_t waiting() const = 0;  // threads blocked at the gate
  virtual bool launched_since(
      uint32_t epoch) const = 0;  // a live process launched in epoch >= this
  virtual bool drained(uint32_t first_epoch, uint32_t revoke_epoch) const = 0;
  virtual bool has_processes() const = 0;
  virtual uint32_t current_word() const = 0;
  // Moves whenever one of its live processes' gate threads wakes (0 where not reported).
  virtual uint64_t progress() const { return 0; }
  virtual void publish(uint32_t word, uint32_t inflight_limit_us) = 0;
  // Burst guard (tenant_segment.h): a high tenant's latest burst start, and the
  // prediction published to the others (period 0 = none).
  virtual uint64_t burst_start() const { return 0; }
  virtual uint64_t burst_span() const { return 0; }
  virtual void publish_guard(uint64_t next_ns, uint64_t period_ns, uint32_t lead_ns,
                             uint64_t late_ns, uint64_t hold_ns) {
    (void)next_ns, (void)period_ns, (void)lead_ns, (void)late_ns, (void)hold_ns;
  }
};

// The rhythm of one high tenant's bursts. The gap between two bursts is the tenant's
// own pause plus how long its last request took, and the latter is what the guard
// changes; so the next burst is predicted at the shortest recent gap (a request served
// at once), and the rhythm counts as regular when that floor is at least half the
// median gap (true of a request loop with think time; false of Poisson-like arrivals).
// One gap out of range (a request's launches seen as two bursts, a long pause) is
// ignored; kOutliersToReset of them in a row start the rhythm over.
struct BurstRhythm {
  static constexpr int kWindow = 16;
  static constexpr int kOutliersToReset = 3;
  uint64_t last = 0;
  double gaps[kWindow] = {};
  double spans[kWindow] = {};  // first to last launch of each burst
  int samples = 0;   // gaps recorded since the last reset (the ring holds min(samples, kWindow))
  int outliers = 0;  // consecutive gaps out of range
  // The guard out when the latest burst came (next + late; 0 = none), and whether that
  // burst came within it: one that did not may have waited for a lower class's kernel.
  uint64_t deadline = 0;
  bool covered = false;
  void observe(uint64_t start, uint64_t previous_span);
  double longest_span() const;
  // The second-shortest gap: one unusually short pause must not pull the prediction early.
  double floor() const { return nth_shortest_gap(1); }
  double median() const { return nth_shortest_gap(std::min(samples, kWindow) / 2); }
  double nth_shortest_gap(int k) const;
  bool regular() const { return samples >= 8 && floor() >= 0.5 * median(); }
};

struct ComputeSettings {
  uint32_t weight = 100;
  uint32_t ceiling_pct = 0;
  PriorityClass priority = PriorityClass::kNormal;
};

struct ComputeStatus {
  const char* state = "idle";  // granted, waiting, draining, idle
  double measured_share = 0;   // of the GPU's time over the last share_window
  double gpu_seconds = 0;      // held in total
  double wait_seconds = 0;     // wanted the GPU (threads blocked at the gate) and not granted
};

// How long tenants waited from asking for the GPU to their grant, in fixed buckets
// (Prometheus "le" semantics: a wait of exactly a bound counts in that bucket). Plain
// counts, so the scheduler needs no metrics library; the exposition turns them into
// fracgpu_gpu_grant_wait_seconds.
struct GrantWaitHistogram {
  static constexpr std::array<int64_t, 14> kBoundsNs = {
      100'000,    250'000,    500'000,     1'000'000,   2'500'000,   5'000'000,     10'000'000,
      25'000'000, 50'000'000, 100'000'000, 250'000'000, 500'000'000, 1'000'000'000, 2'500'000'000};
  std::array<uint64_t, kBoundsNs.size() + 1> counts{};  // per bucket, the last one above 2.5 s
  int64_t sum_ns = 0;

  void observe(int64_t wait_ns);
  uint64_t count() const;
};

// Per-GPU scheduling counters since the broker started.
struct GpuComputeCounters {
  uint64_t handoffs = 0;  // grants to a tenant other than the previous holder
  GrantWaitHistogram grant_waits;
};

// Epochs are 30 bits wide and wrap; compare them modulo.
constexpr uint32_t kEpochMask = (1u << 30) - 1;
constexpr bool epoch_at_or_after(uint32_t a, uint32_t b) {
  return ((a - b) & kEpochMask) < (kEpochMask / 2);
}

class GpuScheduler {
 public:
  explicit GpuScheduler(ComputeConfig config = {}) : config_(config) {}

  void upsert(const std::string& tenant, SchedulingPort* port, ComputeSettings settings,
              int64_t now);
  void remove(const std::string& tenant);
  // Re-evaluates everything; returns when it next needs to run (INT64_MAX: only on events).
  int64_t step(int64_t now);
  std::optional<ComputeStatus> status(const std::string& tenant, int64_t now) const;
  const GpuComputeCounters& counters() const { return counters_; }
  // MPS mode on or off (ComputeConfig::mps); the bounds change at the next step.
  void set_mps(bool on) { config_.mps = on; }
  bool mps() const { return config_.mps; }
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    SchedulingPort* port = nullptr;
    ComputeSettings settings;
    uint32_t epoch = 0;
    bool granted = false;
    bool notify = false;
    uint32_t limit_us = 0;
    double vtime = 0;
    int64_t held_ns = 0;       // charged in total
    int64_t tokens_ns = 0;     // ceiling bucket
    int64_t wait_since = 0;    // 0 = not waiting
    int64_t waited_ns = 0;     // waits that ended (monitoring only)
    int64_t paused_since = 0;  // stopped waiting or holding then (0 = not paused)
    int64_t active_until = 0;  // high: counts as active until then
    int64_t last_sample = 0;   // high: when its epoch was last bumped to sample activity
    uint32_t sample_epoch = 0;
    std::deque<std::pair<int64_t, int64_t>> history;  // (time, held) for the measured share
    BurstRhythm rhythm;                               // high: its bursts
    uint64_t guard_next = 0;                          // others: the guard last published to it
    bool unresponsive = false;   // neither acknowledged a grant nor drained (see above)
    uint64_t progress_mark = 0;  // its port's progress() when it was found unresponsive
  };
  enum class Phase { kIdle, kHolding, kDraining };

  void publish(Entry& e, bool granted, bool notify, bool new_epoch);
  void stop_waiting(Entry& e, int64_t now);
  void refill(int64_t now);
  void note_waiting(int64_t now);
  void mark_unresponsive(Entry& e);
  void note_progress();
  void step_high(Entry& e, int64_t now);
  bool high_active(int64_t now) const;
  void step_holder(int64_t now);
  void step_draining(int64_t now);
  void revoke(int64_t now);
  Entry* choose(int64_t now);
  void grant(const std::string& name, int64_t now);
  void apply_limits(int64_t now);
  void apply_guard(int64_t now);
  void record_history(int64_t now);
  int64_t held_now(const std::string& name, const Entry& e, int64_t now) const;
  int64_t next_deadline(int64_t now) const;
  bool eligible(const Entry& e) const;
  bool others_waiting() const;  // an eligible non-high tenant other than the holder waits
  bool others_competing(int64_t now) const;  // ... waits or merely pauses
  bool pausing(const Entry& e, int64_t now) const;
  bool outranked(const Entry& holder, int64_t now) const;  // a waiting tenant is owed the GPU back
  // The part of the current grant others waited for: what the holder is charged.
  int64_t owed_ns(int64_t now) const { return now - std::max(contended_since_, grant_start_); }
  bool normal_waiting() const;  // an eligible normal tenant waits
  int64_t tokens_now(const Entry& e, int64_t now) const;

  ComputeConfig config_;
  std::map<std::string, Entry, std::less<>> entries_;
  Phase phase_ = Phase::kIdle;
  std::string holder_;
  int64_t grant_start_ = 0;
  int64_t contended_since_ = 0;  // holder: start of the part of its grant that others waited for
  int64_t slice_end_ = 0;
  int64_t last_active_ = 0;  // holder: last time it was seen launching
  int64_t last_sample_ = 0;  // holder: last epoch bump
  uint32_t sample_epoch_ = 0;
  uint32_t first_epoch_ = 0;  // holder: first epoch of this grant
  uint32_t revoke_epoch_ = 0;
  int64_t revoked_at_ = 0;
  int64_t drain_deadline_ = 0;
  int64_t last_refill_ = 0;
  int64_t last_history_ = 0;
  std::string last_grantee_;  // the tenant of the latest grant (a handoff is a grant to another)
  GpuComputeCounters counters_;
};

}  // namespace fracgpu::broker
