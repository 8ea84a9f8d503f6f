// Registered host memory as the shim's swap-out uses it (interpose/core/host_staging.h):
// sub-ranges of one mapping registered separately, unregistered one by one by their start,
// refused when any byte of them is registered already (as the real driver refuses them),
// and filled by asynchronous copies on a non-blocking stream.
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

constexpr size_t kChunk = 1 << 20;

class HostRegisterTest : public FakeDeviceTest {
 protected:
  void SetUp() override {
    FakeDeviceTest::SetUp();
    host_register =
        reinterpret_cast<PFN_cuMemHostRegister_v6050>(cu.symbol("cuMemHostRegister_v2"));
    host_unregister =
        reinterpret_cast<PFN_cuMemHostUnregister_v4000>(cu.symbol("cuMemHostUnregister"));
    ASSERT_NE(host_register, nullptr);
    ASSERT_NE(host_unregister, nullptr);
    mapping = static_cast<char*>(
        mmap(nullptr, 4 * kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(mapping, MAP_FAILED);
  }
  void TearDown() override {
    munmap(mapping, 4 * kChunk);
    FakeDeviceTest::TearDown();
  }

  PFN_cuMemHostRegister_v6050 host_register = nullptr;
  PFN_cuMemHostUnregister_v4000 host_unregister = nullptr;
  char* mapping = nullptr;
};

TEST_F(HostRegisterTest, SubRangesOfOneMappingRegisterAndUnregisterSeparately) {
  for (int i = 0; i < 4; ++i)
    ASSERT_CU(host_register(mapping + i * kChunk, kChunk, CU_MEMHOSTREGISTER_PORTABLE));
  // An address inside a chunk is pinned memory of that chunk.
  auto get_flags = reinterpret_cast<PFN_cuMemHostGetFlags_v2030>(cu.symbol("cuMemHostGetFlags"));
  ASSERT_NE(get_flags, nullptr);
  unsigned flags = 0;
  ASSERT_CU(get_flags(&flags, mapping + 2 * kChunk + 10));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_MEMHOSTREGISTER_PORTABLE));
  // Only a registration's start names it.
  EXPECT_CU_ERROR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, host_unregister(mapping + kChunk / 2));
  for (int i = 0; i < 4; ++i) ASSERT_CU(host_unregister(mapping + i * kChunk));
  EXPECT_CU_ERROR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, host_unregister(mapping));
}

TEST_F(HostRegisterTest, ARangeWithAnyRegisteredByteIsRefused) {
  ASSERT_CU(host_register(mapping + kChunk, kChunk, 0));
  // Containing the registered range, straddling its start, straddling its end, inside it.
  EXPECT_CU_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, host_register(mapping, 3 * kChunk, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                  host_register(mapping + kChunk / 2, kChunk, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                  host_register(mapping + kChunk + kChunk / 2, kChunk, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                  host_register(mapping + kChunk + 4096, 4096, 0));
  // The neighbours, up to the byte, are free.
  ASSERT_CU(host_register(mapping, kChunk, 0));
  ASSERT_CU(host_register(mapping + 2 * kChunk, kChunk, 0));
  for (int i = 0; i < 3; ++i) ASSERT_CU(host_unregister(mapping + i * kChunk));
}

TEST_F(HostRegisterTest, AsyncCopiesOnANonBlockingStreamFillRegisteredChunks) {
  std::vector<uint32_t> source(4 * kChunk / 4);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint32_t>(i * 2654435761u);
  CUdeviceptr device = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&device, 4 * kChunk));
  ASSERT_CU(cu.cuMemcpyHtoD_v2(device, source.data(), 4 * kChunk));
  CUstream stream = nullptr;
  ASSERT_CU(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 4; ++i) {
    ASSERT_CU(host_register(mapping + i * kChunk, kChunk, CU_MEMHOSTREGISTER_PORTABLE));
    ASSERT_CU(cu.cuMemcpyDtoHAsync_v2(mapping + i * kChunk, device + i * kChunk, kChunk, stream));
  }
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(std::memcmp(mapping, source.data(), 4 * kChunk), 0);
  for (int i = 0; i < 4; ++i) ASSERT_CU(host_unregister(mapping + i * kChunk));
  ASSERT_CU(cu.cuStreamDestroy_v2(stream));
  ASSERT_CU(cu.cuMemFree_v2(device));
}

}  // namespace
}  // namespace fakecuda_test
