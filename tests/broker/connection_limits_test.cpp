// The socket limits' decisions (connection_limits.h) with fake time: who is refused and
// why, token buckets, EMFILE backoff, idle deadlines and rate-limited logging.
#include "core/connection_limits.h"

#include <gtest/gtest.h>

#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const LimitClock::time_point t0 = LimitClock::time_point() + std::chrono::hours(1);

AcceptFacts facts_for(uid_t uid, bool privileged, std::size_t open_total = 0,
                      std::size_t open_of_uid = 0, int fd = 10, uint64_t fd_limit = 1024) {
  AcceptFacts f;
  f.uid = uid;
  f.privileged = privileged;
  f.open_total = open_total;
  f.open_of_uid = open_of_uid;
  f.fd = fd;
  f.fd_limit = fd_limit;
  return f;
}

TEST(ConnectionLimits, DefaultsLetATenantHoldAllItsProcessSlots) {
  const auto tenant = ConnectionLimits::tenant_socket();
  EXPECT_GT(tenant.max_per_uid, kMaxProcesses);  // one connection per registered process
  EXPECT_FALSE(tenant.exempt_privileged);        // root in a pod is just a tenant
  EXPECT_FALSE(tenant.use_spare_fd);
  EXPECT_EQ(tenant.idle_timeout, seconds(10));
  EXPECT_GE(tenant.admit_burst, 256);

  const auto admin = ConnectionLimits::admin_socket();
  EXPECT_TRUE(admin.exempt_privileged);
  EXPECT_TRUE(admin.use_spare_fd);
  EXPECT_GT(admin.privileged_reserve, 0u);
  EXPECT_EQ(admin.idle_timeout, seconds(60));
}

TEST(ConnectionLimits, PrivilegedOnlyWhereTheSocketExemptsIt) {
  const auto admin = ConnectionLimits::admin_socket();
  const auto tenant = ConnectionLimits::tenant_socket();
  EXPECT_TRUE(is_privileged(admin, 0, 1000));
  EXPECT_TRUE(is_privileged(admin, 1000, 1000));  // the broker's own euid
  EXPECT_FALSE(is_privileged(admin, 1001, 1000));
  EXPECT_FALSE(is_privileged(tenant, 0, 0));
}

TEST(ConnectionLimits, PerUidCapRefusesWithTheReason) {
  ConnectionLimits limits;
  limits.max_per_uid = 3;
  EXPECT_FALSE(admission_refusal(limits, facts_for(1000, false, 10, 2)));
  auto why = admission_refusal(limits, facts_for(1000, false, 10, 3));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("uid 1000 already has 3 connections"), std::string::npos) << *why;
  EXPECT_NE(why->find("limit is 3"), std::string::npos) << *why;
}

TEST(ConnectionLimits, ServerCapKeepsAReserveForPrivilegedPeers) {
  ConnectionLimits limits = ConnectionLimits::admin_socket();
  limits.max_connections = 100;
  limits.privileged_reserve = 5;
  limits.max_per_uid = 1000;
  EXPECT_FALSE(admission_refusal(limits, facts_for(1000, false, 99, 0)));
  auto why = admission_refusal(limits, facts_for(1000, false, 100, 0));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("maximum of 100 connections"), std::string::npos) << *why;
  // Root still gets in, up to the reserve, and ignores the per-uid cap.
  EXPECT_FALSE(admission_refusal(limits, facts_for(0, true, 100, 5000)));
  EXPECT_FALSE(admission_refusal(limits, facts_for(0, true, 104, 5000)));
  EXPECT_TRUE(admission_refusal(limits, facts_for(0, true, 105, 5000)));
}

TEST(ConnectionLimits, DescriptorHeadroomStopsNonPrivilegedPeersBeforeEmfile) {
  ConnectionLimits limits;
  limits.fd_headroom = 64;
  EXPECT_EQ(effective_fd_headroom(limits, 1024), 64u);
  EXPECT_EQ(effective_fd_headroom(limits, 64), 16u);  // a quarter of a small limit
  EXPECT_FALSE(admission_refusal(limits, facts_for(1000, false, 0, 0, 959, 1024)));
  auto why = admission_refusal(limits, facts_for(1000, false, 0, 0, 960, 1024));
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("short of file descriptors (961 of 1024 in use)"), std::string::npos) << *why;
  EXPECT_TRUE(admission_refusal(limits, facts_for(1000, false, 0, 0, 48, 64)));
  EXPECT_FALSE(admission_refusal(limits, facts_for(1000, false, 0, 0, 47, 64)));
  // Unknown limit: no headroom check.
  EXPECT_FALSE(admission_refusal(limits, facts_for(1000, false, 0, 0, 100000, 0)));
  // Privileged peers on the control plane use the headroom.
  auto admin = ConnectionLimits::admin_socket();
  EXPECT_FALSE(admission_refusal(admin, facts_for(0, true, 0, 0, 63, 64)));
}

TEST(ConnectionLimits, OutOfDescriptorsServesOnlyPrivilegedPeers) {
  auto admin = ConnectionLimits::admin_socket();
  auto f = facts_for(1000, false);
  f.out_of_descriptors = true;
  auto why = admission_refusal(admin, f);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("out of file descriptors"), std::string::npos) << *why;
  f = facts_for(0, true);
  f.out_of_descriptors = true;
  EXPECT_FALSE(admission_refusal(admin, f));
}

TEST(ConnectionLimits, IdleDeadlineSparesRegisteredProcesses) {
  ConnectionLimits limits;
  limits.idle_timeout = seconds(10);
  EXPECT_FALSE(idle_expired(limits, t0, t0 + milliseconds(9999), false));
  EXPECT_TRUE(idle_expired(limits, t0, t0 + seconds(10), false));
  EXPECT_FALSE(idle_expired(limits, t0, t0 + std::chrono::hours(24), true));
}

TEST(UidCounts, CountsPerUidAndForgetsEmptyOnes) {
  UidCounts counts;
  counts.add(1000);
  counts.add(1000);
  counts.add(0);
  EXPECT_EQ(counts.of(1000), 2u);
  EXPECT_EQ(counts.of(0), 1u);
  EXPECT_EQ(counts.of(7), 0u);
  counts.remove(1000);
  counts.remove(1000);
  counts.remove(1000);  // one too many: harmless
  EXPECT_EQ(counts.of(1000), 0u);
  EXPECT_EQ(counts.uids(), 1u);
}

TEST(TokenBucket, BurstThenRate) {
  TokenBucket bucket(100, 5, t0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(bucket.take(t0)) << i;
  EXPECT_FALSE(bucket.take(t0));
  EXPECT_FALSE(bucket.available(t0 + milliseconds(9)));
  const auto due = bucket.next_token(t0);
  EXPECT_GE(due, t0 + milliseconds(10) - std::chrono::microseconds(1));
  EXPECT_LE(due, t0 + milliseconds(10) + std::chrono::microseconds(1));
  EXPECT_TRUE(bucket.available(due));
  EXPECT_TRUE(bucket.take(t0 + milliseconds(10)));
  EXPECT_FALSE(bucket.take(t0 + milliseconds(10)));
  // A long quiet spell refills to the burst, not beyond.
  int taken = 0;
  while (bucket.take(t0 + seconds(60))) ++taken;
  EXPECT_EQ(taken, 5);
  // Over one second at most rate + burst are admitted.
  TokenBucket b2(128, 256, t0);
  int admitted = 0;
  for (int ms = 0; ms <= 1000; ++ms) {
    while (b2.take(t0 + milliseconds(ms))) ++admitted;
  }
  EXPECT_GE(admitted, 256 + 127);
  EXPECT_LE(admitted, 256 + 129);
}

TEST(TokenBucket, ClockGoingBackDoesNotMintTokens) {
  TokenBucket bucket(10, 1, t0);
  EXPECT_TRUE(bucket.take(t0));
  EXPECT_FALSE(bucket.take(t0 - seconds(5)));
  EXPECT_FALSE(bucket.take(t0 + milliseconds(50)));
  EXPECT_TRUE(bucket.take(t0 + milliseconds(100)));
}

TEST(TokenBucket, ZeroRateIsUnlimited) {
  TokenBucket bucket(0, 1, t0);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(bucket.take(t0));
  EXPECT_EQ(bucket.next_token(t0), t0);
}

TEST(Backoff, DoublesToTheCapAndResets) {
  Backoff backoff(milliseconds(100), seconds(1));
  EXPECT_EQ(backoff.next(), milliseconds(100));
  EXPECT_EQ(backoff.next(), milliseconds(200));
  EXPECT_EQ(backoff.next(), milliseconds(400));
  EXPECT_EQ(backoff.next(), milliseconds(800));
  EXPECT_EQ(backoff.next(), milliseconds(1000));
  EXPECT_EQ(backoff.next(), milliseconds(1000));
  backoff.reset();
  EXPECT_EQ(backoff.next(), milliseconds(100));
}

TEST(LogLimiter, OneLinePerIntervalWithTheCountOfTheRest) {
  LogLimiter log(seconds(1));
  uint64_t earlier = 99;
  EXPECT_TRUE(log.admit(t0, &earlier));
  EXPECT_EQ(earlier, 0u);
  int lines = 0;
  for (int i = 1; i < 100000; ++i) {  // a flood over 10 s
    if (log.admit(t0 + std::chrono::microseconds(i * 100), &earlier)) ++lines;
  }
  EXPECT_EQ(lines, 9);  // at 1 s, 2 s, ... 9 s
  EXPECT_TRUE(log.pending());
  // Nothing is flushed early, the rest once the interval has passed.
  EXPECT_EQ(log.flush(t0 + milliseconds(9500)), 0u);
  const uint64_t rest = log.flush(t0 + seconds(12));
  EXPECT_GT(rest, 0u);
  EXPECT_FALSE(log.pending());
  EXPECT_EQ(log.flush(t0 + seconds(20)), 0u);
}

TEST(LogLimiter, CountsBatchesAndReportsThemOnTheNextLine) {
  LogLimiter log(seconds(10));
  uint64_t earlier = 0;
  EXPECT_TRUE(log.admit(t0, &earlier, 3));
  EXPECT_FALSE(log.admit(t0 + seconds(1), &earlier, 5));
  EXPECT_FALSE(log.admit(t0 + seconds(2), &earlier, 7));
  EXPECT_TRUE(log.admit(t0 + seconds(10), &earlier, 1));
  EXPECT_EQ(earlier, 12u);
}

}  // namespace
}  // namespace fracgpu::broker
