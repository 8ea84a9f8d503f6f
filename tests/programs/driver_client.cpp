// fracgpu-test-client: a CUDA driver-API program used by the integration tests. It
// reaches the driver by the route named on the command line, runs a fixed workload on
// device 0 (allocate, copy, memset, kernels of the simulated GPU, events) and prints
// one JSON line of results that do not depend on addresses or timing, so the output
// with and without the shim can be compared byte for byte.
//
//   fracgpu-test-client --route direct|procaddress|dlopen [--library NAME] [--ptsz]
//                       [--probe-missing] [--ctx-abis]
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "driver_api.h"

using fracgpu::testclient::DriverApi;
using fracgpu::testclient::StreamMode;

namespace {

struct Options {
  std::string route = "direct";
  std::string library = "libcuda.so.1";
  StreamMode mode = StreamMode::kLegacy;
  bool probe_missing = false;
  bool ctx_abis = false;
};

[[noreturn]] void fail(const DriverApi& api, const char* what, CUresult rc) {
  const char* name = "?";
  if (api.cuGetErrorName != nullptr) api.cuGetErrorName(rc, &name);
  std::printf("{\"error\":\"%s failed: %s (%d)\"}\n", what, name, static_cast<int>(rc));
  std::exit(1);
}

#define CHECK(call)                                 \
  do {                                              \
    CUresult rc_ = (call);                          \
    if (rc_ != CUDA_SUCCESS) fail(api, #call, rc_); \
  } while (0)

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--route" && i + 1 < argc)
      o.route = argv[++i];
    else if (a == "--library" && i + 1 < argc)
      o.library = argv[++i];
    else if (a == "--ptsz")
      o.mode = StreamMode::kPerThread;
    else if (a == "--probe-missing")
      o.probe_missing = true;
    else if (a == "--ctx-abis")
      o.ctx_abis = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Launches a kernel of the simulated GPU on `stream` and waits for it.
void launch(const DriverApi& api, CUfunction f, CUstream stream, std::vector<void*> params) {
  CHECK(api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params.data(), nullptr));
}

std::string workload(const DriverApi& api) {
  int version = 0, count = 0;
  CUdevice dev = 0;
  char name[128] = {};
  size_t total = 0, free_before = 0, free_during = 0, total_info = 0;
  CUcontext ctx = nullptr;
  CHECK(api.cuInit(0));
  CHECK(api.cuDriverGetVersion(&version));
  CHECK(api.cuDeviceGetCount(&count));
  CHECK(api.cuDeviceGet(&dev, 0));
  CHECK(api.cuDeviceGetName(name, sizeof(name), dev));
  CHECK(api.cuDeviceTotalMem(&total, dev));
  CHECK(api.cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(api.cuCtxSetCurrent(ctx));
  CHECK(api.cuMemGetInfo(&free_before, &total_info));

  const uint64_t n = 1 << 16;
  CUdeviceptr a = 0, b = 0, out = 0;
  CHECK(api.cuMemAlloc(&a, n * 4));
  CHECK(api.cuMemAlloc(&b, n * 4));
  CHECK(api.cuMemAlloc(&out, n * 4));
  CHECK(api.cuMemGetInfo(&free_during, &total_info));

  std::vector<float> host_a(n), host_b(n), host_out(n);
  for (uint64_t i = 0; i < n; ++i)
    host_a[i] = static_cast<float>(i % 1000) * 0.5f, host_b[i] = 1.25f;
  CHECK(api.cuMemcpyHtoD(a, host_a.data(), n * 4));

  CUstream stream = nullptr;
  CHECK(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(api.cuMemcpyHtoDAsync(b, host_b.data(), n * 4, stream));
  CUmodule module = nullptr;
  CUfunction add = nullptr, fill = nullptr, spin = nullptr;
  CHECK(api.cuModuleLoadData(&module, "fracgpu test module"));
  CHECK(api.cuModuleGetFunction(&add, module, "fracgpu_fake_add"));
  CHECK(api.cuModuleGetFunction(&fill, module, "fracgpu_fake_fill"));
  CHECK(api.cuModuleGetFunction(&spin, module, "fracgpu_fake_spin"));
  launch(api, add, stream, {&a, &b, &out, const_cast<uint64_t*>(&n)});
  CHECK(api.cuStreamSynchronize(stream));
  CHECK(api.cuMemcpyDtoH(host_out.data(), out, n * 4));
  bool add_ok = true;
  for (uint64_t i = 0; i < n; ++i) add_ok &= host_out[i] == host_a[i] + host_b[i];

  uint32_t value = 7;
  uint64_t half = n / 2;
  CHECK(api.cuMemsetD32Async(out, 3, n, stream));
  launch(api, fill, stream, {&out, &value, &half});
  CHECK(api.cuStreamSynchronize(stream));
  std::vector<uint32_t> words(n);
  CHECK(api.cuMemcpyDtoH(words.data(), out, n * 4));
  uint64_t word_sum = 0;
  for (uint32_t w : words) word_sum += w;

  CUevent start = nullptr, stop = nullptr;
  CHECK(api.cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(api.cuEventCreate(&stop, CU_EVENT_DEFAULT));
  uint32_t spin_us = 3000;
  CHECK(api.cuEventRecord(start, stream));
  launch(api, spin, stream, {&spin_us});
  CHECK(api.cuEventRecord(stop, stream));
  CHECK(api.cuEventSynchronize(stop));
  float ms = 0;
  CHECK(api.cuEventElapsedTime(&ms, start, stop));
  CHECK(api.cuEventDestroy(start));
  CHECK(api.cuEventDestroy(stop));
  CHECK(api.cuStreamDestroy(stream));
  for (CUdeviceptr p : {a, b, out}) CHECK(api.cuMemFree(p));
  CHECK(api.cuDevicePrimaryCtxRelease(dev));

  char json[1024];
  std::snprintf(json, sizeof(json),
                "{\"driver_version\":%d,\"devices\":%d,\"name\":\"%s\",\"total\":%zu,"
                "\"alloc_seen\":%s,\"add_ok\":%s,\"word_sum\":%llu,\"spin_ok\":%s}",
                version, count, name, total,
                free_before - free_during >= 3 * n * 4 ? "true" : "false",
                add_ok ? "true" : "false", static_cast<unsigned long long>(word_sum),
                ms >= 2.9f && ms < 100.0f ? "true" : "false");
  return json;
}

// Calls that must fail cleanly: an unknown cuGetProcAddress name, and a driver symbol
// that exists in the API but not in this driver (dlopen route only).
std::string probe_missing(const DriverApi& api, void* handle) {
  std::string out;
  if (api.cuGetProcAddress != nullptr) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    CUresult rc = api.cuGetProcAddress("cuFracgpuDoesNotExist", &fn, 13000, 0, &found);
    out +=
        ",\"unknown_proc\":" + std::to_string(rc) + ",\"unknown_status\":" + std::to_string(found);
  }
  if (handle != nullptr) {
    using Fn = CUresult (*)(CUtexref*);
    auto fn = reinterpret_cast<Fn>(dlsym(handle, "cuTexRefCreate"));
    CUtexref ref = nullptr;
    out +=
        ",\"unimplemented_symbol\":" + (fn ? std::to_string(fn(&ref)) : std::string("\"absent\""));
  }
  return out;
}

// Creates and destroys a context through each cuCtxCreate ABI that cuGetProcAddress
// hands out for 3.2, 11.4 and 12.5, calling each with its own signature.
std::string ctx_abis(const DriverApi& api) {
  CUdevice dev = 0;
  CHECK(api.cuDeviceGet(&dev, 0));
  PFN_cuCtxDestroy_v4000 destroy = nullptr;
  CHECK(
      api.cuGetProcAddress("cuCtxDestroy", reinterpret_cast<void**>(&destroy), 13000, 0, nullptr));
  void* fn = nullptr;
  CUcontext ctx = nullptr;
  CHECK(api.cuGetProcAddress("cuCtxCreate", &fn, 3020, 0, nullptr));
  CHECK(reinterpret_cast<PFN_cuCtxCreate_v3020>(fn)(&ctx, 0, dev));
  CHECK(destroy(ctx));
  CHECK(api.cuGetProcAddress("cuCtxCreate", &fn, 11040, 0, nullptr));
  CHECK(reinterpret_cast<PFN_cuCtxCreate_v11040>(fn)(&ctx, nullptr, 0, 0, dev));
  CHECK(destroy(ctx));
  CHECK(api.cuGetProcAddress("cuCtxCreate", &fn, 12050, 0, nullptr));
  CHECK(reinterpret_cast<PFN_cuCtxCreate_v12050>(fn)(&ctx, nullptr, 0, dev));
  CHECK(destroy(ctx));
  return ",\"ctx_abis\":true";
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  DriverApi api;
  void* handle = nullptr;
  std::string problem;
  if (o.route == "direct")
    problem = fracgpu::testclient::fill_by_linking(&api, o.mode);
  else if (o.route == "procaddress")
    problem = fracgpu::testclient::fill_by_proc_address(&api, o.mode, 12000);
  else if (o.route == "dlopen")
    problem = fracgpu::testclient::fill_by_dlopen(&api, o.mode, o.library, &handle);
  else
    problem = "unknown route " + o.route;
  if (!problem.empty()) {
    std::printf("{\"error\":\"%s\"}\n", problem.c_str());
    return 1;
  }
  std::string json = workload(api);
  if (o.probe_missing) json.insert(json.size() - 1, probe_missing(api, handle));
  if (o.ctx_abis) json.insert(json.size() - 1, ctx_abis(api));
  std::printf("%s\n", json.c_str());
  return 0;
}
