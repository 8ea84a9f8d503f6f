// PendingStarts (k8s/device_plugin/pending_starts.h) with a fake clock: a tenant allocated
// and not started is awaited until its start or until the limit passes; marks of pods that
// never started are dropped as later Allocates come, so the set stays bounded.
#include "device_plugin/pending_starts.h"

#include <gtest/gtest.h>

namespace fracgpu::k8s {
namespace {

using Clock = PendingStarts::Clock;
using std::chrono::minutes;

TEST(PendingStarts, AnAllocatedTenantIsAwaitedUntilItsContainerStarts) {
  PendingStarts pending(minutes(30));
  const Clock::time_point t0{};
  EXPECT_FALSE(pending.awaiting("a", t0));
  pending.allocated("a", t0);
  EXPECT_TRUE(pending.awaiting("a", t0 + minutes(29)));
  EXPECT_FALSE(pending.awaiting("b", t0));
  pending.started("a");
  EXPECT_FALSE(pending.awaiting("a", t0 + minutes(1)));
  pending.started("never-allocated");  // harmless
}

TEST(PendingStarts, AMarkOlderThanTheLimitNoLongerProtects) {
  PendingStarts pending(minutes(30));
  const Clock::time_point t0{};
  pending.allocated("a", t0);
  EXPECT_TRUE(pending.awaiting("a", t0 + minutes(30)));
  EXPECT_FALSE(pending.awaiting("a", t0 + minutes(31)));
  pending.allocated("a", t0 + minutes(40));  // allocated again (a new pod on the same slices)
  EXPECT_TRUE(pending.awaiting("a", t0 + minutes(41)));
}

TEST(PendingStarts, StaleMarksAreDroppedByLaterAllocates) {
  PendingStarts pending(minutes(30));
  const Clock::time_point t0{};
  pending.allocated("old", t0);
  pending.allocated("new", t0 + minutes(45));
  EXPECT_FALSE(pending.awaiting("old", t0 + minutes(45)));
  EXPECT_TRUE(pending.awaiting("new", t0 + minutes(45)));
}

}  // namespace
}  // namespace fracgpu::k8s
