// fracgpu-capture-client: a tenant process that captures CUDA graphs the way serving
// frameworks do, for the capture tests. Each cycle: begin a capture on a created stream
// (in --mode global|thread_local|relaxed), record --kernels spin kernels of --kernel-us
// (sleeping --hold-ms halfway, so that the capture stays open across grant revokes) and a fill of a
// result buffer with the cycle's number (optionally on a second, forked stream joined back through
// events, and optionally through a stream-ordered allocation captured as a graph memory node), end
// the capture, instantiate, launch, synchronise and check the result. Several threads (--threads)
// run cycles at once, each on its own stream; --side-launches adds a thread that keeps launching
// uncaptured kernels on another stream meanwhile (legal next to a global capture), so that the
// shim's fences run while captures are open. --replay-seconds S: capture once, then
// replay the graph for S seconds (a graph-replaying tenant for the share tests).
// --conditional: each cycle builds a WHILE conditional node whose body is captured into
// the body graph with cuStreamBeginCaptureToGraph, and checks the loop ran to its end.
//
//   fracgpu-capture-client [--mode global|thread_local|relaxed] [--cycles N] [--threads T]
//       [--kernels K] [--kernel-us U] [--hold-ms M] [--fork] [--conditional] [--graph-alloc BYTES]
//       [--side-launches]
//       [--replay-seconds S] [--report FILE|-]
//
// The report is one JSON line: {"cycles":N,"failures":F,"errors":[...],"graph_launches":L,
// "replays":R,"seconds":S,"oom":O}. A cycle fails when any call returns an error; the first
// few errors are named (call and CUresult). --graph-alloc cycles refused with
// CUDA_ERROR_OUT_OF_MEMORY at launch count as "oom", not as failures.
// Exit status: 0 when no cycle failed, 1 otherwise; bad arguments: 2.
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// Any image loads on the simulated driver; the names resolve to its built-in kernels.
constexpr const char* kModule = ".version 6.0\n.target sm_50\n.address_size 64\n";

struct Options {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  unsigned long cycles = 20;
  unsigned long threads = 1;
  unsigned long kernels = 4;
  unsigned long kernel_us = 200;
  unsigned long hold_ms = 0;
  unsigned long long graph_alloc = 0;
  bool fork = false;
  bool conditional = false;
  bool side_launches = false;
  double replay_seconds = 0;
  std::string report = "-";
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "fracgpu-capture-client: %s\nusage: fracgpu-capture-client [--mode "
               "global|thread_local|relaxed] "
               "[--cycles N] [--threads T] [--kernels K] [--kernel-us U] [--hold-ms M] [--fork] "
               "[--conditional] [--graph-alloc BYTES] "
               "[--side-launches] [--replay-seconds S] [--report FILE|-]\n",
               problem.c_str());
  std::exit(2);
}

unsigned long long number(const char* text, unsigned long long lo, unsigned long long hi,
                          const char* flag) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (*text == '\0' || *text == '-' || errno != 0 || *end != '\0' || v < lo || v > hi)
    usage(std::string(flag) + " must be " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--fork") {
      o.fork = true;
      continue;
    }
    if (a == "--conditional") {
      o.conditional = true;
      continue;
    }
    if (a == "--side-launches") {
      o.side_launches = true;
      continue;
    }
    if (i + 1 >= argc) usage(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--mode") {
      const std::string m = v;
      if (m == "global")
        o.mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
      else if (m == "thread_local")
        o.mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
      else if (m == "relaxed")
        o.mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      else
        usage("--mode must be global, thread_local or relaxed");
    } else if (a == "--cycles")
      o.cycles = number(v, 1, 1'000'000, "--cycles");
    else if (a == "--threads")
      o.threads = number(v, 1, 64, "--threads");
    else if (a == "--kernels")
      o.kernels = number(v, 0, 1000, "--kernels");
    else if (a == "--kernel-us")
      o.kernel_us = number(v, 1, 1'000'000, "--kernel-us");
    else if (a == "--hold-ms")
      o.hold_ms = number(v, 0, 60'000, "--hold-ms");
    else if (a == "--graph-alloc")
      o.graph_alloc = number(v, 4, 1ull << 40, "--graph-alloc");
    else if (a == "--replay-seconds")
      o.replay_seconds = static_cast<double>(number(v, 1, 3600, "--replay-seconds"));
    else if (a == "--report")
      o.report = v;
    else
      usage("unknown option " + a);
  }
  return o;
}

struct Kernels {
  CUfunction spin = nullptr;
  CUfunction fill = nullptr;
  CUfunction countdown = nullptr;  // sets a conditional handle to (--*counter != 0)
};

// What every thread records; errors are kept in order, the first few by name.
struct Results {
  std::mutex mutex;
  unsigned long cycles = 0, failures = 0, oom = 0, graph_launches = 0, replays = 0;
  std::vector<std::string> errors;
  void fail(const char* what, CUresult rc) {
    std::lock_guard<std::mutex> lock(mutex);
    ++failures;
    const char* name = nullptr;
    cuGetErrorName(rc, &name);
    if (errors.size() < 8)
      errors.push_back(std::string(what) + ": " + (name ? name : std::to_string(rc)));
  }
};

#define CHECK(call)              \
  do {                           \
    const CUresult rc_ = (call); \
    if (rc_ != CUDA_SUCCESS) {   \
      results.fail(#call, rc_);  \
      return false;              \
    }                            \
  } while (0)

CUresult spin(const Kernels& k, CUstream s, unsigned long us) {
  uint32_t arg = static_cast<uint32_t>(us);
  void* params[] = {&arg};
  return cuLaunchKernel(k.spin, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
}

CUresult fill(const Kernels& k, CUstream s, CUdeviceptr dst, uint32_t value, uint64_t count) {
  void* params[] = {&dst, &value, &count};
  return cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
}

// Records one cycle's work into the capture of `s`: spins, then the result written
// (through a captured allocation when asked), on a forked stream when asked.
bool record(const Options& o, const Kernels& k, CUstream s, CUstream side, CUevent fork_at,
            CUevent join_at, CUdeviceptr out, uint32_t value, Results& results) {
  for (unsigned long i = 0; i < o.kernels; ++i) {
    CHECK(spin(k, s, o.kernel_us));
    // Keeps the capture open across the scheduler's grant revokes (a slow framework).
    if (o.hold_ms > 0 && i == o.kernels / 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));
  }
  CUstream writer = s;
  if (o.fork) {
    CHECK(cuEventRecord(fork_at, s));
    CHECK(cuStreamWaitEvent(side, fork_at, 0));
    writer = side;
  }
  if (o.graph_alloc > 0) {
    CUdeviceptr scratch = 0;
    CHECK(cuMemAllocAsync(&scratch, o.graph_alloc, writer));
    CHECK(fill(k, writer, scratch, value, 1));
    CHECK(cuMemcpyDtoDAsync(out, scratch, sizeof(uint32_t), writer));
    CHECK(cuMemFreeAsync(scratch, writer));
  } else {
    CHECK(fill(k, writer, out, value, 1));
  }
  if (o.fork) {
    CHECK(cuEventRecord(join_at, side));
    CHECK(cuStreamWaitEvent(s, join_at, 0));
  }
  return true;
}

bool capture(const Options& o, const Kernels& k, CUstream s, CUstream side, CUevent fork_at,
             CUevent join_at, CUdeviceptr out, uint32_t value, CUgraphExec* exec,
             Results& results) {
  CHECK(cuStreamBeginCapture_v2(s, o.mode));
  const bool recorded = record(o, k, s, side, fork_at, join_at, out, value, results);
  CUgraph graph = nullptr;
  const CUresult ended = cuStreamEndCapture(s, &graph);
  if (!recorded) {
    if (graph != nullptr) cuGraphDestroy(graph);
    return false;
  }
  CHECK(ended);
  const CUresult made = cuGraphInstantiateWithFlags(exec, graph, 0);
  cuGraphDestroy(graph);
  CHECK(made);
  return true;
}

// --conditional: a WHILE node whose body is filled by capture into the body graph
// (cuStreamBeginCaptureToGraph, as NVIDIA's graphConditionalNodes sample does): spins,
// then a countdown of the counter in `out` that ends the loop at 0. The launch sets the
// counter to kLoops first; the check expects 0.
constexpr uint32_t kLoops = 3;
bool capture_conditional(const Options& o, const Kernels& k, CUcontext ctx, CUstream s,
                         CUdeviceptr out, CUgraphExec* exec, Results& results) {
  CUgraph graph = nullptr;
  CHECK(cuGraphCreate(&graph, 0));
  CUgraphConditionalHandle handle = 0;
  CHECK(cuGraphConditionalHandleCreate(&handle, graph, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = handle;
  params.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  params.conditional.size = 1;
  params.conditional.ctx = ctx;
  CUgraphNode node = nullptr;
  CHECK(cuGraphAddNode(&node, graph, nullptr, nullptr, 0, &params));
  CUgraph body = params.conditional.phGraph_out[0];
  CHECK(cuStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0, o.mode));
  bool recorded = true;
  for (unsigned long i = 0; i < o.kernels && recorded; ++i) {
    recorded = spin(k, s, o.kernel_us) == CUDA_SUCCESS;
    if (o.hold_ms > 0 && i == o.kernels / 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(o.hold_ms));
  }
  uint64_t h = handle;
  void* countdown_params[] = {&h, &out};
  const CUresult counted =
      cuLaunchKernel(k.countdown, 1, 1, 1, 1, 1, 1, 0, s, countdown_params, nullptr);
  CUgraph ignored = nullptr;
  const CUresult ended = cuStreamEndCapture(s, &ignored);
  if (!recorded) results.fail("captured spin", CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(counted);
  CHECK(ended);
  const CUresult made = cuGraphInstantiateWithFlags(exec, graph, 0);
  cuGraphDestroy(graph);
  CHECK(made);
  return recorded;
}

bool conditional_cycle(const Options& o, const Kernels& k, CUcontext ctx, CUstream s,
                       CUdeviceptr out, Results& results) {
  CUgraphExec exec = nullptr;
  if (!capture_conditional(o, k, ctx, s, out, &exec, results)) return false;
  CHECK(cuMemsetD32Async(out, kLoops, 1, s));
  CHECK(cuGraphLaunch(exec, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuGraphExecDestroy(exec));
  uint32_t left = 1;
  CHECK(cuMemcpyDtoH(&left, out, sizeof(left)));
  if (left != 0) {
    results.fail("conditional loop check", CUDA_ERROR_UNKNOWN);
    return false;
  }
  std::lock_guard<std::mutex> lock(results.mutex);
  ++results.graph_launches;
  return true;
}

// One capture cycle: capture, instantiate, launch, check. A launch refused for graph
// memory (the cap) counts as "oom".
bool cycle(const Options& o, const Kernels& k, CUstream s, CUstream side, CUevent fork_at,
           CUevent join_at, CUdeviceptr out, uint32_t value, Results& results) {
  CUgraphExec exec = nullptr;
  if (!capture(o, k, s, side, fork_at, join_at, out, value, &exec, results)) return false;
  const CUresult launched = cuGraphLaunch(exec, s);
  if (launched == CUDA_ERROR_OUT_OF_MEMORY && o.graph_alloc > 0) {
    cuGraphExecDestroy(exec);
    std::lock_guard<std::mutex> lock(results.mutex);
    ++results.oom;
    return true;
  }
  CHECK(launched);
  CHECK(cuStreamSynchronize(s));
  CHECK(cuGraphExecDestroy(exec));
  uint32_t seen = 0;
  CHECK(cuMemcpyDtoH(&seen, out, sizeof(seen)));
  if (seen != value) {
    results.fail("result check", CUDA_ERROR_UNKNOWN);
    return false;
  }
  std::lock_guard<std::mutex> lock(results.mutex);
  ++results.graph_launches;
  return true;
}

bool worker(const Options& o, const Kernels& k, CUcontext ctx, unsigned long index,
            Results& results) {
  CHECK(cuCtxSetCurrent(ctx));
  CUstream s = nullptr, side = nullptr;
  CUevent fork_at = nullptr, join_at = nullptr;
  CUdeviceptr out = 0;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&fork_at, CU_EVENT_DISABLE_TIMING));
  CHECK(cuEventCreate(&join_at, CU_EVENT_DISABLE_TIMING));
  CHECK(cuMemAlloc(&out, sizeof(uint32_t)));
  bool ok = true;
  if (o.replay_seconds > 0) {
    CUgraphExec exec = nullptr;
    if (!capture(o, k, s, side, fork_at, join_at, out, 7, &exec, results)) return false;
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(o.replay_seconds);
    unsigned long replays = 0;
    while (std::chrono::steady_clock::now() < end) {
      CHECK(cuGraphLaunch(exec, s));
      if (++replays % 4 == 0) CHECK(cuStreamSynchronize(s));
    }
    CHECK(cuStreamSynchronize(s));
    std::lock_guard<std::mutex> lock(results.mutex);
    results.replays += replays;
    return true;
  }
  for (unsigned long c = 0; c < o.cycles; ++c) {
    const uint32_t value = static_cast<uint32_t>(index * 1'000'000 + c + 1);
    const bool passed = o.conditional ? conditional_cycle(o, k, ctx, s, out, results)
                                      : cycle(o, k, s, side, fork_at, join_at, out, value, results);
    std::lock_guard<std::mutex> lock(results.mutex);
    ++results.cycles;
    ok = ok && passed;
  }
  cuMemFree(out);
  cuStreamDestroy(s);
  cuStreamDestroy(side);
  return ok;
}

// Uncaptured launches on a stream of their own while the captures run (never a sync or
// query: those are the application's own "unsafe" calls next to a global capture). At
// most kSideLaunches kernels of 20 us, so that the final synchronisation stays short.
void side_traffic(const Kernels& k, CUcontext ctx, const std::atomic<bool>& stop,
                  Results& results) {
  constexpr int kSideLaunches = 5000;
  if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return;
  CUstream s = nullptr;
  if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return;
  for (int i = 0; i < kSideLaunches && !stop.load(); ++i) {
    const CUresult rc = spin(k, s, 20);
    if (rc != CUDA_SUCCESS) {
      results.fail("side cuLaunchKernel", rc);
      break;
    }
  }
}

void write_report(const Options& o, Results& r, double seconds) {
  std::string errors = "[";
  for (std::size_t i = 0; i < r.errors.size(); ++i)
    errors += (i ? ",\"" : "\"") + r.errors[i] + "\"";
  errors += "]";
  char line[4096];
  std::snprintf(
      line, sizeof(line),
      "{\"cycles\":%lu,\"failures\":%lu,\"oom\":%lu,\"graph_launches\":%lu,\"replays\":%lu,"
      "\"seconds\":%.3f,\"errors\":%s}\n",
      r.cycles, r.failures, r.oom, r.graph_launches, r.replays, seconds, errors.c_str());
  FILE* f = o.report == "-" ? stdout : std::fopen(o.report.c_str(), "w");
  if (f == nullptr) return;
  std::fputs(line, f);
  if (f != stdout) std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Results results;
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  Kernels k;
  CUdevice dev = 0;
  auto setup = [&]() -> bool {
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&module, kModule));
    CHECK(cuModuleGetFunction(&k.spin, module, "fracgpu_fake_spin"));
    CHECK(cuModuleGetFunction(&k.fill, module, "fracgpu_fake_fill"));
    if (o.conditional)
      CHECK(cuModuleGetFunction(&k.countdown, module, "fracgpu_fake_countdown_condition"));
    return true;
  };
  const auto start = std::chrono::steady_clock::now();
  bool ok = setup();
  if (ok) {
    std::atomic<bool> stop{false};
    std::thread side;
    if (o.side_launches)
      side = std::thread(side_traffic, std::cref(k), ctx, std::cref(stop), std::ref(results));
    std::vector<std::thread> threads;
    std::vector<char> passed(o.threads, 0);
    for (unsigned long t = 0; t < o.threads; ++t)
      threads.emplace_back([&, t] { passed[t] = worker(o, k, ctx, t, results) ? 1 : 0; });
    for (auto& t : threads) t.join();
    stop.store(true);
    if (side.joinable()) side.join();
    cuCtxSynchronize();
    for (char p : passed) ok = ok && p;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_report(o, results, seconds);
  return ok && results.failures == 0 ? 0 : 1;
}
