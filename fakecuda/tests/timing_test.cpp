// Simulated time on the device: kernels take the time their parameters say (measured
// with events), the device engine runs one context at a time across processes and
// shares it fairly, a long kernel is preempted at timeslice boundaries, and empty
// kernels are cheap enough for launch-rate benchmarks. These tests run serially.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "child_process.h"
#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

class TimingTest : public FakeDeviceTest {};

TEST_F(TimingTest, OneMillisecondSpinMeasuresOneMillisecond) {
  CUevent start = nullptr, end = nullptr;
  ASSERT_CU(cu.cuEventCreate(&start, CU_EVENT_DEFAULT));
  ASSERT_CU(cu.cuEventCreate(&end, CU_EVENT_DEFAULT));
  std::vector<float> samples;
  for (int i = 0; i < 7; ++i) {
    ASSERT_CU(cu.cuEventRecord(start, nullptr));
    launch_spin(nullptr, 1000);
    ASSERT_CU(cu.cuEventRecord(end, nullptr));
    ASSERT_CU(cu.cuEventSynchronize(end));
    float ms = 0;
    ASSERT_CU(cu.cuEventElapsedTime_v2(&ms, start, end));
    samples.push_back(ms);
  }
  std::sort(samples.begin(), samples.end());
  std::printf("[ measured ] 1 ms spin: min %.3f median %.3f max %.3f ms\n", samples.front(),
              samples[samples.size() / 2], samples.back());
  EXPECT_NEAR(samples[samples.size() / 2], 1.0, 0.1);
  EXPECT_GE(samples.front(), 0.9);
  ASSERT_CU(cu.cuEventDestroy_v2(start));
  ASSERT_CU(cu.cuEventDestroy_v2(end));
}

TEST_F(TimingTest, TwoProcessesShareTheDeviceFairlyAndNeverOverlap) {
  ChildProcess a({child_program(), "spin", "2000", "1000", "4"});
  ChildProcess b({child_program(), "spin", "2000", "1000", "4"});
  ASSERT_EQ(a.read_line(), "ready");
  ASSERT_EQ(b.read_line(), "ready");
  auto start = std::chrono::steady_clock::now();
  a.write_line("go");
  b.write_line("go");
  EXPECT_EQ(a.read_line().rfind("done ", 0), 0u);
  EXPECT_EQ(b.read_line().rfind("done ", 0), 0u);
  double wall_us = elapsed_ms(start) * 1000;
  int pid_a = a.pid(), pid_b = b.pid();
  a.wait();
  b.wait();
  DeviceStatus status = device_status();
  const ProcessStatus* pa = status.process(pid_a);
  const ProcessStatus* pb = status.process(pid_b);
  ASSERT_NE(pa, nullptr);
  ASSERT_NE(pb, nullptr);
  double total = static_cast<double>(pa->busy_us + pb->busy_us);
  std::printf(
      "[ measured ] busy %llu / %llu us (%.1f%% / %.1f%%), sum %.0f of %.0f us wall, kernels %llu "
      "/ %llu\n",
      static_cast<unsigned long long>(pa->busy_us), static_cast<unsigned long long>(pb->busy_us),
      100.0 * pa->busy_us / total, 100.0 * pb->busy_us / total, total, wall_us,
      static_cast<unsigned long long>(pa->kernels), static_cast<unsigned long long>(pb->kernels));
  EXPECT_NEAR(pa->busy_us / total, 0.5, 0.1) << pa->busy_us << " vs " << pb->busy_us;
  EXPECT_LE(total, wall_us);          // one context at a time
  EXPECT_GE(total, 0.8 * 2'000'000);  // and the device was kept busy
  EXPECT_EQ(status.overlap_violations, 0u);
  EXPECT_EQ(status.kernels, pa->kernels + pb->kernels);
}

TEST_F(TimingTest, LongKernelIsPreemptedAtTimesliceBoundaries) {
  CUcontext other = nullptr;
  ASSERT_CU(cu.cuCtxCreate_v4(&other, nullptr, 0, 0));  // now current
  launch_spin(nullptr, 300000);                         // 300 ms in `other`
  ASSERT_CU(cu.cuCtxSetCurrent(context));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto start = std::chrono::steady_clock::now();
  launch_spin(nullptr, 1000);
  ASSERT_CU(cu.cuCtxSynchronize());
  // Waits for at most one 2 ms slice of the long kernel, then runs its own 1 ms.
  double latency = elapsed_ms(start);
  std::printf("[ measured ] 1 ms kernel next to a 300 ms kernel: done after %.2f ms\n", latency);
  EXPECT_LT(latency, 15.0);
  ASSERT_CU(cu.cuCtxDestroy_v2(other));  // finishes the long kernel first
  EXPECT_EQ(device_status().overlap_violations, 0u);
}

TEST_F(TimingTest, EngineHeldByAKilledProcessIsTakenBack) {
  ChildProcess holder({child_program(), "spin", "60000", "10000000", "1"});  // one 10 s kernel
  ASSERT_EQ(holder.read_line(), "ready");
  holder.write_line("go");
  std::string json;
  for (int i = 0; i < 200 && json.find("\"engine_owner_pid\": " + std::to_string(holder.pid())) ==
                                 std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    json = ctl("status");
  }
  ASSERT_NE(json.find("\"engine_owner_pid\": " + std::to_string(holder.pid())), std::string::npos)
      << json;
  holder.kill_hard();  // dies holding the engine
  holder.wait();
  auto start = std::chrono::steady_clock::now();
  launch_spin(nullptr, 1000);
  ASSERT_CU(cu.cuCtxSynchronize());
  double latency = elapsed_ms(start);
  std::printf("[ measured ] engine recovered from a SIGKILLed holder after %.1f ms\n", latency);
  EXPECT_LT(latency, 200.0);
  EXPECT_EQ(device_status().overlap_violations, 0u);
}

TEST_F(TimingTest, EmptyKernelsAreCheapToLaunch) {
  CUfunction empty = kernel("fracgpu_fake_empty");
  auto start = std::chrono::steady_clock::now();
  constexpr int kLaunches = 20000;
  for (int i = 0; i < kLaunches; ++i) {
    ASSERT_CU(cu.cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  }
  ASSERT_CU(cu.cuCtxSynchronize());
  double per_launch_us = elapsed_ms(start) * 1000 / kLaunches;
  std::printf("[ measured ] empty kernel: %.2f us per launch\n", per_launch_us);
  EXPECT_LT(per_launch_us, 50.0);
  EXPECT_EQ(device_status().kernels, static_cast<uint64_t>(kLaunches));
}

}  // namespace
}  // namespace fakecuda_test
