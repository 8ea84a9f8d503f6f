// fracgpu-bench-client: the driver-API workloads of the benchmark suite (bench/gpu/run.sh).
// One binary runs every workload kind that needs no framework, on the simulated GPU (CI) and
// on a real NVIDIA GPU alike: the driver is dlopen'ed ("libcuda.so.1", so LD_PRELOAD of the
// shim catches it the way it catches XLA or Triton) and the kernels are PTX that the simulated
// driver resolves by name (fracgpu_fake_spin / fracgpu_fake_empty) and a real driver JIT-compiles
// (the spin kernel busy-waits on %globaltimer, one block per resident slot so that it fills
// every SM). Not linked against libcuda: tools/pack_devrun.sh --with packs it as is.
//
//   fracgpu-bench-client MODE [--seconds S] [--kernel-us N] [--sync-every K] [--bytes B]
//       [--count N] [--reps R] [--graph-kernels G] [--period-ms P] [--think-us T]
//       [--arrival regular|poisson] [--requests N] [--warmup-ms W] [--blocks N]
//       [--barrier FILE] [--ready FILE] [--stop-file FILE] [--out FILE] [--tag TEXT]
//
// MODE: launch (empty-kernel launch rate: --count launches then one sync, --reps times),
// alloc (cuMemAlloc+cuMemFree pairs of --bytes, --count per rep), spin (compute-bound:
// --kernel-us kernels back to back), copy (memory-bound: --bytes device-to-device copies),
// mixed (a "training step": spin kernel + copy + spin), graph (a captured graph of
// --graph-kernels spin kernels, replayed), onoff (spin, on for --period-ms then off as long),
// latency (requests of one --kernel-us kernel + sync; regular: --think-us after each reply;
// poisson: open loop, exponential gaps of mean --think-us, latency from the arrival), mem
// (cuMemGetInfo, first-allocation latency, fill in --bytes chunks until out of memory).
// Throughput modes record samples [t, units] (t: seconds since t_start, wall clock) at each
// sync so that the harness can cut any common window; "unit" is one kernel / copy / step /
// replay. The result is ONE JSON line ({"ok": ...}) on --out (atomically) or stdout.
// Hot path: one cuLaunchKernel (or copy) per unit and a sync per --sync-every; nothing else.
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

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

// The driver, dlopen'ed: ABI names (the _v2 ones where cuda.h maps to them).
struct Driver {
  decltype(&::cuInit) Init;
  decltype(&::cuGetErrorName) GetErrorName;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuDeviceGetName) DeviceGetName;
  decltype(&::cuDevicePrimaryCtxRetain) PrimaryCtxRetain;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuModuleLoadData) ModuleLoadData;
  decltype(&::cuModuleGetFunction) ModuleGetFunction;
  decltype(&::cuLaunchKernel) LaunchKernel;
  decltype(&::cuStreamCreate) StreamCreate;
  decltype(&::cuStreamSynchronize) StreamSynchronize;
  decltype(&::cuMemAlloc_v2) MemAlloc;
  decltype(&::cuMemFree_v2) MemFree;
  decltype(&::cuMemGetInfo_v2) MemGetInfo;
  decltype(&::cuMemcpyDtoDAsync_v2) MemcpyDtoDAsync;
  decltype(&::cuStreamBeginCapture_v2) StreamBeginCapture;
  decltype(&::cuStreamEndCapture) StreamEndCapture;
  decltype(&::cuGraphInstantiateWithFlags) GraphInstantiate;
  decltype(&::cuGraphLaunch) GraphLaunch;
};

struct Options {
  std::string mode, barrier, ready, stop_file, out, tag, arrival = "regular";
  double seconds = 5;
  unsigned kernel_us = 1000, sync_every = 8, graph_kernels = 8, period_ms = 100, blocks = 0;
  unsigned long long bytes = 64ull << 20, count = 20000, reps = 5, requests = 1000;
  unsigned long think_us = 1000, warmup_ms = 200;
};

std::atomic<bool> g_stop{false};
Driver d{};
std::string g_tag;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void emit(const Options& o, const std::string& body) {
  std::string line = "{" + body + ",\"mode\":\"" + o.mode + "\",\"tag\":\"" + g_tag +
                     "\",\"pid\":" + std::to_string(getpid()) + "}\n";
  if (o.out.empty()) {
    std::fputs(line.c_str(), stdout);
    return;
  }
  const std::string tmp = o.out + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) std::exit(1);
  std::fputs(line.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), o.out.c_str());
  std::fputs(line.c_str(), stdout);
}

[[noreturn]] void fail(const Options& o, const std::string& what) {
  std::fprintf(stderr, "fracgpu-bench-client: %s\n", what.c_str());
  std::string esc;
  for (char c : what) esc += (c == '"' || c == '\\') ? '\'' : c;
  emit(o, "\"ok\":false,\"error\":\"" + esc + "\"");
  std::exit(1);
}

Options g_opts;
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

unsigned long long number(const std::string& flag, const char* v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*v == '\0' || *end != '\0' || !std::isfinite(x) || x < lo || x > hi) {
    std::fprintf(stderr, "fracgpu-bench-client: bad value for %s: %s\n", flag.c_str(), v);
    std::exit(2);
  }
  return static_cast<unsigned long long>(x);
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) {
    std::fprintf(stderr, "usage: fracgpu-bench-client MODE [options] (see the source's banner)\n");
    std::exit(2);
  }
  o.mode = argv[1];
  for (int i = 2; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "fracgpu-bench-client: %s needs a value\n", a.c_str());
      std::exit(2);
    }
    const char* v = argv[i + 1];
    if (a == "--seconds") {
      o.seconds = std::strtod(v, nullptr);
      if (!(o.seconds > 0)) number(a, "x", 0, 0);
    } else if (a == "--kernel-us")
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
    else {
      std::fprintf(stderr, "fracgpu-bench-client: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.arrival != "regular" && o.arrival != "poisson") {
    std::fprintf(stderr, "fracgpu-bench-client: --arrival must be regular or poisson\n");
    std::exit(2);
  }
  return o;
}

bool exists(const std::string& path) {
  return !path.empty() && access(path.c_str(), F_OK) == 0;
}

void touch(const std::string& path) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f != nullptr) std::fclose(f);
}

// Ready file, then the barrier (up to 120 s): every tenant of a phase starts together.
void ready_and_wait(const Options& o) {
  touch(o.ready);
  const double end = now_s() + 120;
  while (!o.barrier.empty() && !exists(o.barrier) && !g_stop.load()) {
    if (now_s() > end) fail(o, "the barrier " + o.barrier + " did not appear within 120 s");
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

struct Gpu {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUfunction spin = nullptr, empty = nullptr;
  CUstream stream = nullptr;
  unsigned grid = 1, block = 1;
  std::string name;
};

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

void spin(const Gpu& g, unsigned us) {
  void* params[] = {&us};
  check(d.LaunchKernel(g.spin, g.grid, 1, 1, g.block, 1, 1, 0, g.stream, params, nullptr),
        "cuLaunchKernel");
}

void sync(const Gpu& g) {
  check(d.StreamSynchronize(g.stream), "cuStreamSynchronize");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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

void run_launch(const Options& o, const Gpu& g) {
  std::vector<double> ns;
  for (unsigned long long i = 0; i < o.count / 10 + 1; ++i)
    check(d.LaunchKernel(g.empty, 1, 1, 1, 1, 1, 1, 0, g.stream, nullptr, nullptr), "launch");
  sync(g);
  for (unsigned long long r = 0; r < o.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned long long i = 0; i < o.count; ++i)
      check(d.LaunchKernel(g.empty, 1, 1, 1, 1, 1, 1, 0, g.stream, nullptr, nullptr), "launch");
    sync(g);
    ns.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(o.count));
  }
  emit(o, head(g, "launch") + ",\"value\":" + std::to_string(median(ns)) +
              ",\"value_unit\":\"ns_per_launch\",\"reps\":" + list(ns, 2));
}

void run_alloc(const Options& o, const Gpu& g) {
  std::vector<double> us;
  for (unsigned long long r = 0; r < o.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned long long i = 0; i < o.count; ++i) {
      CUdeviceptr p = 0;
      check(d.MemAlloc(&p, o.bytes), "cuMemAlloc");
      check(d.MemFree(p), "cuMemFree");
    }
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(o.count));
  }
  emit(o, head(g, "pair") + ",\"value\":" + std::to_string(median(us)) +
              ",\"value_unit\":\"us_per_pair\",\"reps\":" + list(us, 3));
}

void run_mem(const Options& o, const Gpu& g) {
  size_t free0 = 0, total = 0;
  check(d.MemGetInfo(&free0, &total), "cuMemGetInfo");
  CUdeviceptr first = 0;
  const auto t0 = std::chrono::steady_clock::now();
  check(d.MemAlloc(&first, 1 << 20), "cuMemAlloc 1 MiB");
  const double first_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  d.MemFree(first);
  std::vector<CUdeviceptr> held;
  unsigned long long filled = 0;
  bool oom = false;
  const double end = now_s() + o.seconds;
  while (now_s() < end) {
    CUdeviceptr p = 0;
    const CUresult rc = d.MemAlloc(&p, o.bytes);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
      oom = true;
      break;
    }
    check(rc, "cuMemAlloc (fill)");
    held.push_back(p);
    filled += o.bytes;
  }
  emit(o, head(g, "bytes") + ",\"total\":" + std::to_string(total) +
              ",\"free\":" + std::to_string(free0) + ",\"filled\":" + std::to_string(filled) +
              ",\"oom\":" + (oom ? "true" : "false") + ",\"first_alloc_us\":" +
              std::to_string(first_us) + ",\"chunk\":" + std::to_string(o.bytes));
  // With --stop-file: hold what was filled (reported above) until the file appears (or 120 s),
  // so that another tenant can fill next to it (the overcommit check).
  const double hold_end = now_s() + 120;
  while (!o.stop_file.empty() && !exists(o.stop_file) && !g_stop.load() && now_s() < hold_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (CUdeviceptr p : held) d.MemFree(p);
}

// The throughput modes: one "unit" of work, then a sample at each sync.
struct Work {
  const Gpu* g;
  const Options* o;
  CUdeviceptr a = 0, b = 0;
  CUgraphExec exec = nullptr;
  void unit() const {
    const std::string& m = o->mode;
    if (m == "spin" || m == "onoff") {
      spin(*g, o->kernel_us);
    } else if (m == "copy") {
      check(d.MemcpyDtoDAsync(b, a, o->bytes, g->stream), "cuMemcpyDtoDAsync");
    } else if (m == "mixed") {  // forward, a parameter/activation copy, backward
      spin(*g, o->kernel_us);
      check(d.MemcpyDtoDAsync(b, a, o->bytes, g->stream), "cuMemcpyDtoDAsync");
      spin(*g, o->kernel_us * 2);
    } else {
      check(d.GraphLaunch(exec, g->stream), "cuGraphLaunch");
    }
  }
};

void run_throughput(const Options& o, const Gpu& g) {
  Work w{&g, &o};
  const char* unit = "kernel";
  if (o.mode == "copy" || o.mode == "mixed") {
    check(d.MemAlloc(&w.a, o.bytes), "cuMemAlloc a");
    check(d.MemAlloc(&w.b, o.bytes), "cuMemAlloc b");
    unit = o.mode == "copy" ? "copy" : "step";
  }
  if (o.mode == "graph") {
    unit = "replay";
    check(d.StreamBeginCapture(g.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin capture");
    for (unsigned i = 0; i < o.graph_kernels; ++i) spin(g, o.kernel_us);
    CUgraph graph = nullptr;
    check(d.StreamEndCapture(g.stream, &graph), "cuStreamEndCapture");
    check(d.GraphInstantiate(&w.exec, graph, 0), "cuGraphInstantiate");
  }
  const double warm_end = now_s() + o.warmup_ms / 1000.0;
  do {
    w.unit();
    sync(g);
  } while (now_s() < warm_end);
  ready_and_wait(o);
  const double t0 = now_s(), end = t0 + o.seconds;
  const double period = o.period_ms / 1000.0;
  std::vector<double> ts{0}, units{0};
  unsigned long long done = 0;
  for (;;) {
    if (o.mode == "onoff" && std::fmod(now_s() - t0, 2 * period) >= period) {
      // Off half of the period: idle until the next on edge (or the end).
      const double rel = now_s() - t0;
      const double next = (std::floor(rel / (2 * period)) + 1) * 2 * period;
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(next, o.seconds) - rel));
    } else {
      for (unsigned i = 0; i < o.sync_every; ++i) w.unit();
      sync(g);
      done += o.sync_every;
    }
    const double t = now_s();
    ts.push_back(t - t0);
    units.push_back(static_cast<double>(done));
    if (t >= end || g_stop.load() || exists(o.stop_file)) break;
  }
  std::vector<double> samples;
  std::ostringstream s;
  s.precision(6);
  s << std::fixed << "[";
  for (std::size_t i = 0; i < ts.size(); ++i)
    s << (i ? "," : "") << "[" << ts[i] << "," << static_cast<unsigned long long>(units[i]) << "]";
  s << "]";
  const double secs = ts.back();
  emit(o, head(g, unit) + ",\"t_start\":" + std::to_string(t0) +
              ",\"t_end\":" + std::to_string(t0 + secs) + ",\"seconds\":" + std::to_string(secs) +
              ",\"units\":" + std::to_string(done) +
              ",\"rate\":" + std::to_string(secs > 0 ? static_cast<double>(done) / secs : 0) +
              ",\"kernel_us\":" + std::to_string(o.kernel_us) +
              ",\"bytes\":" + std::to_string(o.bytes) + ",\"samples\":" + s.str());
}

double pct(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<std::size_t>(rank, 1)) - 1];
}

void run_latency(const Options& o, const Gpu& g) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 50; ++i) {  // warm-up (JIT, first-launch costs, the tenant's grant)
    spin(g, o.kernel_us);
    sync(g);
  }
  ready_and_wait(o);
  if (o.warmup_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.warmup_ms));
  std::mt19937_64 rng(12345);
  std::exponential_distribution<double> gap(1e6 / std::max<double>(1.0, o.think_us));
  std::vector<double> lat_us;
  const double t0 = now_s(), end = t0 + o.seconds;
  auto arrival = clock::now();
  while (lat_us.size() < o.requests && now_s() < end && !g_stop.load()) {
    if (o.arrival == "poisson") {
      arrival +=
          std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(gap(rng)));
      std::this_thread::sleep_until(arrival);
    } else {
      arrival = clock::now();
    }
    spin(g, o.kernel_us);
    sync(g);
    lat_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - arrival).count());
    if (o.arrival == "regular" && o.think_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(o.think_us));
  }
  const double t1 = now_s();
  touch(o.stop_file);  // the batch tenants of the phase stop measuring
  std::vector<double> s = lat_us;
  std::sort(s.begin(), s.end());
  auto ms = [&](double p) { return std::to_string(pct(s, p) / 1000.0); };
  emit(o, head(g, "request") + ",\"arrival\":\"" + o.arrival +
              "\",\"t_start\":" + std::to_string(t0) + ",\"t_end\":" + std::to_string(t1) +
              ",\"requests\":" + std::to_string(lat_us.size()) + ",\"p50_ms\":" + ms(0.5) +
              ",\"p90_ms\":" + ms(0.9) + ",\"p99_ms\":" + ms(0.99) + ",\"p999_ms\":" + ms(0.999) +
              ",\"max_ms\":" + ms(1.0) + ",\"kernel_us\":" + std::to_string(o.kernel_us) +
              ",\"lat_us\":" + list(lat_us, 1));
}

}  // namespace

int main(int argc, char** argv) {
  g_opts = parse(argc, argv);
  const Options& o = g_opts;
  g_tag = o.tag;
  struct sigaction action {};
  action.sa_handler = [](int) { g_stop.store(true); };
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  load_driver(o);
  const Gpu g = open_gpu(o);
  if (o.mode == "launch")
    run_launch(o, g);
  else if (o.mode == "alloc")
    run_alloc(o, g);
  else if (o.mode == "mem")
    run_mem(o, g);
  else if (o.mode == "latency")
    run_latency(o, g);
  else if (o.mode == "spin" || o.mode == "copy" || o.mode == "mixed" || o.mode == "graph" ||
           o.mode == "onoff")
    run_throughput(o, g);
  else
    fail(o, "unknown mode " + o.mode);
  return 0;
}
