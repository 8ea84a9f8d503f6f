// What the shim's swap of an application's own VMM memory relies on in the simulated GPU
// (interpose/core/app_vmm.h), as on a real one: memory released while mapped lives until
// its last unmap; cuMemRetainAllocationHandle answers the handle mapped at an address;
// once a handle is unmapped and released its memory is gone while the address range stays
// reserved, and a copy to that range fails (cleanly); a new handle mapped at the same
// address, given access, holds new data there.
#include <cstring>
#include <vector>

#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class VmmSwapTest : public FakeDeviceTest {
 protected:
  CUmemAllocationProp prop() const {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // as PyTorch asks
    return p;
  }
  void map_with_access(CUdeviceptr va, uint64_t size, CUmemGenericAllocationHandle handle) {
    ASSERT_CU(cu.cuMemMap(va, size, 0, handle, 0));
    CUmemAccessDesc access{};
    access.location = prop().location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_CU(cu.cuMemSetAccess(va, size, &access, 1));
  }
  PFN_cuMemRetainAllocationHandle_v11000 retain() const {
    return reinterpret_cast<PFN_cuMemRetainAllocationHandle_v11000>(
        cu.symbol("cuMemRetainAllocationHandle"));
  }
};

TEST_F(VmmSwapTest, AMappingMovedOutAndBackAtTheSameAddressKeepsItsData) {
  constexpr uint64_t kSize = 4 * kMiB;
  const CUmemAllocationProp p = prop();
  const uint64_t before = free_bytes();
  CUdeviceptr va = 0;
  ASSERT_CU(cu.cuMemAddressReserve(&va, 2 * kSize, 0, 0, 0));
  CUmemGenericAllocationHandle first = 0;
  ASSERT_CU(cu.cuMemCreate(&first, kSize, &p, 0));
  map_with_access(va + kSize, kSize, first);  // at an offset of the range, as segments grow
  std::vector<uint32_t> data(kSize / 4), back(kSize / 4);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint32_t>(i * 2654435761u);
  ASSERT_CU(cu.cuMemcpyHtoD_v2(va + kSize, data.data(), kSize));

  ASSERT_NE(retain(), nullptr);
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_CU(retain()(&retained, reinterpret_cast<void*>(va + kSize + 4096)));
  EXPECT_EQ(retained, first) << "the handle mapped at any byte of the mapping";
  ASSERT_CU(cu.cuMemRelease(retained));

  // Swap-out: copy, unmap, release; the range stays reserved and nothing is mapped there.
  std::vector<uint32_t> host(kSize / 4);
  ASSERT_CU(cu.cuMemcpyDtoH_v2(host.data(), va + kSize, kSize));
  ASSERT_CU(cu.cuMemUnmap(va + kSize, kSize));
  EXPECT_EQ(free_bytes(), before - kSize) << "the application's reference still holds it";
  ASSERT_CU(cu.cuMemRelease(first));
  EXPECT_EQ(free_bytes(), before) << "gone";
  EXPECT_NE(cu.cuMemcpyDtoH_v2(back.data(), va + kSize, kSize), CUDA_SUCCESS)
      << "nothing is mapped there now";

  // Swap-in: a new handle at the same address, access again, the copy back.
  CUmemGenericAllocationHandle second = 0;
  ASSERT_CU(cu.cuMemCreate(&second, kSize, &p, 0));
  EXPECT_NE(second, first) << "a new handle: the application's must be translated";
  map_with_access(va + kSize, kSize, second);
  ASSERT_CU(cu.cuMemcpyHtoD_v2(va + kSize, host.data(), kSize));
  ASSERT_CU(cu.cuMemcpyDtoH_v2(back.data(), va + kSize, kSize));
  EXPECT_EQ(back, data);
  ASSERT_CU(retain()(&retained, reinterpret_cast<void*>(va + kSize)));
  EXPECT_EQ(retained, second);
  ASSERT_CU(cu.cuMemRelease(retained));

  // Released right after the swap-in (the application had released its handle): the
  // mapping alone holds the memory until it is unmapped.
  ASSERT_CU(cu.cuMemRelease(second));
  EXPECT_EQ(free_bytes(), before - kSize);
  ASSERT_CU(cu.cuMemcpyDtoH_v2(back.data(), va + kSize, kSize));
  EXPECT_EQ(back, data);
  ASSERT_CU(cu.cuMemUnmap(va + kSize, kSize));
  EXPECT_EQ(free_bytes(), before);
  ASSERT_CU(cu.cuMemAddressFree(va, 2 * kSize));
}

}  // namespace
}  // namespace fakecuda_test
