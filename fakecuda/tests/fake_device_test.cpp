// The per-test simulated device (see fake_device_test.h).
#include "fake_device_test.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "child_process.h"

namespace fakecuda_test {
namespace {

const char kImage[] = "not a real cubin";

std::atomic<int> g_test_counter{0};

std::string unique_segment_name() {
  return "/fakecuda-test-" + std::to_string(getpid()) + "-" +
         std::to_string(g_test_counter.fetch_add(1));
}

uint64_t number_after(const std::string& json, const std::string& key, size_t from = 0) {
  size_t at = json.find("\"" + key + "\": ", from);
  if (at == std::string::npos) return 0;
  return std::strtoull(json.c_str() + at + key.size() + 4, nullptr, 10);
}

// The text of device object `index` ("{"index": N, ... ]}").
std::string device_object(const std::string& json, int index) {
  size_t begin = json.find("{\"index\": " + std::to_string(index) + ",");
  if (begin == std::string::npos) return "";
  size_t end = json.find("]}", begin);
  return json.substr(begin, end == std::string::npos ? std::string::npos : end + 2 - begin);
}

}  // namespace

const ProcessStatus* DeviceStatus::process(int pid) const {
  for (const ProcessStatus& p : processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

DeviceStatus parse_device_status(const std::string& json, int index) {
  std::string device = device_object(json, index);
  DeviceStatus status;
  status.capacity = number_after(device, "capacity_bytes");
  status.used = number_after(device, "used_bytes");
  status.peak = number_after(device, "peak_used_bytes");
  status.busy_us = number_after(device, "busy_us");
  status.kernels = number_after(device, "kernels_executed");
  status.overlap_violations = number_after(device, "overlap_violations");
  // Process objects look like {"pid": N, "alive": B, "used_bytes": N, "busy_us": N,
  // "kernels_executed": N}.
  for (size_t at = device.find("{\"pid\": "); at != std::string::npos;
       at = device.find("{\"pid\": ", at + 1)) {
    ProcessStatus p;
    p.pid = static_cast<int>(number_after(device, "pid", at));
    p.alive = device.compare(device.find("\"alive\": ", at) + 9, 4, "true") == 0;
    p.used_bytes = number_after(device, "used_bytes", at);
    p.busy_us = number_after(device, "busy_us", at);
    p.kernels = number_after(device, "kernels_executed", at);
    status.processes.push_back(p);
  }
  return status;
}

void FakeDeviceTest::SetUp() {
  shm_name = unique_segment_name();
  TestDeviceConfig config = device_config();
  setenv("FAKECUDA_SHM_NAME", shm_name.c_str(), 1);
  setenv("FAKECUDA_MEMORY", config.memory.c_str(), 1);
  setenv("FAKECUDA_CONTEXT_FOOTPRINT", config.context_footprint.c_str(), 1);
  setenv("FAKECUDA_DEVICE_COUNT", config.device_count.c_str(), 1);
  setenv("FAKECUDA_TIMESLICE_US", config.timeslice_us.c_str(), 1);
  ASSERT_CU(cu.cuInit(0));
  ASSERT_CU(cu.cuDevicePrimaryCtxRetain(&context, 0));
  ASSERT_CU(cu.cuCtxSetCurrent(context));
  // Loaded up front: loading a module is potentially unsafe during a stream capture.
  ASSERT_CU(cu.cuModuleLoadData(&module, kImage));
}

void FakeDeviceTest::TearDown() {
  cu.fakecuda_shutdown();
  shm_unlink(shm_name.c_str());
  for (const char* name : {"FAKECUDA_SHM_NAME", "FAKECUDA_MEMORY", "FAKECUDA_CONTEXT_FOOTPRINT",
                           "FAKECUDA_DEVICE_COUNT", "FAKECUDA_TIMESLICE_US"}) {
    unsetenv(name);
  }
}

CUfunction FakeDeviceTest::kernel(const char* name) {
  if (module == nullptr) {
    EXPECT_EQ(cu.cuModuleLoadData(&module, kImage), CUDA_SUCCESS);
  }
  CUfunction function = nullptr;
  EXPECT_EQ(cu.cuModuleGetFunction(&function, module, name), CUDA_SUCCESS) << name;
  return function;
}

void FakeDeviceTest::launch_spin(CUstream stream, uint32_t microseconds) {
  void* params[] = {&microseconds};
  ASSERT_CU(
      cu.cuLaunchKernel(kernel("fracgpu_fake_spin"), 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
}

void FakeDeviceTest::launch_fill(CUstream stream, CUdeviceptr dst, uint32_t value, uint64_t count) {
  void* params[] = {&dst, &value, &count};
  ASSERT_CU(cu.cuLaunchKernel(kernel("fracgpu_fake_fill"), 1, 1, 1, 128, 1, 1, 0, stream, params,
                              nullptr));
}

void FakeDeviceTest::launch_add(CUstream stream, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out,
                                uint64_t n) {
  void* params[] = {&a, &b, &out, &n};
  ASSERT_CU(cu.cuLaunchKernel(kernel("fracgpu_fake_add"), 1, 1, 1, 128, 1, 1, 0, stream, params,
                              nullptr));
}

std::string FakeDeviceTest::ctl(const std::string& command, int* exit_status) {
  return run_and_capture({FAKECUDA_CTL_PATH, command}, exit_status);
}

uint64_t FakeDeviceTest::free_bytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cu.cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  return free;
}

const char* child_program() {
  return FAKECUDA_TEST_CHILD_PATH;
}

}  // namespace fakecuda_test
