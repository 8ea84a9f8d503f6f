// fracgpu-bench-client's shared pieces (bench/gpu/clients/*.cpp): the options of every mode,
// the dlopen'ed driver, the opened GPU (context, stream, the spin/empty PTX kernels), the one
// JSON line each measurement prints, and the warm-worker protocol (--serve). Nothing here is
// on a measured path except spin() and sync(): one cuLaunchKernel / cuStreamSynchronize each.
#pragma once

#include <cuda.h>

#include <atomic>
#include <string>
#include <vector>

namespace fgbench {

struct Options {
  std::string mode, barrier, ready, stop_file, out, tag, serve, arrival = "regular";
  double seconds = 5;
  unsigned kernel_us = 1000, sync_every = 8, graph_kernels = 8, period_ms = 100, blocks = 0;
  unsigned long long bytes = 64ull << 20, count = 20000, reps = 5, requests = 1000;
  unsigned long think_us = 1000, warmup_ms = 200, idle_s = 900;
  unsigned long seed = 12345;
};

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

struct Gpu {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUfunction spin = nullptr, empty = nullptr;
  CUstream stream = nullptr;
  unsigned grid = 1, block = 1;
  std::string name;
};

extern Driver d;
extern Options g_opts;  // the options of the measurement under way (check() reports to its --out)
extern std::atomic<bool> g_stop;

// Options: argv (after MODE) or one round's tokens, applied over `o`; exits 2 on a bad one.
void apply_args(Options& o, const std::vector<std::string>& args);
Options parse(int argc, char** argv);

void load_driver(const Options& o);
Gpu open_gpu(const Options& o);
void check(CUresult rc, const char* what);
[[noreturn]] void fail(const Options& o, const std::string& what);
void emit(const Options& o, const std::string& body);

double now_s();  // wall clock (seconds since the epoch): windows are cut across processes
bool exists(const std::string& path);
void touch(const std::string& path);
void ready_and_wait(const Options& o);  // --ready, then the --barrier (up to 120 s)
void sleep_precise(double seconds);     // sleep, then spin the last 200 us: no wake-up lateness

inline void spin(const Gpu& g, unsigned us) {
  void* params[] = {&us};
  check(d.LaunchKernel(g.spin, g.grid, 1, 1, g.block, 1, 1, 0, g.stream, params, nullptr),
        "cuLaunchKernel");
}
inline void sync(const Gpu& g) {
  check(d.StreamSynchronize(g.stream), "cuStreamSynchronize");
}

double median(std::vector<double> v);
double pct(const std::vector<double>& sorted, double p);  // nearest rank
std::string list(const std::vector<double>& v, int precision);
std::string head(const Gpu& g, const char* unit);  // "ok":true,"device":...,"unit":...

// The latency mode (latency.cpp): one measurement with the options in `o`.
void run_latency(const Options& o, const Gpu& g);
void prepare_latency(const Options& o, const Gpu& g);

}  // namespace fgbench
