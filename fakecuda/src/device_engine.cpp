// FIFO, SIGKILL-robust cross-process engine lock (see device_engine.h). Waiting uses a
// shared futex word (`wake_sequence`) bumped on every release; a waiter also wakes up
// every kDeadCheckInterval to check whether the owner or an earlier waiter died.
#include "device_engine.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <thread>

#include "process_table.h"

namespace fakecuda {
namespace {

constexpr long kDeadCheckIntervalNs = 20'000'000;  // 20 ms

uint32_t* futex_word(std::atomic<uint32_t>& word) {
  return reinterpret_cast<uint32_t*>(&word);
}

// Returns false when the wait timed out.
bool futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  timespec timeout{0, kDeadCheckIntervalNs};
  long rc = syscall(SYS_futex, futex_word(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
  return !(rc == -1 && errno == ETIMEDOUT);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool same_party(const EngineParty& a, const EngineParty& b) {
  return a.pid == b.pid && a.start_time == b.start_time && a.executor_id == b.executor_id;
}

}  // namespace

// Scoped robust-mutex lock; repairs the engine state if the previous holder died
// while holding the guard (its half-done update may have left stale entries).
class DeviceEngine::GuardLock {
 public:
  explicit GuardLock(DeviceEngine& engine) : engine_(engine) {
    int rc = pthread_mutex_lock(&engine_.record_->guard);
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(&engine_.record_->guard);
      engine_.purge_dead_parties();
    }
  }
  ~GuardLock() { pthread_mutex_unlock(&engine_.record_->guard); }
  GuardLock(const GuardLock&) = delete;
  GuardLock& operator=(const GuardLock&) = delete;

 private:
  DeviceEngine& engine_;
};

void DeviceEngine::enqueue_self() {
  // The waiter table is bounded; a full table (64 executors queued on one GPU) only
  // delays us until an entry frees up.
  for (;;) {
    for (EngineWaiter& waiter : record_->waiters) {
      if (waiter.ticket != 0) continue;
      ticket_ = record_->next_ticket++;
      waiter.ticket = ticket_;
      waiter.party = self_;
      record_->waiter_count.fetch_add(1);
      return;
    }
    pthread_mutex_unlock(&record_->guard);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    pthread_mutex_lock(&record_->guard);
  }
}

void DeviceEngine::dequeue_self() {
  for (EngineWaiter& waiter : record_->waiters) {
    if (waiter.ticket == ticket_ && same_party(waiter.party, self_)) {
      waiter.ticket = 0;
      record_->waiter_count.fetch_sub(1);
      return;
    }
  }
}

bool DeviceEngine::my_turn() const {
  if (record_->owner.pid != 0) return false;
  for (const EngineWaiter& waiter : record_->waiters) {
    if (waiter.ticket != 0 && waiter.ticket < ticket_) return false;
  }
  return true;
}

void DeviceEngine::purge_dead_parties() {
  const EngineParty& owner = record_->owner;
  if (owner.pid != 0 && (!process_alive(owner.pid, owner.start_time, owner.place) ||
                         process_stopped(owner.pid, owner.place))) {
    record_->owner = EngineParty{};
    record_->running_chunks.store(0);  // the dead owner may have died mid-chunk
    record_->wake_sequence.fetch_add(1);
  }
  uint32_t live_waiters = 0;
  for (EngineWaiter& waiter : record_->waiters) {
    if (waiter.ticket == 0) continue;
    if (process_alive(waiter.party.pid, waiter.party.start_time, waiter.party.place) &&
        !process_stopped(waiter.party.pid,
                         waiter.party.place)) {  // a stopped waiter queues again when it runs
      ++live_waiters;
    } else {
      waiter.ticket = 0;
    }
  }
  record_->waiter_count.store(live_waiters);
}

void DeviceEngine::wait_for_turn() {
  // Called with the guard held by the caller's GuardLock scope below.
  bool check_dead = false;
  for (;;) {
    if (check_dead) purge_dead_parties();
    if (my_turn()) {
      dequeue_self();
      record_->owner = self_;
      record_->handoffs.fetch_add(1);
      return;
    }
    uint32_t seen = record_->wake_sequence.load();
    pthread_mutex_unlock(&record_->guard);
    check_dead = !futex_wait(record_->wake_sequence, seen);
    int rc = pthread_mutex_lock(&record_->guard);
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(&record_->guard);
      check_dead = true;
    }
  }
}

void DeviceEngine::wake_waiters() {
  record_->wake_sequence.fetch_add(1);
  if (record_->waiter_count.load() != 0) futex_wake_all(record_->wake_sequence);
}

void DeviceEngine::acquire() {
  GuardLock lock(*this);
  enqueue_self();
  wait_for_turn();
}

void DeviceEngine::release() {
  GuardLock lock(*this);
  if (same_party(record_->owner, self_)) record_->owner = EngineParty{};
  wake_waiters();
}

void DeviceEngine::yield_to_waiters() {
  GuardLock lock(*this);
  if (same_party(record_->owner, self_)) record_->owner = EngineParty{};
  enqueue_self();  // new ticket: behind everyone already waiting
  wake_waiters();
  wait_for_turn();
}

bool DeviceEngine::owns() {
  GuardLock lock(*this);
  return same_party(record_->owner, self_);
}

bool DeviceEngine::others_waiting() const {
  return record_->waiter_count.load(std::memory_order_relaxed) != 0;
}

}  // namespace fakecuda
