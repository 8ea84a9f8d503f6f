// MemoryLedger against an in-memory quota and ledger: caps, grants, the Dekker
// re-check against a lowered grant, and racing threads that must never overshoot.
#include "core/memory_ledger.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace fracgpu {
namespace {

struct Segments {
  std::unique_ptr<TenantQuota> quota = std::make_unique<TenantQuota>();
  std::unique_ptr<TenantLedger> ledger = std::make_unique<TenantLedger>();
  Segments(uint64_t limit, uint64_t grant) {
    quota->device_count = 1;
    quota->devices[0].present = 1;
    quota->devices[0].memory_limit = limit;
    quota->devices[0].memory_request = grant;
    quota->devices[0].memory_grant = grant;
  }
  MemoryLedger for_slot(uint32_t slot) { return MemoryLedger(quota.get(), ledger.get(), slot); }
};

TEST(MemoryLedger, ReservesWithinTheGrantAndRefusesBeyond) {
  Segments s(1000, 600);
  MemoryLedger ledger = s.for_slot(3);
  EXPECT_EQ(ledger.try_reserve(0, 500), ReserveOutcome::kReserved);
  EXPECT_EQ(ledger.try_reserve(0, 200), ReserveOutcome::kOverGrant);
  EXPECT_EQ(ledger.try_reserve(0, 600), ReserveOutcome::kOverLimit);
  EXPECT_EQ(ledger.try_reserve(0, UINT64_MAX), ReserveOutcome::kOverLimit);  // no wrap-around
  EXPECT_EQ(ledger.used(0), 500u);
  EXPECT_EQ(ledger.process_used(0), 500u);
  EXPECT_EQ(s.ledger->devices[0].peak.load(), 500u);
  ledger.release(0, 500);
  EXPECT_EQ(ledger.used(0), 0u);
  EXPECT_EQ(ledger.process_used(0), 0u);
}

TEST(MemoryLedger, EveryOperationLeavesTheSlotSequenceEven) {
  Segments s(1000, 600);
  MemoryLedger ledger = s.for_slot(2);
  const auto& seq = s.ledger->processes[2].op_seq;
  EXPECT_EQ(ledger.try_reserve(0, 100), ReserveOutcome::kReserved);
  EXPECT_EQ(seq.load(), 2u);
  EXPECT_EQ(ledger.try_reserve(0, 900), ReserveOutcome::kOverGrant);  // early return
  EXPECT_EQ(ledger.try_reserve(0, 5000), ReserveOutcome::kOverLimit);
  ledger.release(0, 100);
  ledger.force_charge(0, 10);
  EXPECT_EQ(seq.load() % 2, 0u);
  EXPECT_EQ(seq.load(), 10u);
}

TEST(MemoryLedger, ReleaseNeverWrapsBelowZero) {
  Segments s(1000, 1000);
  MemoryLedger ledger = s.for_slot(0);
  ledger.release(0, 10);
  EXPECT_EQ(ledger.used(0), 0u);
  EXPECT_EQ(ledger.try_reserve(0, 1000), ReserveOutcome::kReserved);
}

TEST(MemoryLedger, RaisedGrantAdmitsBurst) {
  Segments s(1000, 100);
  MemoryLedger ledger = s.for_slot(0);
  EXPECT_EQ(ledger.try_reserve(0, 300), ReserveOutcome::kOverGrant);
  s.quota->devices[0].memory_grant = 400;  // what the broker does on a burst request
  EXPECT_EQ(ledger.try_reserve(0, 300), ReserveOutcome::kReserved);
}

TEST(MemoryLedger, ForceChargeCountsPastTheGrant) {
  Segments s(1000, 100);
  MemoryLedger ledger = s.for_slot(0);
  ledger.force_charge(0, 150);
  EXPECT_EQ(ledger.used(0), 150u);
  EXPECT_EQ(ledger.try_reserve(0, 1), ReserveOutcome::kOverGrant);
}

// Eight threads (slots) hammer one tenant; the total never exceeds the cap and every
// slot's counter equals what its thread holds once all is released.
TEST(MemoryLedger, RacingReservationsNeverOvershoot) {
  constexpr uint64_t kCap = 1 << 20;
  Segments s(kCap, kCap);
  std::atomic<bool> overshoot{false};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      MemoryLedger ledger = s.for_slot(t);
      std::mt19937 rng(t);
      std::vector<uint64_t> held;
      for (int i = 0; i < 20000; ++i) {
        uint64_t n = 1 + rng() % 4096;
        if (ledger.try_reserve(0, n) == ReserveOutcome::kReserved) held.push_back(n);
        if (s.ledger->devices[0].used.load() > kCap) overshoot = true;
        if (!held.empty() && rng() % 2) {
          ledger.release(0, held.back());
          held.pop_back();
        }
      }
      for (uint64_t n : held) ledger.release(0, n);
      EXPECT_EQ(ledger.process_used(0), 0u);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(overshoot.load());
  EXPECT_EQ(s.ledger->devices[0].used.load(), 0u);
  EXPECT_LE(s.ledger->devices[0].peak.load(), kCap);
}

// The broker lowers the grant while threads reserve: after the broker's fix-up (raise
// the grant back to `used` if a reservation raced), used never exceeds the grant.
TEST(MemoryLedger, LoweredGrantIsNeverExceededAfterTheBrokersRecheck) {
  Segments s(1 << 30, 1 << 20);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      MemoryLedger ledger = s.for_slot(t);
      while (!stop) {
        if (ledger.try_reserve(0, 1000) == ReserveOutcome::kReserved) ledger.release(0, 1000);
      }
    });
  }
  auto& grant = s.quota->devices[0].memory_grant;
  auto& used = s.ledger->devices[0].used;
  for (int i = 0; i < 2000; ++i) {
    grant.store(i % 2 ? 1 << 20 : 2000, std::memory_order_seq_cst);
    uint64_t now = used.load(std::memory_order_seq_cst);
    if (now > grant.load()) grant.store(now, std::memory_order_seq_cst);  // the broker's fix-up
    EXPECT_LE(used.load(), std::max<uint64_t>(grant.load(), 4 * 1000));
  }
  stop = true;
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace fracgpu
