// Stream-capture interaction rules, as the real driver enforces them (see the "Capture
// rules" section of fakecuda/README.md): potentially unsafe calls are prohibited
// according to the calling thread's interaction mode and the modes the open captures
// were begun with; calls that necessarily conflict with a capture fail in every mode;
// a prohibited or conflicting call invalidates the capture(s) it offended, so that
// cuStreamEndCapture returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

constexpr CUstreamCaptureMode kGlobal = CU_STREAM_CAPTURE_MODE_GLOBAL;
constexpr CUstreamCaptureMode kThreadLocal = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
constexpr CUstreamCaptureMode kRelaxed = CU_STREAM_CAPTURE_MODE_RELAXED;

// A named call, for tables of calls that must all behave the same way.
struct NamedCall {
  std::string name;
  std::function<CUresult()> call;
};

class CaptureRulesTest : public FakeDeviceTest {
 protected:
  void SetUp() override {
    FakeDeviceTest::SetUp();
    ASSERT_CU(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cu.cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    ASSERT_CU(cu.cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cu.cuEventCreate(&unrelated, CU_EVENT_DISABLE_TIMING));
    ASSERT_CU(cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
    ASSERT_CU(cu.cuEventRecord(unrelated, other));
    ASSERT_CU(cu.cuEventSynchronize(unrelated));
    ASSERT_CU(cu.cuMemAlloc_v2(&buffer, kBytes));
    spin = kernel("fracgpu_fake_spin");
    load(exchange_mode, "cuThreadExchangeStreamCaptureMode");
    load(begin_capture_v1, "cuStreamBeginCapture");
    load(begin_capture_to_graph, "cuStreamBeginCaptureToGraph");
    load(update_dependencies_v1, "cuStreamUpdateCaptureDependencies");
    load(update_dependencies, "cuStreamUpdateCaptureDependencies_v2");
    load(launch_kernel_ptsz, "cuLaunchKernel_ptsz");
    load(add_empty_node, "cuGraphAddEmptyNode");
  }

  void TearDown() override {
    // The interaction mode is per thread: leave the test thread in the default mode.
    if (exchange_mode != nullptr) set_mode(kGlobal);
    FakeDeviceTest::TearDown();
  }

  template <typename Fn>
  void load(Fn& fn, const char* name) {
    fn = reinterpret_cast<Fn>(cu.symbol(name));
    ASSERT_NE(fn, nullptr) << name;
  }

  // Sets the calling thread's interaction mode; returns the previous one.
  CUstreamCaptureMode set_mode(CUstreamCaptureMode mode) {
    EXPECT_EQ(exchange_mode(&mode), CUDA_SUCCESS);
    return mode;
  }

  // Runs `body` on a new thread with this test's context current, and waits for it.
  void on_other_thread(const std::function<void()>& body) {
    std::thread thread([&] {
      EXPECT_EQ(cu.cuCtxSetCurrent(context), CUDA_SUCCESS);
      body();
    });
    thread.join();
  }
  // The result of `call` made on another thread in interaction mode `mode`.
  CUresult from_other_thread(CUstreamCaptureMode mode, const std::function<CUresult()>& call) {
    CUresult result = CUDA_ERROR_UNKNOWN;
    on_other_thread([&] {
      set_mode(mode);
      result = call();
    });
    return result;
  }

  CUresult launch(CUstream on) {
    uint32_t microseconds = 1;
    void* params[] = {&microseconds};
    return cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, on, params, nullptr);
  }

  CUstreamCaptureStatus status_of(CUstream of) {
    CUstreamCaptureStatus status{};
    EXPECT_EQ(cu.cuStreamIsCapturing(of, &status), CUDA_SUCCESS);
    return status;
  }

  // Ends the capture on `on`; a returned graph is checked to be non-null and destroyed.
  CUresult end(CUstream on) {
    CUgraph graph = reinterpret_cast<CUgraph>(&graph);
    CUresult result = cu.cuStreamEndCapture(on, &graph);
    if (result == CUDA_SUCCESS) {
      EXPECT_NE(graph, nullptr);
      EXPECT_EQ(cu.cuGraphDestroy(graph), CUDA_SUCCESS);
    } else {
      EXPECT_EQ(graph, nullptr) << "an invalidated capture returns no graph";
    }
    return result;
  }

  // Asserts that `stream`'s capture was invalidated: the status says so, further
  // captured work fails, and ending the capture reports it.
  void expect_invalidated(CUstream on) {
    EXPECT_EQ(status_of(on), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CUstreamCaptureStatus status{};
    ASSERT_CU(
        cu.cuStreamGetCaptureInfo_v3(on, &status, nullptr, nullptr, nullptr, nullptr, nullptr));
    EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, launch(on));
    EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cu.cuEventRecord(event, on));
    EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end(on));
    EXPECT_EQ(status_of(on), CU_STREAM_CAPTURE_STATUS_NONE);
  }

  // Potentially unsafe calls (none touches a capturing stream or a captured event).
  std::vector<NamedCall> unsafe_calls() {
    return {
        {"cuEventQuery", [this] { return cu.cuEventQuery(unrelated); }},
        {"cuEventSynchronize", [this] { return cu.cuEventSynchronize(unrelated); }},
        {"cuStreamQuery", [this] { return cu.cuStreamQuery(other); }},
        {"cuStreamSynchronize", [this] { return cu.cuStreamSynchronize(other); }},
        {"cuMemAlloc",
         [this] {
           CUdeviceptr p = 0;
           CUresult r = cu.cuMemAlloc_v2(&p, 256);
           if (r == CUDA_SUCCESS) cu.cuMemFree_v2(p);
           return r;
         }},
        {"cuMemAllocPitch",
         [this] {
           CUdeviceptr p = 0;
           size_t pitch = 0;
           return cu.cuMemAllocPitch_v2(&p, &pitch, 64, 4, 4);
         }},
        {"cuMemAllocManaged",
         [this] {
           CUdeviceptr p = 0;
           return cu.cuMemAllocManaged(&p, 256, CU_MEM_ATTACH_GLOBAL);
         }},
        {"cuMemFree", [this] { return cu.cuMemFree_v2(spare_device); }},
        {"cuMemAllocHost",
         [this] {
           void* p = nullptr;
           return cu.cuMemAllocHost_v2(&p, 256);
         }},
        {"cuMemFreeHost", [this] { return cu.cuMemFreeHost(spare_host); }},
        {"cuMemcpyHtoD", [this] { return cu.cuMemcpyHtoD_v2(buffer, host, sizeof(host)); }},
        {"cuMemcpyDtoH", [this] { return cu.cuMemcpyDtoH_v2(host, buffer, sizeof(host)); }},
        {"cuMemsetD32", [this] { return cu.cuMemsetD32_v2(buffer, 1, 4); }},
        {"cuModuleLoadData",
         [this] {
           CUmodule m = nullptr;
           return cu.cuModuleLoadData(&m, "image");
         }},
        {"cuLibraryLoadData",
         [this] {
           CUlibrary l = nullptr;
           return cu.cuLibraryLoadData(&l, "image", nullptr, nullptr, 0, nullptr, nullptr, 0);
         }},
    };
  }
  // Memory the cuMemFree/cuMemFreeHost entries free (allocated before the capture).
  void allocate_spares() {
    ASSERT_CU(cu.cuMemAlloc_v2(&spare_device, 256));
    ASSERT_CU(cu.cuMemAllocHost_v2(&spare_host, 256));
  }

  static constexpr size_t kBytes = 4096;
  CUstream stream = nullptr;    // non-blocking: the legacy stream stays usable
  CUstream blocking = nullptr;  // blocking: capturing it makes the legacy stream unusable
  CUstream other = nullptr;     // never captured
  CUevent unrelated = nullptr;  // recorded outside any capture
  CUevent event = nullptr;
  CUdeviceptr buffer = 0;
  CUdeviceptr spare_device = 0;
  void* spare_host = nullptr;
  uint32_t host[4] = {};
  CUfunction spin = nullptr;

  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_mode = nullptr;
  PFN_cuStreamBeginCapture_v10000 begin_capture_v1 = nullptr;
  PFN_cuStreamBeginCaptureToGraph_v12030 begin_capture_to_graph = nullptr;
  PFN_cuStreamUpdateCaptureDependencies_v11030 update_dependencies_v1 = nullptr;
  PFN_cuStreamUpdateCaptureDependencies_v12030 update_dependencies = nullptr;
  PFN_cuLaunchKernel_v7000_ptsz launch_kernel_ptsz = nullptr;
  PFN_cuGraphAddEmptyNode_v10000 add_empty_node = nullptr;
};

// --- rule 1: interaction modes -----------------------------------------------------

TEST_F(CaptureRulesTest, InteractionModeIsPerThreadAndDefaultsToGlobal) {
  EXPECT_EQ(set_mode(kRelaxed), kGlobal);
  CUstreamCaptureMode seen_there = kRelaxed;
  on_other_thread([&] { seen_there = set_mode(kGlobal); });
  EXPECT_EQ(seen_there, kGlobal);
  EXPECT_EQ(set_mode(kThreadLocal), kRelaxed);
  EXPECT_EQ(set_mode(kGlobal), kThreadLocal);
  CUstreamCaptureMode bogus = static_cast<CUstreamCaptureMode>(7);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuStreamBeginCapture_v2(stream, bogus));
}

// --- rule 2a: a global capture prohibits unsafe calls in every global-mode thread ----

TEST_F(CaptureRulesTest, GlobalCaptureProhibitsAnotherThreadsEventQuery) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
  ASSERT_CU(launch(stream));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  from_other_thread(kGlobal, [&] { return cu.cuEventQuery(unrelated); }));
  expect_invalidated(stream);
}

TEST_F(CaptureRulesTest, BeginCaptureV1IsAGlobalCapture) {
  ASSERT_CU(begin_capture_v1(stream));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  from_other_thread(kGlobal, [&] { return cu.cuEventQuery(unrelated); }));
  expect_invalidated(stream);
}

TEST_F(CaptureRulesTest, UnsafeCallsFromAnotherThreadInvalidateAGlobalCapture) {
  for (const NamedCall& unsafe : unsafe_calls()) {
    SCOPED_TRACE(unsafe.name);
    allocate_spares();
    ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
    ASSERT_CU(launch(stream));
    EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, from_other_thread(kGlobal, unsafe.call));
    expect_invalidated(stream);
  }
}

TEST_F(CaptureRulesTest, AllocationDuringAnotherThreadsGlobalCaptureFails) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
  CUdeviceptr p = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  from_other_thread(kGlobal, [&] { return cu.cuMemAlloc_v2(&p, 1024); }));
  EXPECT_EQ(p, 0u);
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end(stream));
}

TEST_F(CaptureRulesTest, RelaxedThreadMayMakeUnsafeCallsDuringAnotherThreadsGlobalCapture) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
  ASSERT_CU(launch(stream));
  for (const NamedCall& unsafe : unsafe_calls()) {
    SCOPED_TRACE(unsafe.name);
    EXPECT_CU_ERROR(CUDA_SUCCESS, from_other_thread(kRelaxed, [&] {
                      allocate_spares();  // not on this thread: it is capturing
                      return unsafe.call();
                    }));
  }
  EXPECT_EQ(status_of(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(launch(stream));
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(stream));
}

// --- rule 2b: a thread-local capture prohibits only its own thread -------------------

TEST_F(CaptureRulesTest, ThreadLocalCaptureLeavesOtherThreadsAlone) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kThreadLocal));
  ASSERT_CU(launch(stream));
  EXPECT_CU_ERROR(CUDA_SUCCESS,
                  from_other_thread(kGlobal, [&] { return cu.cuEventQuery(unrelated); }));
  CUdeviceptr p = 0;
  EXPECT_CU_ERROR(CUDA_SUCCESS, from_other_thread(kGlobal, [&] {
                    CUresult r = cu.cuMemAlloc_v2(&p, 1024);
                    return r != CUDA_SUCCESS ? r : cu.cuMemFree_v2(p);
                  }));
  EXPECT_CU_ERROR(CUDA_SUCCESS,
                  from_other_thread(kThreadLocal, [&] { return cu.cuStreamSynchronize(other); }));
  EXPECT_EQ(status_of(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(stream));
}

TEST_F(CaptureRulesTest, ThreadLocalModeThreadIgnoresAnotherThreadsGlobalCapture) {
  // The capture belongs to another thread; this one queries in thread-local mode.
  CUresult begun = CUDA_ERROR_UNKNOWN, ended = CUDA_ERROR_UNKNOWN;
  std::thread owner([&] {
    cu.cuCtxSetCurrent(context);
    begun = cu.cuStreamBeginCapture_v2(stream, kGlobal);
    on_other_thread([&] {
      set_mode(kThreadLocal);
      EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuEventQuery(unrelated));
      EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuStreamSynchronize(other));
    });
    if (begun == CUDA_SUCCESS) ended = end(stream);
  });
  owner.join();
  EXPECT_CU_ERROR(CUDA_SUCCESS, begun);
  EXPECT_CU_ERROR(CUDA_SUCCESS, ended);
}

// --- the capturing thread itself --------------------------------------------------------

TEST_F(CaptureRulesTest, CapturingThreadIsProhibitedUnlessRelaxed) {
  for (CUstreamCaptureMode begun : {kGlobal, kThreadLocal}) {
    for (CUstreamCaptureMode thread_mode : {kGlobal, kThreadLocal}) {
      SCOPED_TRACE("capture mode " + std::to_string(begun) + ", thread mode " +
                   std::to_string(thread_mode));
      set_mode(thread_mode);
      ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, begun));
      EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.cuEventQuery(unrelated));
      expect_invalidated(stream);
    }
  }
}

TEST_F(CaptureRulesTest, CapturingThreadInRelaxedModeMayMakeUnsafeCalls) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
  ASSERT_CU(launch(stream));
  CUstreamCaptureMode previous = set_mode(kRelaxed);
  EXPECT_EQ(previous, kGlobal);
  for (const NamedCall& unsafe : unsafe_calls()) {
    SCOPED_TRACE(unsafe.name);
    allocate_spares();
    EXPECT_CU_ERROR(CUDA_SUCCESS, unsafe.call());
  }
  set_mode(previous);
  EXPECT_EQ(status_of(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(stream));
}

TEST_F(CaptureRulesTest, RelaxedCaptureProhibitsNothing) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  ASSERT_CU(launch(stream));
  for (const NamedCall& unsafe : unsafe_calls()) {
    SCOPED_TRACE(unsafe.name);
    allocate_spares();
    EXPECT_CU_ERROR(CUDA_SUCCESS, unsafe.call());  // its own thread, global mode
    allocate_spares();
    EXPECT_CU_ERROR(CUDA_SUCCESS, from_other_thread(kGlobal, unsafe.call));
  }
  EXPECT_EQ(status_of(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(stream));
}

TEST_F(CaptureRulesTest, NonRelaxedCaptureEndsOnlyOnItsThread) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
  CUgraph graph = nullptr;
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, from_other_thread(kGlobal, [&] {
                    return cu.cuStreamEndCapture(stream, &graph);
                  }));
  EXPECT_EQ(status_of(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(stream));

  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  ASSERT_CU(launch(stream));
  EXPECT_CU_ERROR(CUDA_SUCCESS, from_other_thread(kGlobal, [&] { return end(stream); }));
}

// Calls that neither touch a capturing stream nor are potentially unsafe.
TEST_F(CaptureRulesTest, SafeCallsDuringAGlobalCaptureFromAnyThread) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
  ASSERT_CU(launch(stream));
  CUevent mark = nullptr;
  ASSERT_CU(cu.cuEventCreate(&mark, CU_EVENT_DISABLE_TIMING));
  auto safe_calls = [&] {
    std::vector<CUresult> results;
    results.push_back(launch(other));
    results.push_back(cu.cuMemcpyHtoDAsync_v2(buffer, host, sizeof(host), other));
    results.push_back(cu.cuMemsetD32Async(buffer, 3, 4, other));
    results.push_back(cu.cuEventRecord(mark, other));
    results.push_back(cu.cuStreamWaitEvent(other, mark, 0));
    CUstreamCaptureStatus status{};
    results.push_back(cu.cuStreamIsCapturing(other, &status));
    results.push_back(cu.cuStreamIsCapturing(stream, &status));
    results.push_back(
        cu.cuStreamGetCaptureInfo_v3(stream, &status, nullptr, nullptr, nullptr, nullptr, nullptr));
    CUcontext current = nullptr;
    results.push_back(cu.cuCtxGetCurrent(&current));
    results.push_back(cu.cuCtxPushCurrent_v2(context));
    results.push_back(cu.cuCtxPopCurrent_v2(&current));
    CUdevice device = 0;
    int value = 0;
    results.push_back(cu.cuDeviceGet(&device, 0));
    results.push_back(
        cu.cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
    size_t free_bytes = 0, total_bytes = 0;
    results.push_back(cu.cuMemGetInfo_v2(&free_bytes, &total_bytes));
    void* fn = nullptr;
    results.push_back(cu.cuGetProcAddress_v2("cuEventQuery", &fn, 12000, 0, nullptr));
    CUstreamCaptureMode mode = kGlobal;
    results.push_back(exchange_mode(&mode));
    CUgraph graph = nullptr;
    CUgraphNode node = nullptr;
    results.push_back(cu.cuGraphCreate(&graph, 0));
    results.push_back(add_empty_node(&node, graph, nullptr, 0));
    results.push_back(cu.cuGraphDestroy(graph));
    return results;
  };
  for (CUresult result : safe_calls()) EXPECT_CU_ERROR(CUDA_SUCCESS, result);
  std::vector<CUresult> there;
  on_other_thread([&] { there = safe_calls(); });
  for (CUresult result : there) EXPECT_CU_ERROR(CUDA_SUCCESS, result);
  EXPECT_EQ(status_of(stream), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(stream));
  ASSERT_CU(cu.cuStreamSynchronize(other));
  ASSERT_CU(cu.cuEventDestroy_v2(mark));
}

// --- rule 3: calls that conflict with a capture in every mode ------------------------

TEST_F(CaptureRulesTest, SynchronizingOrQueryingTheCapturingStreamConflictsEvenWhenRelaxed) {
  set_mode(kRelaxed);
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  ASSERT_CU(launch(stream));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.cuStreamSynchronize(stream));
  expect_invalidated(stream);

  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  from_other_thread(kRelaxed, [&] { return cu.cuStreamQuery(stream); }));
  expect_invalidated(stream);
}

TEST_F(CaptureRulesTest, WaitingOnAnEventRecordedInTheCaptureConflictsEvenWhenRelaxed) {
  set_mode(kRelaxed);
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  ASSERT_CU(launch(stream));
  ASSERT_CU(cu.cuEventRecord(event, stream));
  EXPECT_CU_ERROR(CUDA_ERROR_CAPTURED_EVENT, cu.cuEventQuery(event));
  expect_invalidated(stream);
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuEventQuery(event));  // the capture is over

  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  ASSERT_CU(cu.cuEventRecord(event, stream));
  EXPECT_CU_ERROR(CUDA_ERROR_CAPTURED_EVENT,
                  from_other_thread(kRelaxed, [&] { return cu.cuEventSynchronize(event); }));
  expect_invalidated(stream);
}

TEST_F(CaptureRulesTest, ContextSynchronizeConflictsWithACaptureInTheContext) {
  set_mode(kRelaxed);
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.cuCtxSynchronize());
  expect_invalidated(stream);

  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  from_other_thread(kRelaxed, [&] { return cu.cuCtxSynchronize(); }));
  expect_invalidated(stream);

  // Also a thread-local capture, from another thread that it does not otherwise restrict.
  set_mode(kGlobal);
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kThreadLocal));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  from_other_thread(kGlobal, [&] { return cu.cuCtxSynchronize(); }));
  expect_invalidated(stream);
}

TEST_F(CaptureRulesTest, LegacyStreamUseWhileABlockingStreamCapturesIsImplicit) {
  CUevent mark = nullptr;
  ASSERT_CU(cu.cuEventCreate(&mark, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cu.cuEventRecord(mark, other));
  std::vector<NamedCall> legacy_uses = {
      {"launch on NULL", [&] { return launch(nullptr); }},
      {"launch on CU_STREAM_LEGACY", [&] { return launch(CU_STREAM_LEGACY); }},
      {"cuMemsetD32Async on NULL", [&] { return cu.cuMemsetD32Async(buffer, 1, 4, nullptr); }},
      {"cuMemcpyHtoDAsync on NULL",
       [&] { return cu.cuMemcpyHtoDAsync_v2(buffer, host, sizeof(host), nullptr); }},
      {"cuEventRecord on NULL", [&] { return cu.cuEventRecord(mark, nullptr); }},
      {"cuStreamWaitEvent on NULL", [&] { return cu.cuStreamWaitEvent(nullptr, mark, 0); }},
      {"cuStreamSynchronize(NULL)", [&] { return cu.cuStreamSynchronize(nullptr); }},
      {"cuStreamQuery(CU_STREAM_LEGACY)", [&] { return cu.cuStreamQuery(CU_STREAM_LEGACY); }},
      {"synchronous cuMemcpyHtoD", [&] { return cu.cuMemcpyHtoD_v2(buffer, host, 16); }},
      {"cuMemAllocAsync on NULL",
       [&] {
         CUdeviceptr p = 0;
         return cu.cuMemAllocAsync(&p, 256, nullptr);
       }},
      {"cuGraphLaunch on NULL", [&] { return cu.cuGraphLaunch(nullptr, nullptr); }},
  };
  set_mode(kRelaxed);  // these conflict in every mode
  for (const NamedCall& use : legacy_uses) {
    SCOPED_TRACE(use.name);
    ASSERT_CU(cu.cuStreamBeginCapture_v2(blocking, kRelaxed));
    ASSERT_CU(launch(blocking));
    EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, use.call());
    expect_invalidated(blocking);
  }
  ASSERT_CU(cu.cuEventDestroy_v2(mark));
}

TEST_F(CaptureRulesTest, LegacyStreamStaysUsableBesideANonBlockingCapture) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
  EXPECT_CU_ERROR(CUDA_SUCCESS, launch(nullptr));
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuMemsetD32Async(buffer, 1, 4, CU_STREAM_LEGACY));
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(stream));
  ASSERT_CU(cu.cuCtxSynchronize());
}

TEST_F(CaptureRulesTest, PerThreadStreamIsNotTheLegacyStream) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(blocking, kGlobal));
  uint32_t microseconds = 1;
  void* params[] = {&microseconds};
  // NULL through a _ptsz entry point, and CU_STREAM_PER_THREAD, name the per-thread stream.
  EXPECT_CU_ERROR(CUDA_SUCCESS,
                  launch_kernel_ptsz(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  EXPECT_CU_ERROR(CUDA_SUCCESS, launch(CU_STREAM_PER_THREAD));
  EXPECT_EQ(status_of(blocking), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(blocking));
  ASSERT_CU(cu.cuCtxSynchronize());
}

TEST_F(CaptureRulesTest, CaptureQueriesOfTheLegacyStreamAreImplicitWithoutInvalidating) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(blocking, kGlobal));
  ASSERT_CU(launch(blocking));
  CUstreamCaptureStatus status{};
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                  cu.cuStreamIsCapturing(CU_STREAM_LEGACY, &status));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cu.cuStreamIsCapturing(nullptr, &status));
  EXPECT_CU_ERROR(
      CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
      cu.cuStreamGetCaptureInfo_v3(nullptr, &status, nullptr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(status_of(blocking), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(launch(blocking));
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(blocking));
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuStreamIsCapturing(CU_STREAM_LEGACY, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
}

// --- streams that joined a capture are part of it ------------------------------------

TEST_F(CaptureRulesTest, ForkedStreamsAreCapturingToo) {
  CUevent fork = nullptr;
  ASSERT_CU(cu.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  set_mode(kRelaxed);
  // Synchronising a stream that joined by fork conflicts with the capture.
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  ASSERT_CU(cu.cuEventRecord(fork, stream));
  ASSERT_CU(cu.cuStreamWaitEvent(other, fork, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.cuStreamSynchronize(other));
  expect_invalidated(stream);
  EXPECT_EQ(status_of(other), CU_STREAM_CAPTURE_STATUS_NONE);
  // A blocking stream that joined makes the legacy stream unusable.
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kRelaxed));
  ASSERT_CU(cu.cuEventRecord(fork, stream));
  ASSERT_CU(cu.cuStreamWaitEvent(blocking, fork, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, launch(nullptr));
  expect_invalidated(stream);
  ASSERT_CU(cu.cuEventDestroy_v2(fork));
}

TEST_F(CaptureRulesTest, ForkJoinCaptureAcrossStreamsStillWorks) {
  CUevent fork = nullptr, join = nullptr;
  ASSERT_CU(cu.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cu.cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, kGlobal));
  ASSERT_CU(launch(stream));
  ASSERT_CU(cu.cuEventRecord(fork, stream));
  ASSERT_CU(cu.cuStreamWaitEvent(other, fork, 0));
  ASSERT_CU(cu.cuStreamWaitEvent(blocking, fork, 0));
  ASSERT_CU(cu.cuMemsetD32Async(buffer, 5, 4, other));
  ASSERT_CU(launch(blocking));
  ASSERT_CU(cu.cuEventRecord(join, other));
  ASSERT_CU(cu.cuStreamWaitEvent(stream, join, 0));
  ASSERT_CU(cu.cuEventRecord(join, blocking));
  ASSERT_CU(cu.cuStreamWaitEvent(stream, join, 0));
  ASSERT_CU(launch(stream));
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuStreamEndCapture(stream, &graph));
  for (CUstream s : {stream, other, blocking})
    EXPECT_EQ(status_of(s), CU_STREAM_CAPTURE_STATUS_NONE);
  size_t count = 0;
  ASSERT_CU(cu.cuGraphGetNodes(graph, nullptr, &count));
  EXPECT_EQ(count, 4u);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  uint32_t values[4] = {};
  ASSERT_CU(cu.cuMemcpyDtoH_v2(values, buffer, sizeof(values)));
  EXPECT_EQ(values[3], 5u);
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
  ASSERT_CU(cu.cuEventDestroy_v2(fork));
  ASSERT_CU(cu.cuEventDestroy_v2(join));
}

// --- capture into an existing graph, and explicit dependency updates -----------------

TEST_F(CaptureRulesTest, CaptureToGraphAndDependencyUpdatesBuildTheExpectedEdges) {
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  CUgraphNode root_a = nullptr, root_b = nullptr;
  ASSERT_CU(add_empty_node(&root_a, graph, nullptr, 0));
  ASSERT_CU(add_empty_node(&root_b, graph, nullptr, 0));
  auto frontier = [&](CUstream of) {
    CUstreamCaptureStatus status{};
    cuuint64_t id = 0;
    CUgraph captured = nullptr;
    const CUgraphNode* nodes = nullptr;
    size_t count = 0;
    EXPECT_EQ(cu.cuStreamGetCaptureInfo_v3(of, &status, &id, &captured, &nodes, nullptr, &count),
              CUDA_SUCCESS);
    EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_EQ(captured, graph);
    std::vector<CUgraphNode> set(nodes, nodes + count);
    std::sort(set.begin(), set.end());
    return set;
  };
  auto sorted = [](std::vector<CUgraphNode> nodes) {
    std::sort(nodes.begin(), nodes.end());
    return nodes;
  };

  ASSERT_CU(begin_capture_to_graph(stream, graph, &root_a, nullptr, 1, kGlobal));
  EXPECT_EQ(frontier(stream), sorted({root_a}));  // the first captured node depends on root_a
  ASSERT_CU(launch(stream));
  std::vector<CUgraphNode> after_launch = frontier(stream);
  ASSERT_EQ(after_launch.size(), 1u);
  CUgraphNode launched = after_launch[0];
  // ADD (also flags 0, and the v1 ABI) joins root_b to the frontier: the next node depends on both.
  ASSERT_CU(update_dependencies(stream, &root_b, nullptr, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
  EXPECT_EQ(frontier(stream), sorted({launched, root_b}));
  ASSERT_CU(update_dependencies_v1(stream, &root_b, 1, 0));  // already there: no duplicate
  EXPECT_EQ(frontier(stream), sorted({launched, root_b}));
  // SET replaces it.
  ASSERT_CU(update_dependencies(stream, &root_a, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
  EXPECT_EQ(frontier(stream), sorted({root_a}));
  ASSERT_CU(cu.cuMemsetD32Async(buffer, 2, 4, stream));
  ASSERT_EQ(frontier(stream).size(), 1u);

  // Invalid updates: bad flags, foreign nodes, non-default edge data.
  CUgraph foreign_graph = nullptr;
  CUgraphNode foreign = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&foreign_graph, 0));
  ASSERT_CU(add_empty_node(&foreign, foreign_graph, nullptr, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, update_dependencies(stream, &root_a, nullptr, 1, 7));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, update_dependencies(stream, &foreign, nullptr, 1, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, update_dependencies(stream, nullptr, nullptr, 1, 0));
  CUgraphEdgeData programmatic{};
  programmatic.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_SUPPORTED,
                  update_dependencies(stream, &root_a, &programmatic, 1, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_ILLEGAL_STATE, update_dependencies(other, &root_a, nullptr, 1, 0));

  CUgraph ended = nullptr;
  ASSERT_CU(cu.cuStreamEndCapture(stream, &ended));
  EXPECT_EQ(ended, graph);  // the application's own graph
  size_t count = 0;
  ASSERT_CU(cu.cuGraphGetNodes(graph, nullptr, &count));
  std::vector<CUgraphNode> nodes(count);
  ASSERT_CU(cu.cuGraphGetNodes(graph, nodes.data(), &count));
  std::vector<CUgraphNodeType> types;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    ASSERT_CU(cu.cuGraphNodeGetType(node, &type));
    types.push_back(type);
  }
  EXPECT_EQ(types,
            (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_EMPTY, CU_GRAPH_NODE_TYPE_EMPTY,
                                          CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMSET}));
  EXPECT_EQ(nodes[2], launched);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  uint32_t values[4] = {};
  ASSERT_CU(cu.cuMemcpyDtoH_v2(values, buffer, sizeof(values)));
  EXPECT_EQ(values[0], 2u);
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(foreign_graph));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(CaptureRulesTest, CaptureToGraphFollowsTheSameRules) {
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  CUgraphNode root = nullptr;
  ASSERT_CU(add_empty_node(&root, graph, nullptr, 0));
  CUgraph foreign_graph = nullptr;
  CUgraphNode foreign = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&foreign_graph, 0));
  ASSERT_CU(add_empty_node(&foreign, foreign_graph, nullptr, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  begin_capture_to_graph(stream, graph, &foreign, nullptr, 1, kGlobal));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  begin_capture_to_graph(nullptr, graph, nullptr, nullptr, 0, kGlobal));
  ASSERT_CU(begin_capture_to_graph(stream, graph, &root, nullptr, 1, kGlobal));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  from_other_thread(kGlobal, [&] { return cu.cuEventQuery(unrelated); }));
  EXPECT_EQ(status_of(stream), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                  update_dependencies(stream, &root, nullptr, 1, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end(stream));
  // The application's graph survives an invalidated capture into it.
  size_t count = 0;
  ASSERT_CU(cu.cuGraphGetNodes(graph, nullptr, &count));
  EXPECT_EQ(count, 1u);
  ASSERT_CU(cu.cuGraphDestroy(foreign_graph));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

// --- once the capture is over --------------------------------------------------------

TEST_F(CaptureRulesTest, EverythingIsAllowedAgainAfterEndCapture) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(blocking, kGlobal));
  ASSERT_CU(launch(blocking));
  ASSERT_CU(cu.cuEventRecord(event, blocking));
  EXPECT_CU_ERROR(CUDA_SUCCESS, end(blocking));
  for (const NamedCall& unsafe : unsafe_calls()) {
    SCOPED_TRACE(unsafe.name);
    allocate_spares();
    EXPECT_CU_ERROR(CUDA_SUCCESS, unsafe.call());
    allocate_spares();
    EXPECT_CU_ERROR(CUDA_SUCCESS, from_other_thread(kGlobal, unsafe.call));
  }
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuEventQuery(event));
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuEventSynchronize(event));
  EXPECT_CU_ERROR(CUDA_SUCCESS, launch(nullptr));
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuStreamSynchronize(blocking));
  EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuCtxSynchronize());
}

}  // namespace
}  // namespace fakecuda_test
