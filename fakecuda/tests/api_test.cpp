// Driver-API conformance that does not fit elsewhere: initialisation and context
// errors, the context stack, device queries, error names, invalid handles and NULL
// arguments (errors, never crashes), several devices, configuration parsing and the
// fakecuda-ctl commands.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class ApiTest : public FakeDeviceTest {};

TEST_F(ApiTest, CallsBeforeCuInitFail) {
  cu.fakecuda_shutdown();
  CUdeviceptr pointer = 0;
  CUcontext current = nullptr;
  int count = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_INITIALIZED, cu.cuMemAlloc_v2(&pointer, 16));
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_INITIALIZED, cu.cuCtxGetCurrent(&current));
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_INITIALIZED, cu.cuDeviceGetCount(&count));
  int version = 0;
  ASSERT_CU(cu.cuDriverGetVersion(&version));  // works before cuInit, as on the real driver
  EXPECT_EQ(version, 13000);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuInit(1));
}

TEST_F(ApiTest, NoCurrentContextGivesInvalidContext) {
  ASSERT_CU(cu.cuCtxSetCurrent(nullptr));
  CUcontext current = reinterpret_cast<CUcontext>(1);
  ASSERT_CU(cu.cuCtxGetCurrent(&current));
  EXPECT_EQ(current, nullptr);
  CUdeviceptr pointer = 0;
  CUstream stream = nullptr;
  CUdevice device = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuMemAlloc_v2(&pointer, 16));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuStreamCreate(&stream, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuCtxGetDevice(&device));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuCtxSynchronize());
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuStreamSynchronize(nullptr));
}

TEST_F(ApiTest, ContextStackPushPopAndDestroy) {
  CUcontext created = nullptr, current = nullptr, popped = nullptr;
  ASSERT_CU(cu.cuCtxCreate_v4(&created, nullptr, 0, 0));
  ASSERT_CU(cu.cuCtxGetCurrent(&current));
  EXPECT_EQ(current, created);
  ASSERT_CU(cu.cuCtxPopCurrent_v2(&popped));
  EXPECT_EQ(popped, created);
  ASSERT_CU(cu.cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context);
  ASSERT_CU(cu.cuCtxPushCurrent_v2(created));
  ASSERT_CU(cu.cuCtxDestroy_v2(created));  // pops itself
  ASSERT_CU(cu.cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuCtxPushCurrent_v2(created));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuCtxDestroy_v2(created));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT,
                  cu.cuCtxSetCurrent(reinterpret_cast<CUcontext>(0x1234)));
}

// Every cuCtxCreate ABI and the 32-bit v1 memory ABIs, called through their exported names.
TEST_F(ApiTest, OlderAbisStillWork) {
  auto create_v1 = reinterpret_cast<PFN_cuCtxCreate_v2000>(cu.symbol("cuCtxCreate"));
  auto create_v2 = reinterpret_cast<PFN_cuCtxCreate_v3020>(cu.symbol("cuCtxCreate_v2"));
  auto create_v3 = reinterpret_cast<PFN_cuCtxCreate_v11040>(cu.symbol("cuCtxCreate_v3"));
  ASSERT_TRUE(create_v1 && create_v2 && create_v3);
  CUcontext contexts[4] = {};
  ASSERT_CU(create_v1(&contexts[0], 0, 0));
  ASSERT_CU(create_v2(&contexts[1], 0, 0));
  ASSERT_CU(create_v3(&contexts[2], nullptr, 0, 0, 0));
  CUctxCreateParams params{};
  ASSERT_CU(cu.cuCtxCreate_v4(&contexts[3], &params, 0, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_DEVICE, cu.cuCtxCreate_v4(&contexts[3], nullptr, 0, 7));
  for (CUcontext created : contexts) ASSERT_CU(cu.cuCtxDestroy_v2(created));
  ASSERT_CU(cu.cuCtxSetCurrent(context));

  auto alloc_v1 = reinterpret_cast<PFN_cuMemAlloc_v2000>(cu.symbol("cuMemAlloc"));
  auto htod_v1 = reinterpret_cast<PFN_cuMemcpyHtoD_v2000>(cu.symbol("cuMemcpyHtoD"));
  auto dtoh_v1 = reinterpret_cast<PFN_cuMemcpyDtoH_v2000>(cu.symbol("cuMemcpyDtoH"));
  auto free_v1 = reinterpret_cast<PFN_cuMemFree_v2000>(cu.symbol("cuMemFree"));
  ASSERT_TRUE(alloc_v1 && htod_v1 && dtoh_v1 && free_v1);
  CUdeviceptr_v1 small = 0;
  ASSERT_CU(alloc_v1(&small, 4096));  // a 32-bit device pointer
  uint32_t value = 0x5eed, back = 0;
  ASSERT_CU(htod_v1(small, &value, sizeof value));
  ASSERT_CU(dtoh_v1(&back, small, sizeof back));
  EXPECT_EQ(back, value);
  ASSERT_CU(free_v1(small));
}

TEST_F(ApiTest, PrimaryContextIsReferenceCounted) {
  CUcontext again = nullptr;
  ASSERT_CU(cu.cuDevicePrimaryCtxRetain(&again, 0));
  EXPECT_EQ(again, context);
  unsigned flags = 0;
  int active = 0;
  ASSERT_CU(cu.cuDevicePrimaryCtxRelease_v2(0));
  ASSERT_CU(cu.cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT_EQ(active, 1);
  ASSERT_CU(cu.cuDevicePrimaryCtxRelease_v2(0));
  ASSERT_CU(cu.cuDevicePrimaryCtxGetState(0, &flags, &active));
  EXPECT_EQ(active, 0);
  EXPECT_EQ(device_status().used, 0u);  // the footprint went with the context
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuDevicePrimaryCtxRelease_v2(0));
}

TEST_F(ApiTest, DeviceQueriesDescribeAnH200LikeGpu) {
  int count = 0;
  ASSERT_CU(cu.cuDeviceGetCount(&count));
  EXPECT_EQ(count, 1);
  char name[64] = {};
  ASSERT_CU(cu.cuDeviceGetName(name, sizeof name, 0));
  EXPECT_STREQ(name, "fracgpu simulated GPU");
  auto attribute = [&](CUdevice_attribute which) {
    int value = -1;
    EXPECT_EQ(cu.cuDeviceGetAttribute(&value, which, 0), CUDA_SUCCESS);
    return value;
  };
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH), 1);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING), 1);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED), 1);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), 1);
  EXPECT_EQ(attribute(CU_DEVICE_ATTRIBUTE_TCC_DRIVER), 0);
  int value = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_DEVICE,
                  cu.cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1));
  CUuuid first{}, second{};
  ASSERT_CU(cu.cuDeviceGetUuid_v2(&first, 0));
  ASSERT_CU(cu.cuDeviceGetUuid_v2(&second, 0));
  EXPECT_EQ(std::memcmp(first.bytes, second.bytes, sizeof first.bytes), 0);
  char bus_id[32] = {};
  ASSERT_CU(cu.cuDeviceGetPCIBusId(bus_id, sizeof bus_id, 0));
  CUdevice device = -1;
  ASSERT_CU(cu.cuDeviceGetByPCIBusId(&device, bus_id));
  EXPECT_EQ(device, 0);
}

TEST_F(ApiTest, ErrorNamesAndStringsAreTheRealOnes) {
  const char* text = nullptr;
  ASSERT_CU(cu.cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text));
  EXPECT_STREQ(text, "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_CU(cu.cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text));
  EXPECT_STREQ(text, "out of memory");
  ASSERT_CU(cu.cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, &text));
  EXPECT_STREQ(text, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuGetErrorName(static_cast<CUresult>(12345), &text));
  const void* table = nullptr;
  CUuuid id{};
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_SUPPORTED, cu.cuGetExportTable(&table, &id));
}

TEST_F(ApiTest, InvalidHandlesAndNullArgumentsNeverCrash) {
  int garbage = 0;
  auto stream = reinterpret_cast<CUstream>(&garbage);
  auto event = reinterpret_cast<CUevent>(&garbage);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_HANDLE, cu.cuStreamSynchronize(stream));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_HANDLE, cu.cuStreamDestroy_v2(stream));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_HANDLE, cu.cuEventRecord(event, nullptr));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_HANDLE, cu.cuEventSynchronize(event));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_HANDLE,
                  cu.cuModuleUnload(reinterpret_cast<CUmodule>(&garbage)));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuGraphLaunch(reinterpret_cast<CUgraphExec>(&garbage), nullptr));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuStreamCreate(nullptr, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuEventCreate(nullptr, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuCtxGetCurrent(nullptr));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuDeviceGetName(nullptr, 10, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuModuleLoadData(nullptr, "x"));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuEventElapsedTime_v2(nullptr, event, event));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemcpyHtoD_v2(0, nullptr, 16));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuPointerGetAttribute(nullptr, CU_POINTER_ATTRIBUTE_CONTEXT, 0));
  EXPECT_CU_ERROR(
      CUDA_ERROR_INVALID_VALUE,
      cu.cuStreamGetCaptureInfo_v3(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr));
}

class TwoDeviceTest : public FakeDeviceTest {
 protected:
  TestDeviceConfig device_config() const override {
    TestDeviceConfig config;
    config.device_count = "2";
    config.memory = "512MiB";
    return config;
  }
};

TEST_F(TwoDeviceTest, EachDeviceHasItsOwnMemory) {
  int count = 0;
  ASSERT_CU(cu.cuDeviceGetCount(&count));
  ASSERT_EQ(count, 2);
  CUcontext second = nullptr;
  ASSERT_CU(cu.cuDevicePrimaryCtxRetain(&second, 1));
  ASSERT_CU(cu.cuCtxSetCurrent(second));
  CUdeviceptr pointer = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&pointer, 100 * kMiB));
  std::string json = ctl("status");
  EXPECT_EQ(parse_device_status(json, 0).used, 64 * kMiB);
  EXPECT_EQ(parse_device_status(json, 1).used, 164 * kMiB);
  EXPECT_EQ(parse_device_status(json, 1).capacity, 512 * kMiB);
  ASSERT_CU(cu.cuDevicePrimaryCtxRelease_v2(1));
}

TEST(ConfigTest, BadValuesFallBackToDefaultsWithOneLine) {
  std::string name = "/fakecuda-test-config-" + std::to_string(getpid());
  setenv("FAKECUDA_SHM_NAME", name.c_str(), 1);
  setenv("FAKECUDA_MEMORY", "12 GiB", 1);
  setenv("FAKECUDA_DEVICE_COUNT", "9", 1);
  DriverApi& cu = driver_api();
  testing::internal::CaptureStderr();
  ASSERT_CU(cu.cuInit(0));
  std::string errors = testing::internal::GetCapturedStderr();
  EXPECT_NE(errors.find("FAKECUDA_MEMORY=\"12 GiB\""), std::string::npos) << errors;
  EXPECT_NE(errors.find("FAKECUDA_DEVICE_COUNT=\"9\""), std::string::npos) << errors;
  size_t total = 0;
  ASSERT_CU(cu.cuDeviceTotalMem_v2(&total, 0));
  EXPECT_EQ(total, 16ull << 30);
  int count = 0;
  ASSERT_CU(cu.cuDeviceGetCount(&count));
  EXPECT_EQ(count, 1);
  cu.fakecuda_shutdown();
  shm_unlink(name.c_str());
  unsetenv("FAKECUDA_SHM_NAME");
  unsetenv("FAKECUDA_MEMORY");
  unsetenv("FAKECUDA_DEVICE_COUNT");
}

TEST_F(ApiTest, CtlStatusResetPeakAndDestroy) {
  std::string json = ctl("status");
  EXPECT_NE(json.find("\"shm_name\": \"" + shm_name + "\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"timeslice_us\": 2000"), std::string::npos);
  EXPECT_NE(json.find("\"context_footprint_bytes\": 67108864"), std::string::npos);
  int status = -1;
  ctl("reset-peak", &status);
  EXPECT_EQ(status, 0);
  ctl("bogus", &status);
  EXPECT_EQ(status, 2);
  ctl("destroy", &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(shm_open(shm_name.c_str(), O_RDWR, 0), -1);
  ctl("destroy", &status);
  EXPECT_EQ(status, 1);
}

}  // namespace
}  // namespace fakecuda_test
