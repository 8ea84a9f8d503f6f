// fracgpu-bench-client's plumbing: loading the driver (dlopen "libcuda.so.1", so LD_PRELOAD of
// the shim catches it the way it catches XLA or Triton), options, opening the GPU (the PTX
// module that the simulated driver resolves by name and a real driver JIT-compiles), the one
// JSON line of a result, files, clocks and statistics. Off every measured path.
#include "client.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace fgbench {

Driver d{};
Options g_opts;
std::atomic<bool> g_stop{false};

namespace {

// The spin kernel busy-waits on %globaltimer for its argument in microseconds: it holds its
// SMs for that long whatever the clock; one block per resident slot fills the GPU.
constexpr const char* kPtx = R"(
.version 6.0
.target sm_50
.address_size 64
.visible .entry fracgpu_fake_spin(.param .u32 p0)
{
  .reg .pred %p;
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  ld.param.u32 %r1, [p0];
  cvt.u64.u32 %rd1, %r1;
  mul.lo.u64 %rd2, %rd1, 1000;
  mov.u64 %rd3, %globaltimer;
$L_spin:
  mov.u64 %rd4, %globaltimer;
  sub.u64 %rd5, %rd4, %rd3;
  setp.lt.u64 %p, %rd5, %rd2;
  @%p bra $L_spin;
  ret;
}
.visible .entry fracgpu_fake_empty()
{
  ret;
}
)";

unsigned long long number(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x < lo || x > hi) {
    std::fprintf(stderr, "fracgpu-bench-client: bad value for %s: %s\n", flag.c_str(), v.c_str());
    std::exit(2);
  }
  return static_cast<unsigned long long>(x);
}

double seconds_value(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x > 0) || !std::isfinite(x)) number(flag, "x", 0, 0);
  return x;
}

}  // namespace

void apply_args(Options& o, const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); i += 2) {
    const std::string& a = args[i];
    if (i + 1 >= args.size()) {
      std::fprintf(stderr, "fracgpu-bench-client: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    const std::string& v = args[i + 1];
    if (a == "--seconds")
      o.seconds = seconds_value(a, v);
    else if (a == "--kernel-us")
      o.kernel_us = number(a, v, 1, 1e7);
    else if (a == "--sync-every")
      o.sync_every = number(a, v, 1, 1e5);
    else if (a == "--bytes")
      o.bytes = number(a, v, 1, 1e15);
    else if (a == "--count")
      o.count = number(a, v, 1, 1e9);
    else if (a == "--reps")
      o.reps = number(a, v, 1, 1000);
    else if (a == "--graph-kernels")
      o.graph_kernels = number(a, v, 1, 10000);
    else if (a == "--period-ms")
      o.period_ms = number(a, v, 1, 1e6);
    else if (a == "--think-us")
      o.think_us = number(a, v, 0, 1e8);
    else if (a == "--requests")
      o.requests = number(a, v, 1, 1e8);
    else if (a == "--warmup-ms")
      o.warmup_ms = number(a, v, 0, 1e6);
    else if (a == "--blocks")
      o.blocks = number(a, v, 0, 1e7);
    else if (a == "--idle-s")
      o.idle_s = number(a, v, 1, 1e6);
    else if (a == "--seed")
      o.seed = number(a, v, 0, 1e15);
    else if (a == "--arrival")
      o.arrival = v;
    else if (a == "--barrier")
      o.barrier = v;
    else if (a == "--ready")
      o.ready = v;
    else if (a == "--stop-file")
      o.stop_file = v;
    else if (a == "--out")
      o.out = v;
    else if (a == "--tag")
      o.tag = v;
    else if (a == "--serve")
      o.serve = v;
    else {
      std::fprintf(stderr, "fracgpu-bench-client: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.arrival != "regular" && o.arrival != "poisson") {
    std::fprintf(stderr, "fracgpu-bench-client: --arrival must be regular or poisson\n");
    std::exit(2);
  }
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) {
    std::fprintf(stderr, "usage: fracgpu-bench-client MODE [options] (see bench_client.cpp)\n");
    std::exit(2);
  }
  o.mode = argv[1];
  apply_args(o, std::vector<std::string>(argv + 2, argv + argc));
  return o;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void emit(const Options& o, const std::string& body) {
  std::string line = "{" + body + ",\"mode\":\"" + o.mode + "\",\"tag\":\"" + o.tag +
                     "\",\"pid\":" + std::to_string(getpid()) + "}\n";
  if (o.out.empty()) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
    return;
  }
  const std::string tmp = o.out + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) std::exit(1);
  std::fputs(line.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), o.out.c_str());  // the harness never sees half a line
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

void fail(const Options& o, const std::string& what) {
  std::fprintf(stderr, "fracgpu-bench-client: %s\n", what.c_str());
  std::string esc;
  for (char c : what) esc += (c == '"' || c == '\\') ? '\'' : c;
  emit(o, "\"ok\":false,\"error\":\"" + esc + "\"");
  std::exit(1);
}

void check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  const char* name = "?";
  if (d.GetErrorName != nullptr) d.GetErrorName(rc, &name);
  fail(g_opts, std::string(what) + " failed: " + name);
}

void load_driver(const Options& o) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) fail(o, std::string("dlopen libcuda.so.1: ") + dlerror());
  auto sym = [&](const char* name) {
    void* p = dlsym(h, name);
    if (p == nullptr) fail(o, std::string("missing driver symbol ") + name);
    return p;
  };
#define FG_SYM(field, name) d.field = reinterpret_cast<decltype(d.field)>(sym(name))
  FG_SYM(Init, "cuInit");
  FG_SYM(GetErrorName, "cuGetErrorName");
  FG_SYM(DeviceGet, "cuDeviceGet");
  FG_SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
  FG_SYM(DeviceGetName, "cuDeviceGetName");
  FG_SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  FG_SYM(CtxSetCurrent, "cuCtxSetCurrent");
  FG_SYM(ModuleLoadData, "cuModuleLoadData");
  FG_SYM(ModuleGetFunction, "cuModuleGetFunction");
  FG_SYM(LaunchKernel, "cuLaunchKernel");
  FG_SYM(StreamCreate, "cuStreamCreate");
  FG_SYM(StreamSynchronize, "cuStreamSynchronize");
  FG_SYM(MemAlloc, "cuMemAlloc_v2");
  FG_SYM(MemFree, "cuMemFree_v2");
  FG_SYM(MemGetInfo, "cuMemGetInfo_v2");
  FG_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  FG_SYM(StreamBeginCapture, "cuStreamBeginCapture_v2");
  FG_SYM(StreamEndCapture, "cuStreamEndCapture");
  FG_SYM(GraphInstantiate, "cuGraphInstantiateWithFlags");
  FG_SYM(GraphLaunch, "cuGraphLaunch");
#undef FG_SYM
}

Gpu open_gpu(const Options& o) {
  Gpu g;
  check(d.Init(0), "cuInit");
  check(d.DeviceGet(&g.dev, 0), "cuDeviceGet");
  char name[256] = {0};
  check(d.DeviceGetName(name, sizeof name - 1, g.dev), "cuDeviceGetName");
  g.name = name;
  check(d.PrimaryCtxRetain(&g.ctx, g.dev), "cuDevicePrimaryCtxRetain");
  check(d.CtxSetCurrent(g.ctx), "cuCtxSetCurrent");
  CUmodule module = nullptr;
  check(d.ModuleLoadData(&module, kPtx), "cuModuleLoadData");
  check(d.ModuleGetFunction(&g.spin, module, "fracgpu_fake_spin"), "cuModuleGetFunction spin");
  check(d.ModuleGetFunction(&g.empty, module, "fracgpu_fake_empty"), "cuModuleGetFunction empty");
  check(d.StreamCreate(&g.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  // Fill the GPU: 8 blocks of 128 threads per SM stay resident together, so a spin kernel
  // holds every SM for --kernel-us (the simulated device ignores the shape).
  int sms = 1;
  d.DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g.dev);
  g.grid = o.blocks > 0 ? o.blocks : static_cast<unsigned>(std::max(1, sms) * 8);
  g.block = 128;
  return g;
}

bool exists(const std::string& path) {
  return !path.empty() && access(path.c_str(), F_OK) == 0;
}

void touch(const std::string& path) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f != nullptr) std::fclose(f);
}

void ready_and_wait(const Options& o) {
  touch(o.ready);
  const double end = now_s() + 120;
  while (!o.barrier.empty() && !exists(o.barrier) && !g_stop.load()) {
    if (now_s() > end) fail(o, "the barrier " + o.barrier + " did not appear within 120 s");
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

void sleep_precise(double seconds) {
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::duration_cast<clock::duration>(
                                        std::chrono::duration<double>(seconds));
  // The kernel wakes a sleeper up to a timer slack (and a VM's scheduling) late: sleep to
  // 200 us before, then spin, so that the wake-up is never part of a measured latency.
  const auto coarse = until - std::chrono::microseconds(200);
  if (clock::now() < coarse) std::this_thread::sleep_until(coarse);
  while (clock::now() < until) {
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double pct(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<std::size_t>(rank, 1)) - 1];
}

std::string list(const std::vector<double>& v, int precision) {
  std::ostringstream s;
  s.precision(precision);
  s << std::fixed << "[";
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  s << "]";
  return s.str();
}

std::string head(const Gpu& g, const char* unit) {
  return "\"ok\":true,\"device\":\"" + g.name + "\",\"unit\":\"" + unit + "\"";
}

}  // namespace fgbench
