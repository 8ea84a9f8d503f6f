// GoogleTest fixture for the simulated GPU. Each test gets its own device: a unique
// FAKECUDA_SHM_NAME and the sizing variables are set before cuInit (this process
// creates the segment, so its settings apply), the primary context of device 0 is made
// current, and TearDown shuts the driver down (fakecuda_shutdown) and removes the
// segment. Helpers launch the fake kernels and read `fakecuda-ctl status`.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "driver_api.h"

#define ASSERT_CU(expr)                                                    \
  do {                                                                     \
    CUresult fakecuda_result_ = (expr);                                    \
    ASSERT_EQ(fakecuda_result_, CUDA_SUCCESS)                              \
        << #expr << " -> " << fakecuda_test::error_name(fakecuda_result_); \
  } while (0)

#define EXPECT_CU_ERROR(expected, expr)                                    \
  do {                                                                     \
    CUresult fakecuda_result_ = (expr);                                    \
    EXPECT_EQ(fakecuda_result_, expected)                                  \
        << #expr << " -> " << fakecuda_test::error_name(fakecuda_result_); \
  } while (0)

namespace fakecuda_test {

struct TestDeviceConfig {
  std::string memory = "1GiB";
  std::string context_footprint = "64MiB";
  std::string device_count = "1";
  std::string timeslice_us = "2000";
};

struct ProcessStatus {
  int pid = 0;
  bool alive = false;
  uint64_t used_bytes = 0;
  uint64_t busy_us = 0;
  uint64_t kernels = 0;
};

struct DeviceStatus {
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t peak = 0;
  uint64_t busy_us = 0;
  uint64_t kernels = 0;
  uint64_t overlap_violations = 0;
  std::vector<ProcessStatus> processes;

  const ProcessStatus* process(int pid) const;
};

// Parses device `index` out of `fakecuda-ctl status` output.
DeviceStatus parse_device_status(const std::string& json, int index = 0);

class FakeDeviceTest : public ::testing::Test {
 protected:
  virtual TestDeviceConfig device_config() const { return {}; }
  void SetUp() override;
  void TearDown() override;

  CUfunction kernel(const char* name);
  void launch_spin(CUstream stream, uint32_t microseconds);
  void launch_fill(CUstream stream, CUdeviceptr dst, uint32_t value, uint64_t count);
  void launch_add(CUstream stream, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, uint64_t n);

  // Runs fakecuda-ctl with this test's environment; returns its stdout.
  std::string ctl(const std::string& command, int* exit_status = nullptr);
  DeviceStatus device_status(int index = 0) { return parse_device_status(ctl("status"), index); }
  uint64_t free_bytes();

  DriverApi& cu = driver_api();
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  std::string shm_name;
};

// Path of the helper program (see test_child.cpp).
const char* child_program();

}  // namespace fakecuda_test
