// ProcAddressResolver: the driver's answer is mapped onto our wrapper of the same ABI,
// by pointer when possible, by catalog otherwise; unhooked functions pass through.
#include "core/proc_address_resolver.h"

#include <gtest/gtest.h>

namespace fracgpu {
namespace {

void* fake_pointer(std::size_t n) {
  return reinterpret_cast<void*>(0x10000 + 16 * n);
}
void* wrapper_pointer(std::size_t n) {
  return reinterpret_cast<void*>(0x900000 + 16 * n);
}

class ProcAddressResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::array<void*, kHookCount> real{}, wrappers{};
    for (std::size_t i = 0; i < kHookCount; ++i) {
      real[i] = fake_pointer(i);
      wrappers[i] = wrapper_pointer(i);
    }
    real[hook_index(HookId::cuMemAllocManaged)] = nullptr;  // a driver lacking one ABI
    resolver.build(real, wrappers, 13000);
  }
  ProcAddressResolver resolver;
};

TEST_F(ProcAddressResolverTest, DriverPointerOfAHookedAbiBecomesOurWrapper) {
  const auto id = hook_index(HookId::cuLaunchKernel_ptsz);
  EXPECT_EQ(resolver.translate("cuLaunchKernel", fake_pointer(id), 13000,
                               kProcAddressPerThreadStreamFlag),
            wrapper_pointer(id));
  EXPECT_EQ(resolver.stats().by_pointer, 1u);
}

TEST_F(ProcAddressResolverTest, UnknownPointerOfAHookedNameIsMatchedByVersion) {
  void* internal = reinterpret_cast<void*>(0x7777);
  EXPECT_EQ(resolver.translate("cuCtxCreate", internal, 12000, 0),
            wrapper_pointer(hook_index(HookId::cuCtxCreate_v3)));
  EXPECT_EQ(resolver.translate("cuMemcpyAsync", internal, 12000, kProcAddressPerThreadStreamFlag),
            wrapper_pointer(hook_index(HookId::cuMemcpyAsync_ptsz)));
  EXPECT_EQ(resolver.stats().by_name, 2u);
}

TEST_F(ProcAddressResolverTest, NewerThanTheHeadersIsNeverGuessed) {
  void* unknown_abi = reinterpret_cast<void*>(0x5151);  // e.g. a future cuCtxCreate_v5
  EXPECT_EQ(resolver.translate("cuCtxCreate", unknown_abi, 13020, 0), unknown_abi);
}

TEST_F(ProcAddressResolverTest, UnhookedAndMissingAbisPassThrough) {
  void* other = reinterpret_cast<void*>(0x4242);
  EXPECT_EQ(resolver.translate("cuCtxGetCurrent", other, 12000, 0), other);
  EXPECT_EQ(resolver.translate("cuMemAllocManaged", other, 12000, 0),
            other);  // driver lacks our ABI
  EXPECT_EQ(resolver.translate("cuMemAlloc", nullptr, 12000, 0), nullptr);
  EXPECT_EQ(resolver.stats().passed_through, 2u);
}

}  // namespace
}  // namespace fracgpu
