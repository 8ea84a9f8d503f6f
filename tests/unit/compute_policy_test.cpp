// ComputePolicy (interpose/core/compute_policy.h) over a fake tenant and driver
// (fake_tenant.h): a granted launch passes and is counted for the in-flight bound; a
// launch into a capturing stream is neither counted nor fenced (it did not run), and a
// failed launch is not counted either. The policy's drainer thread (started at the first
// launch) lives as long as the process, so the policies here are never destroyed.
#include "core/compute_policy.h"

#include <gtest/gtest.h>

#include "core/tenant_policies.h"
#include "fake_tenant.h"

namespace fracgpu {
namespace {

using testing::FakeDriver;
using testing::FakeTenant;

struct Process {
  FakeTenant tenant{1000, 1000};
  DriverCalls calls = FakeDriver::calls();
  FenceOps fences = FakeDriver::fence_ops();
  CaptureTracker captures;
  TenantPolicies* policies = nullptr;
  Process() {
    captures.init(FakeDriver::capture_ops());
    policies = new TenantPolicies(tenant, calls, fences, captures, "/nonexistent/doorbell");
  }
};

// One per test binary: its drainer thread outlives any test.
Process& process() {
  static Process* p = new Process();
  return *p;
}

CUresult launch(ComputePolicy& compute, CUstream stream, CUresult rc = CUDA_SUCCESS) {
  return compute.launch<true>(stream, false, [rc] { return rc; });
}

TEST(ComputePolicy, CountsGrantedLaunchesButNotCapturedOrFailedOnes) {
  FakeDriver::reset();
  Process& p = process();
  ComputePolicy& compute = p.policies->compute;
  const CUstream stream = reinterpret_cast<CUstream>(0x30);

  ASSERT_EQ(launch(compute, stream), CUDA_SUCCESS);
  const uint64_t counted = compute.counted_launches(0);
  EXPECT_EQ(counted, 1u);
  EXPECT_EQ(p.tenant.ledger_map()->schedule[0][0].launched_epoch.load(),
            1u);  // the grant was acknowledged

  EXPECT_EQ(launch(compute, stream, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(compute.counted_launches(0), counted);  // nothing was submitted

  // A capture is open and the launch's stream captures: the launch did not run.
  ASSERT_EQ(p.captures.begin([] {
    FakeDriver::capturing = true;
    return CUDA_SUCCESS;
  }),
            CUDA_SUCCESS);
  ASSERT_EQ(launch(compute, stream), CUDA_SUCCESS);
  EXPECT_EQ(compute.counted_launches(0), counted);

  // The capture ended: launches count again.
  ASSERT_EQ(p.captures.end(stream,
                           [] {
                             FakeDriver::capturing = false;
                             return CUDA_SUCCESS;
                           }),
            CUDA_SUCCESS);
  EXPECT_FALSE(p.captures.any_open());
  ASSERT_EQ(launch(compute, stream), CUDA_SUCCESS);
  EXPECT_EQ(compute.counted_launches(0), counted + 1);
}

TEST(ComputePolicy, ALaunchWithoutATenantDeviceIsNotGated) {
  Process& p = process();
  EXPECT_EQ(p.policies->compute.counted_launches(kNoTenantDevice), 0u);
  // No current device: the launch goes straight to the driver.
  DriverCalls no_device = p.calls;
  no_device.cuDeviceGetCount = [](int* count) {
    *count = 2;
    return CUDA_SUCCESS;
  };
  no_device.cuCtxGetDevice = [](CUdevice*) { return CUDA_ERROR_INVALID_CONTEXT; };
  DeviceResolver devices(no_device, p.tenant.quota());
  CaptureTracker captures;
  ComputePolicy compute(p.tenant, devices, no_device, p.fences, captures, "/nonexistent/doorbell");
  bool called = false;
  EXPECT_EQ(compute.launch<true>(nullptr, false,
                                 [&] {
                                   called = true;
                                   return CUDA_SUCCESS;
                                 }),
            CUDA_SUCCESS);
  EXPECT_TRUE(called);
  EXPECT_EQ(compute.counted_launches(0), 0u);
}

}  // namespace
}  // namespace fracgpu
