// The simulated NVML (nvml/fake_nvml.cpp) against the simulated driver it reports on:
// device count, handles and UUIDs equal to the CUDA driver's, memory, the per-process
// list with its infoCount protocol (NVML_ERROR_INSUFFICIENT_SIZE), dead processes swept.
// The library is dlopen'ed by path, the way the broker's audit opens it (--nvml PATH).
#include <dlfcn.h>

#include <algorithm>
#include <vector>

#include "child_process.h"
#include "fake_device_test.h"
#include "fracgpu/gpu_uuid.h"
#include "fracgpu/nvml_types.h"

namespace fakecuda_test {
namespace {

namespace nvml = fracgpu::nvml;

constexpr uint64_t kMiB = 1ull << 20;

struct NvmlApi {
  nvml::InitFn init = nullptr;
  nvml::InitFn shutdown = nullptr;
  nvml::GetCountFn count = nullptr;
  nvml::GetHandleByIndexFn handle = nullptr;
  nvml::GetUuidFn uuid = nullptr;
  nvml::GetMemoryInfoFn memory = nullptr;
  nvml::GetRunningProcessesFn compute_v3 = nullptr;
  nvml::GetRunningProcessesFn compute_v2 = nullptr;
  nvml::GetRunningProcessesFn graphics_v3 = nullptr;
  nvml::Return (*compute_v1)(nvml::Device, unsigned int*, nvml::ProcessInfoV1*) = nullptr;
};

template <typename Fn>
void resolve(void* lib, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(lib, name));
  ASSERT_NE(out, nullptr) << name;
}

class FakeNvml : public FakeDeviceTest {
 protected:
  TestDeviceConfig device_config() const override {
    TestDeviceConfig c;
    c.memory = "2GiB";
    c.device_count = "2";
    return c;
  }
  void SetUp() override {
    FakeDeviceTest::SetUp();
    lib_ = dlopen(FAKENVML_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    resolve(lib_, "nvmlInit_v2", api.init);
    resolve(lib_, "nvmlShutdown", api.shutdown);
    resolve(lib_, "nvmlDeviceGetCount_v2", api.count);
    resolve(lib_, "nvmlDeviceGetHandleByIndex_v2", api.handle);
    resolve(lib_, "nvmlDeviceGetUUID", api.uuid);
    resolve(lib_, "nvmlDeviceGetMemoryInfo", api.memory);
    resolve(lib_, "nvmlDeviceGetComputeRunningProcesses_v3", api.compute_v3);
    resolve(lib_, "nvmlDeviceGetComputeRunningProcesses_v2", api.compute_v2);
    resolve(lib_, "nvmlDeviceGetGraphicsRunningProcesses_v3", api.graphics_v3);
    resolve(lib_, "nvmlDeviceGetComputeRunningProcesses", api.compute_v1);
    ASSERT_EQ(api.init(), nvml::kSuccess);
  }
  void TearDown() override {
    if (api.shutdown != nullptr) api.shutdown();
    if (lib_ != nullptr) dlclose(lib_);
    FakeDeviceTest::TearDown();
  }

  nvml::Device device(unsigned int index) {
    nvml::Device d = nullptr;
    EXPECT_EQ(api.handle(index, &d), nvml::kSuccess);
    return d;
  }

  // The full list, grown until it fits (the protocol a monitoring tool follows).
  std::vector<nvml::ProcessInfo> processes(nvml::Device d) {
    unsigned int count = 0;
    nvml::Return r = api.compute_v3(d, &count, nullptr);
    std::vector<nvml::ProcessInfo> infos;
    while (r == nvml::kErrorInsufficientSize) {
      infos.resize(count);
      r = api.compute_v3(d, &count, infos.data());
    }
    EXPECT_EQ(r, nvml::kSuccess);
    infos.resize(count);
    return infos;
  }

  static const nvml::ProcessInfo* find(const std::vector<nvml::ProcessInfo>& list, int pid) {
    auto it = std::find_if(list.begin(), list.end(), [&](const nvml::ProcessInfo& p) {
      return static_cast<int>(p.pid) == pid;
    });
    return it == list.end() ? nullptr : &*it;
  }

  NvmlApi api;
  void* lib_ = nullptr;
};

TEST_F(FakeNvml, ReportsEverySimulatedDeviceWithTheDriversUuid) {
  unsigned int count = 0;
  ASSERT_EQ(api.count(&count), nvml::kSuccess);
  EXPECT_EQ(count, 2u);
  for (unsigned int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    ASSERT_CU(cu.cuDeviceGet(&dev, static_cast<int>(i)));
    CUuuid uuid{};
    ASSERT_CU(cu.cuDeviceGetUuid_v2(&uuid, dev));
    char text[nvml::kUuidBufferSize] = {};
    ASSERT_EQ(api.uuid(device(i), text, sizeof text), nvml::kSuccess);
    EXPECT_EQ(std::string(text), fracgpu::format_gpu_uuid(uuid.bytes)) << "device " << i;
    nvml::Memory m{};
    ASSERT_EQ(api.memory(device(i), &m), nvml::kSuccess);
    EXPECT_EQ(m.total, 2048 * kMiB);
    EXPECT_EQ(m.used, device_status(static_cast<int>(i)).used);
    EXPECT_EQ(m.free + m.used, m.total);
  }
  nvml::Device none = nullptr;
  EXPECT_EQ(api.handle(2, &none), nvml::kErrorInvalidArgument);
  char small[8];
  EXPECT_EQ(api.uuid(device(0), small, sizeof small), nvml::kErrorInsufficientSize);
}

TEST_F(FakeNvml, ListsEachProcessWithTheMemoryItHolds) {
  CUdeviceptr mine = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&mine, 100 * kMiB));
  ChildProcess child({child_program(), "hold", std::to_string(300 * kMiB)});
  ASSERT_EQ(child.read_line(), "ready");

  auto list = processes(device(0));
  ASSERT_EQ(list.size(), 2u);
  const nvml::ProcessInfo* self = find(list, getpid());
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->usedGpuMemory, 64 * kMiB + 100 * kMiB);  // context footprint + allocation
  EXPECT_EQ(self->gpuInstanceId, 0xFFFFFFFFu);
  const nvml::ProcessInfo* other = find(list, child.pid());
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->usedGpuMemory, 64 * kMiB + 300 * kMiB);
  nvml::Memory m{};
  ASSERT_EQ(api.memory(device(0), &m), nvml::kSuccess);
  EXPECT_EQ(m.used, self->usedGpuMemory + other->usedGpuMemory);

  // Nothing on device 1: success with an empty list, even without a buffer.
  unsigned int count = 0;
  EXPECT_EQ(api.compute_v3(device(1), &count, nullptr), nvml::kSuccess);
  EXPECT_EQ(count, 0u);
  // The v2 and v1 ABIs list the same processes; graphics lists none.
  std::vector<nvml::ProcessInfo> v2(4);
  count = 4;
  ASSERT_EQ(api.compute_v2(device(0), &count, v2.data()), nvml::kSuccess);
  EXPECT_EQ(count, 2u);
  std::vector<nvml::ProcessInfoV1> v1(4);
  count = 4;
  ASSERT_EQ(api.compute_v1(device(0), &count, v1.data()), nvml::kSuccess);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(v1[0].usedGpuMemory + v1[1].usedGpuMemory, m.used);
  count = 4;
  EXPECT_EQ(api.graphics_v3(device(0), &count, v2.data()), nvml::kSuccess);
  EXPECT_EQ(count, 0u);
  ASSERT_CU(cu.cuMemFree_v2(mine));
}

TEST_F(FakeNvml, TooSmallABufferGetsInsufficientSizeAndTheCountNeeded) {
  ChildProcess child({child_program(), "hold", std::to_string(10 * kMiB)});
  ASSERT_EQ(child.read_line(), "ready");
  unsigned int count = 0;
  EXPECT_EQ(api.compute_v3(device(0), &count, nullptr), nvml::kErrorInsufficientSize);
  EXPECT_EQ(count, 2u) << "this process and the child";
  nvml::ProcessInfo one[1] = {};
  count = 1;
  EXPECT_EQ(api.compute_v3(device(0), &count, one), nvml::kErrorInsufficientSize);
  EXPECT_EQ(count, 2u);
  nvml::ProcessInfo two[2] = {};
  count = 2;
  EXPECT_EQ(api.compute_v3(device(0), &count, two), nvml::kSuccess);
  EXPECT_EQ(count, 2u);
  count = 2;
  EXPECT_EQ(api.compute_v3(device(0), &count, nullptr), nvml::kErrorInvalidArgument);
  EXPECT_EQ(api.compute_v3(device(0), nullptr, two), nvml::kErrorInvalidArgument);
  EXPECT_EQ(api.compute_v3(reinterpret_cast<nvml::Device>(&count), &count, two),
            nvml::kErrorInvalidArgument);
}

TEST_F(FakeNvml, AKilledProcessLeavesTheListAndItsMemoryIsFree) {
  ChildProcess child({child_program(), "hold", std::to_string(500 * kMiB)});
  ASSERT_EQ(child.read_line(), "ready");
  const int pid = child.pid();
  ASSERT_NE(find(processes(device(0)), pid), nullptr);
  child.kill_hard();
  child.wait();
  EXPECT_EQ(find(processes(device(0)), pid), nullptr);
  nvml::Memory m{};
  ASSERT_EQ(api.memory(device(0), &m), nvml::kSuccess);
  EXPECT_EQ(m.used, 64 * kMiB) << "only this process's context is left";
}

TEST_F(FakeNvml, CallsBeforeInitAreRefused) {
  ASSERT_EQ(api.shutdown(), nvml::kSuccess);
  unsigned int count = 0;
  EXPECT_EQ(api.count(&count), nvml::kErrorUninitialized);
  nvml::Device d = nullptr;
  EXPECT_EQ(api.handle(0, &d), nvml::kErrorUninitialized);
  ASSERT_EQ(api.init(), nvml::kSuccess);
  EXPECT_EQ(api.count(&count), nvml::kSuccess);
}

}  // namespace
}  // namespace fakecuda_test
