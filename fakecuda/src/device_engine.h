// The device engine: a machine-wide lock that makes the simulated GPU execute one
// context's work at a time, as a real GPU does between processes. Waiters are served
// in FIFO ticket order, so a holder that yields at a timeslice boundary re-queues
// behind everyone already waiting (round-robin). The lock survives SIGKILL: the small
// guard mutex is a robust process-shared mutex, and an engine whose owner (or a queued
// waiter) has died is taken back by the next waiter that times out and checks /proc.
// So is one whose owner is stopped (SIGSTOP): a GPU goes on serving other contexts while a
// host process is stopped. The stopped party finds out when it runs again (owns() is
// false) and queues for the engine anew; its stopped time is not charged as busy.
#pragma once

#include <cstdint>

#include "shared_segment.h"

namespace fakecuda {

class DeviceEngine {
 public:
  DeviceEngine(EngineRecord* record, EngineParty self) : record_(record), self_(self) {}
  DeviceEngine(const DeviceEngine&) = delete;
  DeviceEngine& operator=(const DeviceEngine&) = delete;

  // Blocks until this party owns the engine.
  void acquire();
  void release();
  // Gives the engine to the parties already waiting and blocks until it is our turn
  // again. Never returns the engine to us while an earlier waiter is still queued.
  void yield_to_waiters();
  bool others_waiting() const;
  // Still the owner (not taken away while this process was stopped)? Takes the guard.
  bool owns();

 private:
  class GuardLock;

  void enqueue_self();
  void dequeue_self();
  bool my_turn() const;
  void purge_dead_parties();
  void wait_for_turn();
  void wake_waiters();

  EngineRecord* record_;
  EngineParty self_;
  uint64_t ticket_ = 0;
};

}  // namespace fakecuda
