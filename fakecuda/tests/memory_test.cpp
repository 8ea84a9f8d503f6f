// Device-memory behaviour of the simulated GPU: real out-of-memory at capacity,
// cuMemGetInfo, context footprints, which allocation kinds are charged (device,
// managed, pitched, VMM, arrays, stream-ordered) and which are not (pinned host), and
// the peak-used mark kept in the shared segment.
#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

class MemoryTest : public FakeDeviceTest {};

TEST_F(MemoryTest, ReportsCapacityAndContextFootprint) {
  size_t free = 0, total = 0;
  ASSERT_CU(cu.cuMemGetInfo_v2(&free, &total));
  EXPECT_EQ(total, kGiB);
  EXPECT_EQ(free, kGiB - 64 * kMiB);  // the primary context's footprint
  size_t device_total = 0;
  ASSERT_CU(cu.cuDeviceTotalMem_v2(&device_total, 0));
  EXPECT_EQ(device_total, kGiB);
}

TEST_F(MemoryTest, OutOfMemoryExactlyAtCapacity) {
  uint64_t available = free_bytes();
  CUdeviceptr all = 0, one = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&all, available));
  EXPECT_EQ(free_bytes(), 0u);
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, cu.cuMemAlloc_v2(&one, 1));
  ASSERT_CU(cu.cuMemFree_v2(all));
  ASSERT_CU(cu.cuMemAlloc_v2(&one, 1));
  EXPECT_EQ(free_bytes(), available - 1);
  ASSERT_CU(cu.cuMemFree_v2(one));
}

TEST_F(MemoryTest, HugeRequestFailsWithoutTouchingTheCounters) {
  uint64_t before = free_bytes();
  CUdeviceptr pointer = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, cu.cuMemAlloc_v2(&pointer, 2 * kGiB));
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, cu.cuMemAlloc_v2(&pointer, ~size_t{0}));
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(MemoryTest, AllocationIsRealMemoryAndAddressRangeIsKnown) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&pointer, 3 * kMiB));
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_CU(cu.cuMemGetAddressRange_v2(&base, &size, pointer + 12345));
  EXPECT_EQ(base, pointer);
  EXPECT_EQ(size, 3 * kMiB);
  unsigned memory_type = 0;
  ASSERT_CU(cu.cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer));
  EXPECT_EQ(memory_type, CU_MEMORYTYPE_DEVICE);
  ASSERT_CU(cu.cuMemFree_v2(pointer));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemFree_v2(pointer));  // double free
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_FOUND, cu.cuMemGetAddressRange_v2(&base, &size, pointer));
}

TEST_F(MemoryTest, ZeroSizeAndNullArgumentsAreRejected) {
  CUdeviceptr pointer = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemAlloc_v2(&pointer, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemAlloc_v2(nullptr, 16));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemGetInfo_v2(nullptr, nullptr));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemFree_v2(0xdead0000));
}

TEST_F(MemoryTest, ManagedAndPitchedMemoryAreCharged) {
  uint64_t before = free_bytes();
  CUdeviceptr managed = 0, pitched = 0;
  size_t pitch = 0;
  ASSERT_CU(cu.cuMemAllocManaged(&managed, 10 * kMiB, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(cu.cuMemAllocPitch_v2(&pitched, &pitch, 1000, 100, 4));
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(free_bytes(), before - 10 * kMiB - 1024 * 100);
  ASSERT_CU(cu.cuMemFree_v2(managed));
  ASSERT_CU(cu.cuMemFree_v2(pitched));
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(MemoryTest, PinnedHostMemoryIsNotCharged) {
  uint64_t before = free_bytes();
  void* host = nullptr;
  ASSERT_CU(cu.cuMemAllocHost_v2(&host, 64 * kMiB));
  static_cast<char*>(host)[0] = 1;
  EXPECT_EQ(free_bytes(), before);
  unsigned memory_type = 0;
  ASSERT_CU(cu.cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                     reinterpret_cast<CUdeviceptr>(host)));
  EXPECT_EQ(memory_type, CU_MEMORYTYPE_HOST);
  ASSERT_CU(cu.cuMemFreeHost(host));
}

TEST_F(MemoryTest, EachContextChargesItsFootprint) {
  uint64_t before = free_bytes();
  CUcontext extra = nullptr;
  ASSERT_CU(cu.cuCtxCreate_v4(&extra, nullptr, 0, 0));
  EXPECT_EQ(free_bytes(), before - 64 * kMiB);
  CUdeviceptr pointer = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&pointer, 8 * kMiB));  // owned by `extra`
  ASSERT_CU(cu.cuCtxDestroy_v2(extra));             // frees the context and its memory
  ASSERT_CU(cu.cuCtxSetCurrent(context));
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(MemoryTest, VirtualMemoryIsChargedAtCreateAndSharesData) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  ASSERT_CU(
      cu.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  ASSERT_EQ(granularity, 2 * kMiB);
  uint64_t before = free_bytes();
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_CU(cu.cuMemCreate(&handle, 4 * kMiB, &prop, 0));
  EXPECT_EQ(free_bytes(), before - 4 * kMiB);
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cu.cuMemAddressReserve(&a, 4 * kMiB, 0, 0, 0));
  ASSERT_CU(cu.cuMemAddressReserve(&b, 4 * kMiB, 0, 0, 0));
  ASSERT_CU(cu.cuMemMap(a, 4 * kMiB, 0, handle, 0));
  ASSERT_CU(cu.cuMemMap(b, 4 * kMiB, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_CU(cu.cuMemSetAccess(a, 4 * kMiB, &access, 1));
  ASSERT_CU(cu.cuMemsetD32_v2(a, 0xabcdef01, 1024));
  uint32_t seen = 0;
  ASSERT_CU(cu.cuMemcpyDtoH_v2(&seen, b + 4 * 1023, sizeof seen));  // same physical memory
  EXPECT_EQ(seen, 0xabcdef01u);
  ASSERT_CU(cu.cuMemRelease(handle));
  EXPECT_EQ(free_bytes(), before - 4 * kMiB);  // still mapped
  ASSERT_CU(cu.cuMemUnmap(a, 4 * kMiB));
  ASSERT_CU(cu.cuMemUnmap(b, 4 * kMiB));
  EXPECT_EQ(free_bytes(), before);
  ASSERT_CU(cu.cuMemAddressFree(a, 4 * kMiB));
  ASSERT_CU(cu.cuMemAddressFree(b, 4 * kMiB));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuMemCreate(&handle, 3 * kMiB, &prop, 0));  // not granular
}

TEST_F(MemoryTest, ArraysAreChargedByTheirSize) {
  uint64_t before = free_bytes();
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = 1024;
  desc.Height = 256;
  desc.Depth = 4;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 2;
  CUarray array = nullptr;
  ASSERT_CU(cu.cuArray3DCreate_v2(&array, &desc));
  EXPECT_EQ(free_bytes(), before - 1024 * 256 * 4 * 4 * 2);
  ASSERT_CU(cu.cuArrayDestroy(array));
  EXPECT_EQ(free_bytes(), before);
  desc.Depth = 0;
  CUmipmappedArray mipmap = nullptr;
  ASSERT_CU(cu.cuMipmappedArrayCreate(&mipmap, &desc, 3));  // 1024x256 + 512x128 + 256x64
  EXPECT_EQ(free_bytes(), before - (1024 * 256 + 512 * 128 + 256 * 64) * 8);
  ASSERT_CU(cu.cuMipmappedArrayDestroy(mipmap));
  EXPECT_EQ(free_bytes(), before);
}

TEST_F(MemoryTest, StreamOrderedAllocationFreesWhenTheStreamGetsThere) {
  CUstream stream = nullptr;
  ASSERT_CU(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  uint64_t before = free_bytes();
  CUdeviceptr pointer = 0;
  ASSERT_CU(cu.cuMemAllocAsync(&pointer, 32 * kMiB, stream));
  EXPECT_EQ(free_bytes(), before - 32 * kMiB);
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cu.cuDeviceGetDefaultMemPool(&pool, 0));
  uint64_t pool_used = 0;
  ASSERT_CU(cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &pool_used));
  EXPECT_EQ(pool_used, 32 * kMiB);
  launch_spin(stream, 20000);  // the free must wait for this
  ASSERT_CU(cu.cuMemFreeAsync(pointer, stream));
  EXPECT_EQ(free_bytes(), before - 32 * kMiB);
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(free_bytes(), before);
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, cu.cuMemAllocAsync(&pointer, 2 * kGiB, stream));
  ASSERT_CU(cu.cuStreamDestroy_v2(stream));
}

TEST_F(MemoryTest, ExplicitPoolsAllocateOnTheirDeviceAndKeepAttributes) {
  auto pool_create = reinterpret_cast<PFN_cuMemPoolCreate_v11020>(cu.symbol("cuMemPoolCreate"));
  auto pool_destroy = reinterpret_cast<PFN_cuMemPoolDestroy_v11020>(cu.symbol("cuMemPoolDestroy"));
  auto pool_set =
      reinterpret_cast<PFN_cuMemPoolSetAttribute_v11020>(cu.symbol("cuMemPoolSetAttribute"));
  auto from_pool =
      reinterpret_cast<PFN_cuMemAllocFromPoolAsync_v11020>(cu.symbol("cuMemAllocFromPoolAsync"));
  auto trim = reinterpret_cast<PFN_cuMemPoolTrimTo_v11020>(cu.symbol("cuMemPoolTrimTo"));
  ASSERT_TRUE(pool_create && pool_destroy && pool_set && from_pool && trim);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  ASSERT_CU(pool_create(&pool, &props));
  uint64_t threshold = 64 * kMiB, read_back = 0;
  ASSERT_CU(pool_set(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  ASSERT_CU(cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &read_back));
  EXPECT_EQ(read_back, threshold);
  uint64_t before = free_bytes();
  CUdeviceptr pointer = 0;
  ASSERT_CU(from_pool(&pointer, 8 * kMiB, pool, nullptr));
  EXPECT_EQ(free_bytes(), before - 8 * kMiB);
  ASSERT_CU(cu.cuMemFreeAsync(pointer, nullptr));
  ASSERT_CU(cu.cuCtxSynchronize());
  ASSERT_CU(trim(pool, 0));
  EXPECT_EQ(free_bytes(), before);  // nothing is cached by a pool
  ASSERT_CU(pool_destroy(pool));
  CUmemoryPool default_pool = nullptr;
  ASSERT_CU(cu.cuDeviceGetDefaultMemPool(&default_pool, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, pool_destroy(default_pool));
}

TEST_F(MemoryTest, PeakUsedIsTrackedAndCanBeReset) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&pointer, 100 * kMiB));
  ASSERT_CU(cu.cuMemFree_v2(pointer));
  DeviceStatus status = device_status();
  EXPECT_EQ(status.capacity, kGiB);
  EXPECT_EQ(status.used, 64 * kMiB);
  EXPECT_EQ(status.peak, 164 * kMiB);
  ctl("reset-peak");
  EXPECT_EQ(device_status().peak, 64 * kMiB);
}

}  // namespace
}  // namespace fakecuda_test
