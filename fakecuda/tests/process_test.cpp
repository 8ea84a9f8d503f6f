// The device is shared by every process on the machine: memory allocated by another
// process is visible in this one's cuMemGetInfo and in `fakecuda-ctl status`, can make
// this process run out of memory, and comes back when that process is SIGKILLed
// (like a real driver reclaiming a crashed client's memory).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_process.h"
#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class ProcessTest : public FakeDeviceTest {};

// Polls `condition` for up to two seconds: SIGKILL takes effect asynchronously.
template <typename Condition>
bool eventually(Condition condition) {
  for (int i = 0; i < 400; ++i) {
    if (condition()) return true;
    usleep(5000);
  }
  return condition();
}

TEST_F(ProcessTest, ChildMemoryIsVisibleAndReclaimedAfterSigkill) {
  uint64_t before = free_bytes();
  ChildProcess child({child_program(), "hold", std::to_string(256 * kMiB)});
  ASSERT_EQ(child.read_line(), "ready");
  // The child's allocation plus its primary context's footprint.
  EXPECT_EQ(free_bytes(), before - 256 * kMiB - 64 * kMiB);
  DeviceStatus status = device_status();
  const ProcessStatus* seen = status.process(child.pid());
  ASSERT_NE(seen, nullptr);
  EXPECT_TRUE(seen->alive);
  EXPECT_EQ(seen->used_bytes, 320 * kMiB);
  const ProcessStatus* self = status.process(getpid());
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->used_bytes, 64 * kMiB);

  int pid = child.pid();
  child.kill_hard();  // not reaped: a zombie holds no GPU memory either
  EXPECT_TRUE(eventually([&] { return free_bytes() == before; }));
  child.wait();
  status = device_status();
  const ProcessStatus* gone = status.process(pid);
  EXPECT_TRUE(gone == nullptr || (!gone->alive && gone->used_bytes == 0));
  EXPECT_EQ(status.used, 64 * kMiB);
}

TEST_F(ProcessTest, AnotherProcessCanExhaustTheDevice) {
  uint64_t available = free_bytes();
  uint64_t child_bytes = available - 64 * kMiB - 16 * kMiB;  // leaves 16 MiB after its footprint
  ChildProcess child({child_program(), "hold", std::to_string(child_bytes)});
  ASSERT_EQ(child.read_line(), "ready");
  CUdeviceptr pointer = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, cu.cuMemAlloc_v2(&pointer, 32 * kMiB));
  ASSERT_CU(cu.cuMemAlloc_v2(&pointer, 16 * kMiB));
  ASSERT_CU(cu.cuMemFree_v2(pointer));
  child.kill_hard();
  child.wait();  // reaped, so the process is certainly gone
  // The failing allocation sweeps dead processes itself: no status read needed.
  ASSERT_CU(cu.cuMemAlloc_v2(&pointer, 32 * kMiB));
  ASSERT_CU(cu.cuMemFree_v2(pointer));
}

TEST_F(ProcessTest, ChildFailsCleanlyWhenTheDeviceIsFull) {
  uint64_t available = free_bytes();
  CUdeviceptr pointer = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&pointer, available - 32 * kMiB));
  // The child's context (64 MiB) no longer fits: its cuDevicePrimaryCtxRetain fails.
  ChildProcess child({child_program(), "hold", "1024"});
  EXPECT_EQ(child.read_line(), "error cuDevicePrimaryCtxRetain CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(child.wait(), 1);
  ASSERT_CU(cu.cuMemFree_v2(pointer));
}

TEST_F(ProcessTest, ForkedChildStartsUninitialisedAndCanInitItself) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP()
      << "ThreadSanitizer cannot start threads in a child forked from a multi-threaded process";
#endif
  pid_t pid = fork();
  if (pid == 0) {
    CUdeviceptr pointer = 0;
    CUcontext child_context = nullptr;
    int failures = 0;
    if (cu.cuMemAlloc_v2(&pointer, kMiB) != CUDA_ERROR_NOT_INITIALIZED) failures |= 1;
    if (cu.cuInit(0) != CUDA_SUCCESS) failures |= 2;
    if (cu.cuDevicePrimaryCtxRetain(&child_context, 0) != CUDA_SUCCESS) failures |= 4;
    if (cu.cuCtxSetCurrent(child_context) != CUDA_SUCCESS) failures |= 8;
    if (cu.cuMemAlloc_v2(&pointer, kMiB) != CUDA_SUCCESS) failures |= 16;
    _exit(failures);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(eventually(
      [&] { return device_status().used == 64 * kMiB; }));  // the child's memory came back
}

}  // namespace
}  // namespace fakecuda_test
