// Data really moves: copies in every direction round-trip, memsets write what they
// say, the fill and add kernels compute correct results (with arguments passed through
// kernelParams or an `extra` buffer), stream order holds, and a kernel that touches
// unallocated memory produces a sticky CUDA_ERROR_ILLEGAL_ADDRESS instead of a crash.
#include <numeric>
#include <vector>

#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

class DataTest : public FakeDeviceTest {};

TEST_F(DataTest, CopiesRoundTripInEveryDirection) {
  constexpr size_t kBytes = 1 << 20;
  std::vector<unsigned char> source(kBytes), back(kBytes);
  std::iota(source.begin(), source.end(), 0);
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&a, kBytes));
  ASSERT_CU(cu.cuMemAlloc_v2(&b, kBytes));
  ASSERT_CU(cu.cuMemcpyHtoD_v2(a, source.data(), kBytes));
  ASSERT_CU(cu.cuMemcpyDtoD_v2(b, a, kBytes));
  ASSERT_CU(cu.cuMemcpyDtoH_v2(back.data(), b, kBytes));
  EXPECT_EQ(back, source);
  ASSERT_CU(cu.cuMemFree_v2(a));
  ASSERT_CU(cu.cuMemFree_v2(b));
}

TEST_F(DataTest, AsyncCopiesFromPinnedAndPageableMemory) {
  constexpr size_t kCount = 1 << 16;
  CUstream stream = nullptr;
  ASSERT_CU(cu.cuStreamCreate(&stream, 0));
  CUdeviceptr device = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&device, kCount * 4));
  {
    std::vector<uint32_t> pageable(kCount, 42);
    ASSERT_CU(cu.cuMemcpyHtoDAsync_v2(device, pageable.data(), kCount * 4, stream));
  }  // the pageable source is gone: the driver must have staged it
  void* pinned = nullptr;
  ASSERT_CU(cu.cuMemAllocHost_v2(&pinned, kCount * 4));
  ASSERT_CU(cu.cuMemcpyDtoHAsync_v2(pinned, device, kCount * 4, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(static_cast<uint32_t*>(pinned)[kCount - 1], 42u);
  ASSERT_CU(cu.cuMemFreeHost(pinned));
  ASSERT_CU(cu.cuStreamDestroy_v2(stream));
}

TEST_F(DataTest, MemsetsAndTwoDimensionalCopies) {
  CUdeviceptr device = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&device, 4096));
  ASSERT_CU(cu.cuMemsetD8_v2(device, 0xab, 4096));
  ASSERT_CU(cu.cuMemsetD32_v2(device + 16, 0x01020304, 2));
  unsigned char host[32] = {};
  ASSERT_CU(cu.cuMemcpyDtoH_v2(host, device, sizeof host));
  EXPECT_EQ(host[0], 0xab);
  EXPECT_EQ(host[16], 0x04);
  EXPECT_EQ(host[23], 0x01);
  EXPECT_EQ(host[24], 0xab);

  unsigned char rows[4][8];
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 8; ++c) rows[r][c] = static_cast<unsigned char>(r * 10 + c);
  }
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy.srcHost = rows;
  copy.srcPitch = 8;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = device;
  copy.dstPitch = 256;
  copy.WidthInBytes = 6;
  copy.Height = 4;
  ASSERT_CU(cu.cuMemcpy2D_v2(&copy));
  unsigned char row3[8] = {};
  ASSERT_CU(cu.cuMemcpyDtoH_v2(row3, device + 3 * 256, sizeof row3));
  EXPECT_EQ(row3[5], 35);
  EXPECT_EQ(row3[6], 0xab);  // outside the copied width
  ASSERT_CU(cu.cuMemFree_v2(device));
}

TEST_F(DataTest, CopiesToUnknownDeviceMemoryAreRejected) {
  unsigned char host[16] = {};
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemcpyHtoD_v2(0x1000, host, sizeof host));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemcpyDtoH_v2(host, 0x1000, sizeof host));
  CUdeviceptr device = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&device, 8));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuMemcpyHtoD_v2(device, host, sizeof host));  // overruns
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemsetD32_v2(device, 0, 4));
  ASSERT_CU(cu.cuMemFree_v2(device));
}

TEST_F(DataTest, FillAndAddKernelsComputeCorrectResults) {
  constexpr uint64_t kCount = 10000;
  CUdeviceptr a = 0, b = 0, out = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&a, kCount * 4));
  ASSERT_CU(cu.cuMemAlloc_v2(&b, kCount * 4));
  ASSERT_CU(cu.cuMemAlloc_v2(&out, kCount * 4));
  std::vector<float> x(kCount), y(kCount), z(kCount);
  for (uint64_t i = 0; i < kCount; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 0.5f * static_cast<float>(i);
  }
  ASSERT_CU(cu.cuMemcpyHtoD_v2(a, x.data(), kCount * 4));
  ASSERT_CU(cu.cuMemcpyHtoD_v2(b, y.data(), kCount * 4));
  launch_add(nullptr, a, b, out, kCount);
  ASSERT_CU(cu.cuMemcpyDtoH_v2(z.data(), out, kCount * 4));  // ordered after the kernel
  for (uint64_t i = 0; i < kCount; i += 999) EXPECT_FLOAT_EQ(z[i], 1.5f * static_cast<float>(i));

  launch_fill(nullptr, out, 0xfeedu, kCount / 2);
  std::vector<uint32_t> filled(kCount);
  ASSERT_CU(cu.cuMemcpyDtoH_v2(filled.data(), out, kCount * 4));
  EXPECT_EQ(filled[0], 0xfeedu);
  EXPECT_EQ(filled[kCount / 2 - 1], 0xfeedu);
  EXPECT_NE(filled[kCount / 2], 0xfeedu);
}

TEST_F(DataTest, KernelArgumentsThroughExtraBufferAndLaunchKernelEx) {
  CUdeviceptr out = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&out, 64 * 4));
  struct {
    CUdeviceptr dst;
    uint32_t value;
    uint32_t padding;
    uint64_t count;
  } packed{out, 77, 0, 64};
  size_t size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CUfunction fill = kernel("fracgpu_fake_fill");
  ASSERT_CU(cu.cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra));
  uint32_t value = 0;
  ASSERT_CU(cu.cuMemcpyDtoH_v2(&value, out + 63 * 4, 4));
  EXPECT_EQ(value, 77u);

  uint32_t new_value = 88;
  uint64_t count = 64;
  void* params[] = {&out, &new_value, &count};
  CUlaunchAttribute cooperative{};
  cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  cooperative.value.cooperative = 1;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  ASSERT_CU(cu.cuLaunchKernelEx(&config, fill, params, nullptr));
  ASSERT_CU(cu.cuMemcpyDtoH_v2(&value, out, 4));
  EXPECT_EQ(value, 88u);
  EXPECT_CU_ERROR(
      CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
      cu.cuLaunchCooperativeKernel(fill, 1u << 20, 1, 1, 1024, 1, 1, 0, nullptr, params));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuLaunchKernel(fill, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
}

TEST_F(DataTest, KernelsFromLibrariesAndUnknownNames) {
  CUlibrary library = nullptr;
  ASSERT_CU(cu.cuLibraryLoadData(&library, "image", nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel spin = nullptr;
  ASSERT_CU(cu.cuLibraryGetKernel(&spin, library, "fracgpu_fake_spin"));
  CUfunction function = nullptr;
  ASSERT_CU(cu.cuKernelGetFunction(&function, spin));
  uint32_t microseconds = 10;
  void* params[] = {&microseconds};
  ASSERT_CU(cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  ASSERT_CU(cu.cuCtxSynchronize());
  CUfunction missing = nullptr;
  CUfunction from_module = kernel("fracgpu_fake_spin");  // loads `module`
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_FOUND, cu.cuModuleGetFunction(&missing, module, "no_such_kernel"));
  ASSERT_CU(cu.cuModuleUnload(module));
  module = nullptr;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_HANDLE,
                  cu.cuLaunchKernel(from_module, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
}

TEST_F(DataTest, OutOfBoundsKernelGivesStickyIllegalAddress) {
  CUdeviceptr small = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&small, 16));
  launch_fill(nullptr, small, 1, 1000);  // 4000 bytes into a 16-byte allocation
  EXPECT_CU_ERROR(CUDA_ERROR_ILLEGAL_ADDRESS, cu.cuCtxSynchronize());
  EXPECT_CU_ERROR(CUDA_ERROR_ILLEGAL_ADDRESS, cu.cuStreamSynchronize(nullptr));
}

void record_order(void* user_data) {
  static_cast<std::vector<int>*>(user_data)->push_back(1);
}

TEST_F(DataTest, StreamWorkRunsInOrderAndEventsReportProgress) {
  CUstream stream = nullptr;
  ASSERT_CU(cu.cuStreamCreate(&stream, 0));
  CUevent done = nullptr;
  ASSERT_CU(cu.cuEventCreate(&done, 0));
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuEventQuery(done));  // never recorded
  std::vector<int> order;
  launch_spin(stream, 30000);
  ASSERT_CU(cu.cuLaunchHostFunc(stream, record_order, &order));
  ASSERT_CU(cu.cuEventRecord(done, stream));
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_READY, cu.cuStreamQuery(stream));
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_READY, cu.cuEventQuery(done));
  EXPECT_TRUE(order.empty());
  ASSERT_CU(cu.cuEventSynchronize(done));
  EXPECT_EQ(order.size(), 1u);
  ASSERT_CU(cu.cuStreamQuery(stream));
  float ms = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_HANDLE,
                  cu.cuEventElapsedTime_v2(&ms, done, reinterpret_cast<CUevent>(&ms)));
  ASSERT_CU(cu.cuEventDestroy_v2(done));
  ASSERT_CU(cu.cuStreamDestroy_v2(stream));
}

TEST_F(DataTest, StreamWaitsForAnEventOfAnotherContext) {
  CUcontext other = nullptr;
  ASSERT_CU(cu.cuCtxCreate_v4(&other, nullptr, 0, 0));
  CUevent produced = nullptr;
  ASSERT_CU(cu.cuEventCreate(&produced, CU_EVENT_DISABLE_TIMING));
  launch_spin(nullptr, 30000);  // 30 ms in `other`
  ASSERT_CU(cu.cuEventRecord(produced, nullptr));
  ASSERT_CU(cu.cuCtxSetCurrent(context));
  CUdeviceptr flag = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&flag, 4));
  ASSERT_CU(cu.cuMemsetD32_v2(flag, 0, 1));
  CUstream stream = nullptr;
  ASSERT_CU(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cu.cuStreamWaitEvent(stream, produced, 0));
  ASSERT_CU(cu.cuMemsetD32Async(flag, 1, 1, stream));
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_READY, cu.cuEventQuery(produced));
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_READY, cu.cuStreamQuery(stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuEventQuery(produced));  // the wait really waited
  uint32_t value = 0;
  ASSERT_CU(cu.cuMemcpyDtoH_v2(&value, flag, 4));
  EXPECT_EQ(value, 1u);
  ASSERT_CU(cu.cuStreamDestroy_v2(stream));
  ASSERT_CU(cu.cuEventDestroy_v2(produced));
  ASSERT_CU(cu.cuCtxDestroy_v2(other));
}

}  // namespace
}  // namespace fakecuda_test
