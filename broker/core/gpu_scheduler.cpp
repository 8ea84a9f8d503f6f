// Decisions of the per-GPU compute scheduler (see gpu_scheduler.h). Every public call
// runs on the broker's loop thread; step() is cheap (a scan of the GPU's tenants and,
// for the holder, of its process slots) and runs on doorbells, timers and changes.
#include "core/gpu_scheduler.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace fracgpu::broker {
namespace {

constexpr double kVtimeScale = 1024.0;
constexpr int64_t kHistoryPeriodNs = 250'000'000;

bool is_high(const ComputeSettings& s) {
  return s.priority == PriorityClass::kHigh;
}

// Virtual time that `ns` of GPU time costs at `weight`: held ns x 1024 / weight.
double vtime_of(int64_t ns, uint32_t weight) {
  return static_cast<double>(ns) * kVtimeScale / std::max<uint32_t>(weight, 1);
}

constexpr double kMinBurstPeriodNs = 300'000;
constexpr double kMaxBurstPeriodNs = 100'000'000;
constexpr double kMinGuardLeadNs = 30'000;
constexpr double kMinGuardLateNs = 300'000;
constexpr double kGuardSettleNs = 30'000;

}  // namespace

void BurstRhythm::observe(uint64_t start, uint64_t previous_span) {
  if (start == last) return;
  const double gap = last == 0 || start < last ? 0 : static_cast<double>(start - last);
  last = start;
  covered = deadline != 0 && start <= deadline;
  if (gap < kMinBurstPeriodNs || gap > kMaxBurstPeriodNs) {
    if (++outliers >= kOutliersToReset) samples = 0;  // not a rhythm (any more): start over
    return;
  }
  outliers = 0;
  gaps[samples % kWindow] = gap;
  spans[samples % kWindow] =
      static_cast<double>(std::min<uint64_t>(previous_span, static_cast<uint64_t>(gap)));
  ++samples;
}

double BurstRhythm::longest_span() const {
  const int n = std::min(samples, kWindow);
  return n == 0 ? 0 : *std::max_element(spans, spans + n);
}

// The k-th shortest recorded gap (0-based, clamped to the gaps there are; 0 if none).
double BurstRhythm::nth_shortest_gap(int k) const {
  const int n = std::min(samples, kWindow);
  if (n == 0) return 0;
  k = std::min(k, n - 1);
  double sorted[kWindow];
  std::copy(gaps, gaps + n, sorted);
  std::nth_element(sorted, sorted + k, sorted + n);
  return sorted[k];
}

void GrantWaitHistogram::observe(int64_t wait_ns) {
  const auto bucket = std::lower_bound(kBoundsNs.begin(), kBoundsNs.end(), wait_ns);
  ++counts[static_cast<std::size_t>(bucket - kBoundsNs.begin())];
  sum_ns += wait_ns;
}

uint64_t GrantWaitHistogram::count() const {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

// Lower classes hold back launches that would still run when the next burst of a
// regular high tenant is due; published only while one is active and regular.
void GpuScheduler::apply_guard(int64_t now) {
  Entry* source = nullptr;
  if (config_.burst_guard && (!config_.mps || config_.mps_burst_guard)) {
    for (auto& [name, e] : entries_) {
      if (!is_high(e.settings) || now >= e.active_until || !e.rhythm.regular()) continue;
      if (source == nullptr || e.rhythm.last > source->rhythm.last) source = &e;
    }
  }
  uint64_t next = 0, period = 0, late = 0, hold = 0;
  uint32_t lead = 0;
  if (source != nullptr) {
    const double floor = source->rhythm.floor();
    period = static_cast<uint64_t>(floor);
    next = source->rhythm.last + period;
    lead = static_cast<uint32_t>(std::max(kMinGuardLeadNs, 0.02 * floor));
    // A burst comes later than the floor by as much as its last request waited: hold
    // on for up to the spread of the gaps, so that the rhythm settles at the floor.
    const double spread = source->rhythm.median() - floor;
    late = static_cast<uint64_t>(
        lead + std::min(std::max({kMinGuardLateNs, spread, floor / 4}), floor / 2));
    // A burst that came unguarded (overdue, or with no prediction out) may have waited
    // for a lower class's kernel, and then the next one comes later by as much: hold on
    // for up to a whole period this once. Otherwise the late burst meets a kernel
    // started at the late bound, stretches the next gap again, and so on.
    if (!source->rhythm.covered) late = std::max(late, static_cast<uint64_t>(lead + floor));
    // Released when the burst is seen, others wait until its launches are in: the
    // longest recent burst plus the time for its last kernel to reach the GPU.
    hold =
        static_cast<uint64_t>(std::min(source->rhythm.longest_span() + kGuardSettleNs, floor / 2));
  }
  for (auto& [name, e] : entries_)
    if (is_high(e.settings)) e.rhythm.deadline = &e == source ? next + late : 0;
  // Under MPS a request waits for the lower-class kernel running when it comes, and the
  // shim's guard_holds() lets a launch overlap the burst by the in-flight bound while
  // treating it as if it started at once, though it may sit behind up to that bound of
  // queued work: with --mps-burst-guard the guard can stop launches mps_guard_lead_us
  // earlier. With exact kernel times 800 us keeps every request off 0.2-0.4 ms batch
  // kernels (gpu_scheduler_mps_test), but the shim learns a launch's GPU time from the
  // elapsed time between its fences, which includes the gaps the guard itself makes: a
  // long lead inflates the estimate, which holds the batch longer (design.md, "MPS mode").
  const uint32_t published_lead =
      source != nullptr && config_.mps ? lead + config_.mps_guard_lead_us * 1000u : lead;
  for (auto& [name, e] : entries_) {
    if (is_high(e.settings) || e.guard_next == next) continue;
    e.guard_next = next;
    e.port->publish_guard(next, period, published_lead, late, hold);
  }
}

void GpuScheduler::publish(Entry& e, bool granted, bool notify, bool new_epoch) {
  if (new_epoch || granted != e.granted || notify != e.notify) e.epoch = (e.epoch + 1) & kEpochMask;
  e.granted = granted;
  e.notify = notify;
  e.port->publish(make_grant_word(e.epoch, granted, notify), e.limit_us);
}

// Ends a wait (if any) and adds it to the tenant's waited time.
void GpuScheduler::stop_waiting(Entry& e, int64_t now) {
  if (e.wait_since != 0) e.waited_ns += now - e.wait_since;
  e.wait_since = 0;
}

void GpuScheduler::upsert(const std::string& tenant, SchedulingPort* port, ComputeSettings settings,
                          int64_t now) {
  auto [it, inserted] = entries_.try_emplace(tenant);
  Entry& e = it->second;
  const bool fresh = inserted || e.port != port;
  const bool class_changed = !fresh && is_high(e.settings) != is_high(settings);
  e.port = port;
  e.settings = settings;
  if (!fresh && !class_changed) return;
  if (holder_ == tenant) {  // it stops holding as what it was; nothing is charged
    holder_.clear();
    phase_ = Phase::kIdle;
  }
  if (fresh) {
    e.epoch =
        (grant_epoch(port->current_word()) + 1) & kEpochMask;  // continue after any earlier broker
    e.tokens_ns = config_.slice_ns;
    double least = -1;
    for (const auto& [name, other] : entries_)
      if (name != tenant && (least < 0 || other.vtime < least)) least = other.vtime;
    e.vtime = std::max(0.0, least);
  }
  stop_waiting(e, now);
  e.active_until = 0;
  e.last_sample = now;
  publish(e, is_high(settings), is_high(settings), true);
  e.sample_epoch = e.epoch;
}

void GpuScheduler::remove(const std::string& tenant) {
  if (holder_ == tenant) {
    holder_.clear();
    phase_ = Phase::kIdle;
  }
  entries_.erase(tenant);
}

void GpuScheduler::refill(int64_t now) {
  const int64_t elapsed = last_refill_ == 0 ? 0 : now - last_refill_;
  last_refill_ = now;
  for (auto& [name, e] : entries_) {
    if (e.settings.ceiling_pct == 0) continue;
    e.tokens_ns = std::min(e.tokens_ns + elapsed * e.settings.ceiling_pct / 100, config_.slice_ns);
  }
}

int64_t GpuScheduler::tokens_now(const Entry& e, int64_t now) const {
  const bool holding = phase_ != Phase::kIdle && &entries_.at(holder_) == &e;
  return e.tokens_ns - (holding ? now - grant_start_ : 0);
}

bool GpuScheduler::eligible(const Entry& e) const {
  return !e.unresponsive && (e.settings.ceiling_pct == 0 || e.tokens_ns >= config_.slice_ns / 4);
}

void GpuScheduler::mark_unresponsive(Entry& e) {
  e.unresponsive = true;
  e.progress_mark = e.port->progress();
}

// An unresponsive tenant whose processes' gate threads woke since is alive again.
void GpuScheduler::note_progress() {
  for (auto& [name, e] : entries_)
    if (e.unresponsive && e.port->progress() != e.progress_mark) e.unresponsive = false;
}

// A tenant that starts waiting joins at the least virtual time of those competing:
// it neither lost its place nor banked credit while it was idle.
void GpuScheduler::note_waiting(int64_t now) {
  for (auto& [name, e] : entries_) {
    if (is_high(e.settings) || name == holder_) continue;
    const bool waiting = e.port->waiting() > 0;
    if (!waiting) {
      if (e.wait_since != 0) e.paused_since = now;
      stop_waiting(e, now);
      continue;
    }
    if (e.wait_since != 0) continue;
    e.wait_since = now;
    const bool paused = pausing(e, now);
    e.paused_since = 0;
    if (paused) continue;  // back from a pause: its place is still its own
    double least = -1;
    for (const auto& [other_name, other] : entries_) {
      if (other_name == name || is_high(other.settings)) continue;
      if (other.wait_since == 0 && other_name != holder_) continue;
      if (least < 0 || other.vtime < least) least = other.vtime;
    }
    // CFS-style placement: at most one slice of credit behind the least competitor.
    // A tenant that paused for a moment (a host-side sync) keeps its place; one that
    // was idle for long cannot bank its idle time.
    const double allowance = vtime_of(config_.slice_ns, e.settings.weight);
    if (least >= 0 && least - allowance > e.vtime) e.vtime = least - allowance;
  }
}

void GpuScheduler::step_high(Entry& e, int64_t now) {
  e.rhythm.observe(e.port->burst_start(), e.port->burst_span());
  const bool launched = e.port->launched_since(e.sample_epoch);
  if (launched) e.active_until = now + config_.high_hold_ns;
  const bool active = now < e.active_until;
  if (active && now - e.last_sample >= config_.idle_tick_ns) {
    if (launched)
      e.held_ns += now - e.last_sample;  // activity windows: an upper bound of its GPU time
    publish(e, true, false, true);
    e.sample_epoch = e.epoch;
    e.last_sample = now;
  } else if (!active && !e.notify) {
    publish(e, true, true, true);  // idle: its next launch rings the doorbell
    e.sample_epoch = e.epoch;
    e.last_sample = now;
  }
}

bool GpuScheduler::high_active(int64_t now) const {
  for (const auto& [name, e] : entries_)
    if (is_high(e.settings) && now < e.active_until) return true;
  return false;
}

bool GpuScheduler::normal_waiting() const {
  for (const auto& [name, e] : entries_)
    if (e.settings.priority == PriorityClass::kNormal && e.wait_since != 0 && eligible(e))
      return true;
  return false;
}

bool GpuScheduler::pausing(const Entry& e, int64_t now) const {
  return e.paused_since != 0 && now - e.paused_since < config_.pause_grace_ns &&
         e.port->has_processes();
}

bool GpuScheduler::others_competing(int64_t now) const {
  for (const auto& [name, e] : entries_)
    if (name != holder_ && !is_high(e.settings) && (e.wait_since != 0 || pausing(e, now)) &&
        eligible(e))
      return true;
  return false;
}

bool GpuScheduler::others_waiting() const {
  for (const auto& [name, e] : entries_)
    if (name != holder_ && !is_high(e.settings) && e.wait_since != 0 && eligible(e)) return true;
  return false;
}

void GpuScheduler::step_holder(int64_t now) {
  Entry& h = entries_.at(holder_);
  if (h.port->launched_since(sample_epoch_)) last_active_ = now;
  const bool contended = others_waiting();
  // Running alone (nobody waits, nobody just paused): lent time, not charged to its virtual time.
  if (!others_competing(now)) contended_since_ = now;
  if (now - last_sample_ >= (contended ? config_.tick_ns : config_.idle_tick_ns)) {
    publish(h, true, false, true);  // sample activity: processes acknowledge the new epoch
    sample_epoch_ = h.epoch;
    last_sample_ = now;
  }
  // Not launching is idleness only once the work it has in flight (at most the contended
  // bound) could have finished and a tick more has passed: a tenant waiting on its own
  // kernels in a synchronisation is still using the GPU.
  const int64_t idle_limit = contended
                                 ? int64_t{config_.contended_inflight_us} * 1000 + config_.tick_ns
                                 : config_.idle_revoke_ns;
  const bool out_of_tokens = h.settings.ceiling_pct > 0 && tokens_now(h, now) <= 0;
  const bool idle = now - last_active_ >= idle_limit;
  const bool slice_over = contended && now >= slice_end_;
  const bool preempted =
      (h.settings.priority == PriorityClass::kLow && normal_waiting()) || outranked(h, now);
  if (!(out_of_tokens || idle || slice_over || preempted || !h.port->has_processes())) return;
  // Granted while its threads waited, and none of them woke to launch: it is stopped.
  if (idle && !h.port->launched_since(first_epoch_) && h.port->waiting() > 0) mark_unresponsive(h);
  revoke(now);
}

// The holder got the GPU while a tenant with less virtual time was pausing; once that
// tenant waits again and the holder is more than one slice (of the lighter of the two)
// ahead of it, the GPU goes back. Holders chosen in order never trip this before their
// slice ends, so it adds no handoffs to steady contention.
bool GpuScheduler::outranked(const Entry& h, int64_t now) const {
  if (now - grant_start_ < config_.tick_ns) return false;
  const double projected = h.vtime + vtime_of(owed_ns(now), h.settings.weight);
  for (const auto& [name, e] : entries_) {
    if (name == holder_ || e.wait_since == 0 || e.settings.priority != h.settings.priority ||
        !eligible(e))
      continue;
    const uint32_t lighter =
        std::min(h.settings.weight, e.settings.weight);  // vtime_of treats 0 as 1
    if (e.vtime + vtime_of(config_.slice_ns, lighter) < projected) return true;
  }
  return false;
}

void GpuScheduler::revoke(int64_t now) {
  Entry& h = entries_.at(holder_);
  publish(h, false, false, true);
  revoke_epoch_ = h.epoch;
  revoked_at_ = now;
  drain_deadline_ = now + config_.drain_timeout_ns;
  phase_ = Phase::kDraining;
}

// Charges the holder grant -> drained (the drain is GPU time it used) and frees the GPU.
void GpuScheduler::step_draining(int64_t now) {
  Entry& h = entries_.at(holder_);
  const bool drained = h.port->drained(first_epoch_, revoke_epoch_);
  if (!drained && h.port->has_processes() && now < drain_deadline_) return;
  // A drain that timed out: its drainer never ran (stopped, frozen). Its work in flight
  // ended within its bound; the rest of the timeout the GPU stood idle, and charging that
  // to it would keep it waiting as long again once it runs.
  const bool timed_out = !drained && h.port->has_processes();
  if (timed_out) mark_unresponsive(h);
  const int64_t in_flight_ns =
      int64_t{std::max(h.limit_us, config_.contended_inflight_us)} * 1000 + config_.tick_ns;
  const int64_t end = timed_out ? std::min(now, revoked_at_ + in_flight_ns) : now;
  const int64_t held = end - grant_start_;
  h.held_ns += held;
  h.vtime += vtime_of(std::max<int64_t>(0, owed_ns(end)), h.settings.weight);
  if (h.settings.ceiling_pct > 0) h.tokens_ns -= held;
  phase_ = Phase::kIdle;
  holder_.clear();
  if (h.port->waiting() > 0)
    h.wait_since = now;
  else
    h.paused_since = now;
}

GpuScheduler::Entry* GpuScheduler::choose(int64_t now) {
  const std::string* pick = nullptr;
  // A low tenant starved for too long goes first (bounded waiting), oldest first.
  for (const auto& [name, e] : entries_) {
    if (e.settings.priority != PriorityClass::kLow || e.wait_since == 0 || !eligible(e)) continue;
    if (now - e.wait_since < config_.low_starvation_ns) continue;
    if (pick == nullptr || e.wait_since < entries_.at(*pick).wait_since) pick = &name;
  }
  if (pick == nullptr) {
    const PriorityClass wanted = normal_waiting() ? PriorityClass::kNormal : PriorityClass::kLow;
    for (const auto& [name, e] : entries_) {
      if (e.settings.priority != wanted || e.wait_since == 0 || !eligible(e)) continue;
      if (pick == nullptr || e.vtime < entries_.at(*pick).vtime) pick = &name;
    }
  }
  if (pick == nullptr) return nullptr;
  grant(*pick, now);
  return &entries_.at(holder_);
}

void GpuScheduler::grant(const std::string& name, int64_t now) {
  Entry& e = entries_.at(name);
  if (e.wait_since != 0) counters_.grant_waits.observe(now - e.wait_since);
  stop_waiting(e, now);
  if (!last_grantee_.empty() && last_grantee_ != name) ++counters_.handoffs;
  last_grantee_ = name;
  holder_ = name;
  phase_ = Phase::kHolding;
  grant_start_ = now;
  contended_since_ = now;
  slice_end_ = now + config_.slice_ns;
  last_active_ = now;
  last_sample_ = now;
  publish(e, true, false, true);
  first_epoch_ = e.epoch;
  sample_epoch_ = e.epoch;
}

// Everyone's in-flight bound: tight behind an active high tenant, short under
// contention (a handoff waits for at most that), generous when others merely exist,
// none for a tenant alone on the GPU.
void GpuScheduler::apply_limits(int64_t now) {
  const bool high = high_active(now);
  int demand = 0, with_processes = 0;
  for (const auto& [name, e] : entries_) {
    if (!is_high(e.settings) && ((e.wait_since != 0 && !e.unresponsive) || name == holder_))
      ++demand;
    if (e.port->has_processes()) ++with_processes;
  }
  for (auto& [name, e] : entries_) {
    if (is_high(e.settings)) continue;
    uint32_t limit = 0;
    if (high)
      limit = config_.behind_high_inflight_us();
    else if (demand >= 2 || e.settings.ceiling_pct > 0)
      limit = config_.contended_inflight_us;
    else if (with_processes > 1)
      limit = config_.shared_inflight_us;
    if (limit == e.limit_us) continue;
    e.limit_us = limit;
    publish(e, e.granted, e.notify,
            e.granted);  // a granted tenant re-reads its bound at the new epoch
    if (name == holder_ && phase_ == Phase::kHolding) sample_epoch_ = e.epoch;
  }
}

int64_t GpuScheduler::held_now(const std::string& name, const Entry& e, int64_t now) const {
  return e.held_ns + ((phase_ != Phase::kIdle && name == holder_) ? now - grant_start_ : 0);
}

void GpuScheduler::record_history(int64_t now) {
  if (now - last_history_ < kHistoryPeriodNs) return;
  last_history_ = now;
  for (auto& [name, e] : entries_) {
    e.history.emplace_back(now, held_now(name, e, now));
    while (e.history.size() > 2 && e.history[1].first <= now - config_.share_window_ns)
      e.history.pop_front();
  }
}

int64_t GpuScheduler::next_deadline(int64_t now) const {
  int64_t next = INT64_MAX;
  bool busy = false;
  if (phase_ == Phase::kHolding) {
    const bool contended = others_waiting();
    next = std::min(next, now + (contended ? config_.tick_ns : config_.idle_tick_ns));
    if (contended) next = std::min(next, slice_end_);
    busy = true;
  } else if (phase_ == Phase::kDraining) {
    next = std::min({next, now + config_.tick_ns, drain_deadline_});
    busy = true;
  }
  for (const auto& [name, e] : entries_) {
    if (is_high(e.settings) && now < e.active_until) {
      next = std::min(next, e.last_sample + config_.idle_tick_ns);
      busy = true;
    }
    if (e.wait_since == 0 || is_high(e.settings)) continue;
    busy = true;
    if (!eligible(e) && e.settings.ceiling_pct > 0) {
      const int64_t missing = config_.slice_ns / 4 - e.tokens_ns;
      next =
          std::min(next, now + std::max<int64_t>(missing * 100 / e.settings.ceiling_pct, 100'000));
    }
    if (e.settings.priority == PriorityClass::kLow)
      next = std::min(next, e.wait_since + config_.low_starvation_ns);
  }
  if (busy) next = std::min(next, last_history_ + kHistoryPeriodNs);
  return std::max(next, now + 50'000);
}

int64_t GpuScheduler::step(int64_t now) {
  refill(now);
  note_progress();
  note_waiting(now);
  for (auto& [name, e] : entries_)
    if (is_high(e.settings)) step_high(e, now);
  if (phase_ == Phase::kHolding) step_holder(now);
  if (phase_ == Phase::kDraining) step_draining(now);
  if (phase_ == Phase::kIdle) choose(now);
  apply_limits(now);
  apply_guard(now);
  record_history(now);
  return next_deadline(now);
}

std::optional<ComputeStatus> GpuScheduler::status(const std::string& tenant, int64_t now) const {
  auto it = entries_.find(tenant);
  if (it == entries_.end()) return std::nullopt;
  const Entry& e = it->second;
  ComputeStatus s;
  if (tenant == holder_ && phase_ == Phase::kHolding)
    s.state = "granted";
  else if (tenant == holder_ && phase_ == Phase::kDraining)
    s.state = "draining";
  else if (is_high(e.settings))
    s.state = now < e.active_until ? "granted" : "idle";
  else if (e.wait_since != 0)
    s.state = "waiting";
  const int64_t held = held_now(tenant, e, now);
  s.gpu_seconds = static_cast<double>(held) / 1e9;
  s.wait_seconds =
      static_cast<double>(e.waited_ns + (e.wait_since != 0 ? now - e.wait_since : 0)) / 1e9;
  if (!e.history.empty() && now > e.history.front().first) {
    const auto& [since, held_then] = e.history.front();
    s.measured_share = std::clamp(
        static_cast<double>(held - held_then) / static_cast<double>(now - since), 0.0, 1.0);
  }
  return s;
}

}  // namespace fracgpu::broker
