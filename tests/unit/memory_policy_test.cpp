// MemoryPolicy and MemoryPools (interpose/core) over a fake tenant and driver
// (fake_tenant.h): reservation before the driver call and release when it fails, the
// cap refusal, burst, pitched padding, what cuMemGetInfo reports, contexts, VMM, and the
// pool charge model (cached charge reused, settled to the driver's reservation,
// re-measured on trim and when a reservation is refused).
#include "core/memory_policy.h"

#include <gtest/gtest.h>

#include "core/tenant_policies.h"
#include "fake_tenant.h"

namespace fracgpu {
namespace {

using testing::FakeDriver;
using testing::FakeTenant;

struct MemoryPolicyTest : ::testing::Test {
  FakeTenant tenant{1000, 1000, 50};
  DriverCalls calls = FakeDriver::calls();
  FenceOps fences = FakeDriver::fence_ops();
  CaptureTracker captures;
  std::unique_ptr<TenantPolicies> policies;
  MemoryPolicy* memory = nullptr;

  void SetUp() override {
    FakeDriver::reset();
    captures.init(FakeDriver::capture_ops());
    policies =
        std::make_unique<TenantPolicies>(tenant, calls, fences, captures, "/nonexistent/doorbell");
    memory = &policies->memory;
  }

  // cuMemAlloc through the policy: the driver hands out `address` (or fails with `rc`),
  // and records what the ledger held while it ran.
  CUresult alloc(CUdeviceptr* ptr, uint64_t bytes, CUdeviceptr address, CUresult rc = CUDA_SUCCESS,
                 uint64_t* used_during = nullptr) {
    return memory->allocate("cuMemAlloc", ptr, bytes, [&] {
      if (used_during) *used_during = tenant.used();
      if (rc == CUDA_SUCCESS) *ptr = address;
      return rc;
    });
  }
};

TEST_F(MemoryPolicyTest, ReservesBeforeTheDriverCallAndReleasesOnFree) {
  CUdeviceptr ptr = 0;
  uint64_t during = 0;
  EXPECT_EQ(alloc(&ptr, 400, 0x1000, CUDA_SUCCESS, &during), CUDA_SUCCESS);
  EXPECT_EQ(during, 400u);  // charged before the driver allocated
  EXPECT_EQ(tenant.used(), 400u);
  EXPECT_EQ(memory->free(ptr, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 0u);
  EXPECT_EQ(memory->device_allocations(), 0u);
}

TEST_F(MemoryPolicyTest, ADriverFailureReleasesTheReservation) {
  CUdeviceptr ptr = 0;
  EXPECT_EQ(alloc(&ptr, 400, 0, CUDA_ERROR_OUT_OF_MEMORY), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(tenant.used(), 0u);
  EXPECT_EQ(memory->device_allocations(), 0u);
}

TEST_F(MemoryPolicyTest, RefusesPastTheCapWithoutCallingTheDriver) {
  CUdeviceptr ptr = 0;
  bool called = false;
  const CUresult rc = memory->allocate("cuMemAlloc", &ptr, 1001, [&] {
    called = true;
    return CUDA_SUCCESS;
  });
  EXPECT_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(called);
  EXPECT_EQ(tenant.used(), 0u);
  EXPECT_EQ(tenant.oom_events(), 1u);
  EXPECT_EQ(tenant.burst_requests, 0);  // beyond the limit the broker is not asked
}

TEST_F(MemoryPolicyTest, AsksTheBrokerForBurstBeyondTheGrant) {
  tenant.quota_map().devices[0].memory_grant = 300;
  CUdeviceptr ptr = 0;
  EXPECT_EQ(alloc(&ptr, 500, 0x1000), CUDA_ERROR_OUT_OF_MEMORY);  // the broker says no
  EXPECT_GE(tenant.burst_requests, 1);
  tenant.allow_burst = true;
  EXPECT_EQ(alloc(&ptr, 500, 0x1000), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 500u);
}

TEST_F(MemoryPolicyTest, AFailedFreeKeepsTheCharge) {
  CUdeviceptr ptr = 0;
  ASSERT_EQ(alloc(&ptr, 100, 0x1000), CUDA_SUCCESS);
  EXPECT_EQ(memory->free(ptr, [] { return CUDA_ERROR_INVALID_VALUE; }), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(tenant.used(), 100u);
  EXPECT_EQ(memory->free(ptr, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 0u);
}

TEST_F(MemoryPolicyTest, AReusedAddressReleasesTheStaleRow) {
  CUdeviceptr ptr = 0;
  ASSERT_EQ(alloc(&ptr, 100, 0x1000), CUDA_SUCCESS);
  ASSERT_EQ(alloc(&ptr, 200, 0x1000), CUDA_SUCCESS);  // the first vanished without a free
  EXPECT_EQ(tenant.used(), 200u);
}

TEST_F(MemoryPolicyTest, PitchPaddingIsChargedAndRefusedPastTheCap) {
  CUdeviceptr ptr = 0;
  size_t pitch = 0;
  auto driver = [&](size_t chosen_pitch, CUdeviceptr address) {
    return [&ptr, chosen_pitch, address](size_t* chosen) {
      *chosen = chosen_pitch;
      ptr = address;
      return CUDA_SUCCESS;
    };
  };
  auto fits = driver(128, 0x2000);
  ASSERT_EQ(memory->allocate_pitched(&ptr, &pitch, 100, 5, fits), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 128u);
  EXPECT_EQ(tenant.used(), 640u);  // the driver's pitch x height
  auto too_wide = driver(200, 0x3000);
  EXPECT_EQ(memory->allocate_pitched(&ptr, &pitch, 50, 5, too_wide), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(ptr, 0u);
  EXPECT_EQ(FakeDriver::frees, 1);  // the allocation went back to the driver
  EXPECT_EQ(tenant.used(), 640u);
}

TEST_F(MemoryPolicyTest, MemoryInfoReportsTheCapAsTheDevice) {
  CUdeviceptr ptr = 0;
  ASSERT_EQ(alloc(&ptr, 300, 0x1000), CUDA_SUCCESS);
  size_t free_bytes = 0, total_bytes = 0;
  auto device = [&] {
    free_bytes = 80'000, total_bytes = 100'000;
    return CUDA_SUCCESS;
  };
  ASSERT_EQ(memory->memory_info(&free_bytes, &total_bytes, device), CUDA_SUCCESS);
  EXPECT_EQ(total_bytes, 1000u);
  EXPECT_EQ(free_bytes, 700u);
  size_t total = 0;
  ASSERT_EQ(memory->total_memory(&total, 0,
                                 [&] {
                                   total = 100'000;
                                   return CUDA_SUCCESS;
                                 }),
            CUDA_SUCCESS);
  EXPECT_EQ(total, 1000u);
}

TEST_F(MemoryPolicyTest, ContextsAndThePrimaryContextPayTheirFootprint) {
  CUcontext ctx = nullptr;
  ASSERT_EQ(policies->contexts.create(0, &ctx,
                                      [&] {
                                        ctx = reinterpret_cast<CUcontext>(0x77);
                                        return CUDA_SUCCESS;
                                      }),
            CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 50u);
  auto ok = [] { return CUDA_SUCCESS; };
  ASSERT_EQ(policies->contexts.retain_primary(0, ok), CUDA_SUCCESS);
  ASSERT_EQ(policies->contexts.retain_primary(0, ok), CUDA_SUCCESS);  // charged once
  EXPECT_EQ(tenant.used(), 100u);
  ASSERT_EQ(policies->contexts.release_primary(0, false, ok), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 100u);
  ASSERT_EQ(policies->contexts.release_primary(0, false, ok), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 50u);
  ASSERT_EQ(policies->destroy_context(ctx, ok), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 0u);
}

TEST_F(MemoryPolicyTest, VmmMemoryIsChargedUntilReleasedAndUnmapped) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle = 0;
  auto ok = [] { return CUDA_SUCCESS; };
  ASSERT_EQ(policies->vmm.create(&handle, 256, &prop,
                                 [&] {
                                   handle = 0x42;
                                   return CUDA_SUCCESS;
                                 }),
            CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 256u);
  ASSERT_EQ(policies->vmm.map(0x10000, handle, ok), CUDA_SUCCESS);
  ASSERT_EQ(policies->vmm.release(handle, ok), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 256u);  // still mapped: the memory lives on
  ASSERT_EQ(policies->vmm.unmap(0x10000, 256, ok), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 0u);
  EXPECT_EQ(policies->vmm.charged_handles(), 0u);
}

// --- MemoryPools: the charge of stream-ordered allocations ---

CUresult pooled(MemoryPolicy& memory, CUdeviceptr* ptr, size_t size, CUdeviceptr address) {
  return memory.allocate_async(ptr, size, nullptr, nullptr, false, [&] {
    *ptr = address;
    return CUDA_SUCCESS;
  });
}

TEST_F(MemoryPolicyTest, PoolsSettleToTheDriversReservationAndReuseCachedCharge) {
  const CUmemoryPool pool = FakeDriver::default_pool;
  CUdeviceptr a = 0, b = 0;
  FakeDriver::pool_reserved[pool] = 256;  // the driver rounds the pool up
  ASSERT_EQ(pooled(*memory, &a, 100, 0x1000), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 256u);
  EXPECT_EQ(memory->pools().charged(pool), 256u);
  ASSERT_EQ(memory->free_async(a, nullptr, false, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 256u);  // freed into the pool's cache: still on the device
  EXPECT_EQ(memory->pools().live(pool), 0u);
  ASSERT_EQ(pooled(*memory, &b, 200, 0x2000), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 256u);  // covered by the cached charge
  EXPECT_EQ(memory->pools().live(pool), 200u);
}

TEST_F(MemoryPolicyTest, PoolTrimResyncsTheCharge) {
  const CUmemoryPool pool = FakeDriver::default_pool;
  CUdeviceptr a = 0;
  FakeDriver::pool_reserved[pool] = 512;
  ASSERT_EQ(pooled(*memory, &a, 300, 0x1000), CUDA_SUCCESS);
  ASSERT_EQ(memory->free_async(a, nullptr, false, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 512u);
  FakeDriver::pool_reserved[pool] = 128;
  ASSERT_EQ(memory->trim_pool(pool, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 128u);
  ASSERT_EQ(memory->destroy_pool(pool, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 0u);
}

TEST_F(MemoryPolicyTest, ARefusedReservationReclaimsWhatPoolsNoLongerHold) {
  const CUmemoryPool pool = FakeDriver::default_pool;
  CUdeviceptr a = 0, b = 0;
  FakeDriver::pool_reserved[pool] = 800;
  ASSERT_EQ(pooled(*memory, &a, 800, 0x1000), CUDA_SUCCESS);
  ASSERT_EQ(memory->free_async(a, nullptr, false, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 800u);
  FakeDriver::pool_reserved[pool] = 0;  // the driver gave the cache back on its own
  EXPECT_EQ(alloc(&b, 600, 0x3000), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 600u);
  EXPECT_EQ(memory->pools().charged(pool), 0u);
}

TEST_F(MemoryPolicyTest, ACapturedStreamOrderedAllocationIsNotCharged) {
  ASSERT_EQ(captures.begin([] {
    FakeDriver::capturing = true;
    return CUDA_SUCCESS;
  }),
            CUDA_SUCCESS);
  CUdeviceptr a = 0;
  ASSERT_EQ(pooled(*memory, &a, 300, 0x1000), CUDA_SUCCESS);
  EXPECT_EQ(tenant.used(), 0u);  // a graph node: charged when a launch backs it
  EXPECT_EQ(memory->async_allocations(), 0u);
}

}  // namespace
}  // namespace fracgpu
