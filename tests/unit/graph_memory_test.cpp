// GraphMemory (interpose/core/graph_memory.h) over a fake tenant and driver
// (fake_tenant.h): a graph's memory nodes are charged before its launch, settled to what
// the driver reports reserved after it, refused past the cap before the driver maps
// anything, and re-measured on trim and destruction.
#include "core/graph_memory.h"

#include <gtest/gtest.h>

#include "core/tenant_policies.h"
#include "fake_tenant.h"

namespace fracgpu {
namespace {

using testing::FakeDriver;
using testing::FakeTenant;

struct GraphMemoryTest : ::testing::Test {
  FakeTenant tenant{1000, 1000};
  DriverCalls calls = FakeDriver::calls();
  FenceOps fences = FakeDriver::fence_ops();
  CaptureTracker captures;
  std::unique_ptr<TenantPolicies> policies;
  CUgraphExec exec = reinterpret_cast<CUgraphExec>(0x900);

  void SetUp() override {
    FakeDriver::reset();
    captures.init(FakeDriver::capture_ops());
    policies =
        std::make_unique<TenantPolicies>(tenant, calls, fences, captures, "/nonexistent/doorbell");
  }
  GraphMemory& graphs() { return policies->graphs; }

  void instantiate(std::vector<uint64_t> allocations) {
    FakeDriver::graph_allocations = std::move(allocations);
    CUgraphExec out = nullptr;
    ASSERT_EQ(graphs().instantiate(&out, reinterpret_cast<CUgraph>(0x800),
                                   [&] {
                                     out = exec;
                                     return CUDA_SUCCESS;
                                   }),
              CUDA_SUCCESS);
  }
  // A launch that makes the driver back `backed` bytes (reserved = used = backed).
  CUresult launch(uint64_t backed, uint64_t* used_during = nullptr, bool* called = nullptr) {
    return graphs().launch(exec, [&] {
      if (used_during) *used_during = tenant.used();
      if (called) *called = true;
      FakeDriver::graph_reserved = FakeDriver::graph_used = backed;
      return CUDA_SUCCESS;
    });
  }
};

TEST_F(GraphMemoryTest, ChargedBeforeTheLaunchAndSettledToTheReservationAfter) {
  instantiate({200, 100});
  uint64_t during = 0;
  ASSERT_EQ(launch(384, &during), CUDA_SUCCESS);
  EXPECT_EQ(during, 300u);  // the nodes' bytes, before the driver maps anything
  EXPECT_EQ(tenant.used(), 384u);
  EXPECT_EQ(graphs().charged(0), 384u);
  // Launched again: it reuses its own memory, nothing more is charged before.
  FakeDriver::graph_used = 0;  // the previous launch completed
  ASSERT_EQ(launch(384, &during), CUDA_SUCCESS);
  EXPECT_EQ(during, 384u);
  EXPECT_EQ(tenant.used(), 384u);
}

TEST_F(GraphMemoryTest, ALaunchPastTheCapIsRefusedBeforeTheDriverRuns) {
  instantiate({1500});
  bool called = false;
  EXPECT_EQ(launch(1500, nullptr, &called), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(called);
  EXPECT_EQ(tenant.used(), 0u);
  EXPECT_EQ(graphs().charged(0), 0u);
}

TEST_F(GraphMemoryTest, AFailedLaunchReleasesThePreCharge) {
  instantiate({300});
  EXPECT_EQ(graphs().launch(exec, [] { return CUDA_ERROR_LAUNCH_FAILED; }),
            CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(tenant.used(), 0u);
}

TEST_F(GraphMemoryTest, TrimAndDestructionResyncTheCharge) {
  instantiate({300});
  ASSERT_EQ(launch(320), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 320u);
  FakeDriver::graph_reserved = FakeDriver::graph_used = 0;  // the driver trimmed its graph pool
  ASSERT_EQ(graphs().trim(0, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 0u);
  // The exec lost its memory: its next launch is charged before again.
  uint64_t during = 0;
  ASSERT_EQ(launch(320, &during), CUDA_SUCCESS);
  EXPECT_EQ(during, 300u);
  FakeDriver::graph_reserved = FakeDriver::graph_used = 0;
  ASSERT_EQ(graphs().destroy(exec, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 0u);
}

TEST_F(GraphMemoryTest, GraphsWithoutMemoryNodesAreNotTracked) {
  instantiate({});
  bool called = false;
  ASSERT_EQ(launch(0, nullptr, &called), CUDA_SUCCESS);
  EXPECT_TRUE(called);
  EXPECT_EQ(tenant.used(), 0u);
}

}  // namespace
}  // namespace fracgpu
