// Admission: limits fit the GPU minus the reserve, requests fit under limits, and the
// guaranteed requests of all tenants on a GPU fit its capacity.
#include "core/admission.h"

#include <gtest/gtest.h>

#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kGiB;

GpuInventory two_gpus() {
  GpuInventory inv;
  inv.gpus.push_back({0, "GPU-00000000-0000-0000-0000-000000000000", "sim", 80 * kGiB, 0});
  inv.gpus.push_back({1, "GPU-11111111-0000-0000-0000-000000000000", "sim", 16 * kGiB, 0});
  return inv;
}

TenantSpec spec(const std::string& name, uint32_t gpu, uint64_t limit, uint64_t request) {
  TenantSpec s;
  s.name = name;
  DeviceSpec d;
  d.gpu = gpu;
  d.memory_limit = limit;
  d.memory_request = request;
  s.devices.push_back(d);
  return s;
}

TEST(Admission, AcceptsFittingTenantAndFillsUuid) {
  auto a = spec("a", 0, 60 * kGiB, 40 * kGiB);
  ASSERT_TRUE(admit_tenant(a, two_gpus(), 0, {}).ok());
  EXPECT_EQ(a.devices[0].uuid, "GPU-00000000-0000-0000-0000-000000000000");
}

TEST(Admission, LimitMustFitCapacityMinusReserve) {
  auto a = spec("a", 1, 16 * kGiB, 1 * kGiB);
  EXPECT_TRUE(admit_tenant(a, two_gpus(), 0, {}).ok());
  auto s = admit_tenant(a, two_gpus(), 1 * kGiB, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("larger than GPU 1's capacity of 15 GiB"), std::string::npos)
      << s.error();
}

TEST(Admission, RequestMustNotExceedLimit) {
  auto a = spec("a", 0, 10 * kGiB, 11 * kGiB);
  EXPECT_FALSE(admit_tenant(a, two_gpus(), 0, {}).ok());
}

TEST(Admission, SumOfRequestsMustFitButLimitsMayOvercommit) {
  auto a = spec("a", 0, 60 * kGiB, 40 * kGiB);
  auto b = spec("b", 0, 60 * kGiB, 30 * kGiB);  // limits 120 GiB on an 80 GiB GPU: fine
  const TenantSpec* others[] = {&a};
  EXPECT_TRUE(admit_tenant(b, two_gpus(), 0, others).ok());
  auto c = spec("c", 0, 20 * kGiB, 11 * kGiB);  // 40 + 30 + 11 > 80
  const TenantSpec* both[] = {&a, &b};
  auto s = admit_tenant(c, two_gpus(), 0, both);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("already guaranteed to other tenants"), std::string::npos) << s.error();
  auto d = spec("d", 0, 20 * kGiB, 10 * kGiB);  // exactly fills the GPU
  EXPECT_TRUE(admit_tenant(d, two_gpus(), 0, both).ok());
  auto e = spec("e", 1, 16 * kGiB, 16 * kGiB);  // another GPU is unaffected
  EXPECT_TRUE(admit_tenant(e, two_gpus(), 0, both).ok());
}

// "memory_limit":"available" (fracgpu run without --memory): the capacity minus the
// other tenants' requests on that GPU, with the tenant's own request (default 0) inside it.
TEST(Admission, AvailableMemoryIsWhatNoOtherTenantIsGuaranteed) {
  auto a = spec("a", 0, 60 * kGiB, 40 * kGiB);
  auto b = spec("b", 1, 8 * kGiB, 8 * kGiB);  // another GPU does not count
  const TenantSpec* others[] = {&a, &b};
  auto run = spec("run", 0, kMemoryLimitAvailable, 0);
  ASSERT_TRUE(admit_tenant(run, two_gpus(), 2 * kGiB, others).ok());
  EXPECT_EQ(run.devices[0].memory_limit,
            80 * kGiB - 2 * kGiB - 40 * kGiB);  // minus the reserve too
  EXPECT_EQ(run.devices[0].memory_request, 0u);
  EXPECT_EQ(run.devices[0].uuid, "GPU-00000000-0000-0000-0000-000000000000");
  auto alone = spec("alone", 1, kMemoryLimitAvailable, 0);  // a private broker: the whole GPU
  ASSERT_TRUE(admit_tenant(alone, two_gpus(), 0, {}).ok());
  EXPECT_EQ(alone.devices[0].memory_limit, 16 * kGiB);
  auto with_request = spec("req", 0, kMemoryLimitAvailable, 40 * kGiB);  // exactly the rest
  ASSERT_TRUE(admit_tenant(with_request, two_gpus(), 0, others).ok());
  EXPECT_EQ(with_request.devices[0].memory_limit, 40 * kGiB);
  EXPECT_EQ(with_request.devices[0].memory_request, 40 * kGiB);
}

TEST(Admission, AvailableMemoryIsRefusedWhenNothingIsLeft) {
  auto a = spec("a", 1, 16 * kGiB, 16 * kGiB);
  const TenantSpec* others[] = {&a};
  auto run = spec("run", 1, kMemoryLimitAvailable, 0);
  auto s = admit_tenant(run, two_gpus(), 0, others);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("no memory of GPU 1 is left for a tenant without a memory limit"),
            std::string::npos)
      << s.error();
  auto b = spec("b", 0, 70 * kGiB, 70 * kGiB);
  const TenantSpec* on_0[] = {&b};
  auto too_big = spec("big", 0, kMemoryLimitAvailable, 11 * kGiB);  // 10 GiB are left
  s = admit_tenant(too_big, two_gpus(), 0, on_0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("memory request 11 GiB does not fit on GPU 0"), std::string::npos)
      << s.error();
}

TEST(Admission, UnknownGpuAndNoGpu) {
  auto a = spec("a", 5, kGiB, kGiB);
  auto s = admit_tenant(a, two_gpus(), 0, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("GPU 5 does not exist"), std::string::npos) << s.error();
  GpuInventory none;
  none.problem = "cannot load the CUDA driver libcuda.so.1";
  s = admit_tenant(a, none, 0, {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("no GPU is available"), std::string::npos) << s.error();
  EXPECT_NE(s.error().find("libcuda.so.1"), std::string::npos) << s.error();
}

}  // namespace
}  // namespace fracgpu::broker
