// fracgpu real-GPU check client: a plain CUDA program that reaches the driver through
// the usual routes (the static CUDA runtime, which obtains every entry point through
// cuGetProcAddress, and direct driver-API calls linked against libcuda.so.1), and
// prints deterministic results as ONE JSON line on stdout, so that a native run and a
// run with libfracgpu.so preloaded can be compared field by field.
//
//   cuda_client                         functional checks (runtime, graph, cooperative, driver)
//   cuda_client --mode launch-rate N    N empty <<<1,1>>> launches then one sync; prints the
//                                       median ns per launch of 5 repetitions after a warm-up
//
// Build: nvcc -O2 -arch=sm_90 -o cuda_client cuda_client.cu -lcuda
// Any CUDA error: a message on stderr, {"ok":false,"error":"…"} on stdout, exit status 1.
// Fields under "info" are not deterministic (free memory, versions) and are not compared.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace cg = cooperative_groups;

namespace {

std::string json_escape(const char* s) {
  std::string out;
  for (; *s != '\0'; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += ' ';
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// A JSON number (JSON has no inf/nan: those become null, which never equals a number).
std::string jnum(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string jbool(bool v) {
  return v ? "true" : "false";
}

[[noreturn]] void fail(const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "cuda_client: FAIL: %s\n", msg);
  std::fflush(stderr);
  std::printf("{\"client\":\"cuda_client\",\"ok\":false,\"error\":\"%s\"}\n",
              json_escape(msg).c_str());
  std::fflush(stdout);
  std::exit(1);
}

#define CK(call)                                                                    \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess)                                                          \
      fail("%s:%d: %s -> %s (%s)", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
           cudaGetErrorString(e_));                                                 \
  } while (0)

#define CU(call)                                                                             \
  do {                                                                                       \
    CUresult r_ = (call);                                                                    \
    if (r_ != CUDA_SUCCESS) {                                                                \
      const char* n_ = nullptr;                                                              \
      cuGetErrorName(r_, &n_);                                                               \
      fail("%s:%d: %s -> %s (%d)", __FILE__, __LINE__, #call, n_ ? n_ : "unknown", (int)r_); \
    }                                                                                        \
  } while (0)

// Deterministic host data: values k/65536 - 0.5 are exact in float, and so are all the
// sums below in double, whatever the order — the GPU must match the CPU bit for bit.
struct Lcg {
  uint32_t state;
  float next() {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>((state >> 8) & 0xFFFFu) / 65536.0f - 0.5f;
  }
};

// ---------------------------------------------------------------- kernels
__global__ void saxpy_kernel(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = fmaf(a, x[i], y[i]);
}

constexpr int kReduceThreads = 256;

__global__ void partial_sum_kernel(int n, const float* v, double* partials) {
  __shared__ double s[kReduceThreads];
  double acc = 0.0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    acc += v[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = s[0];
}

__global__ void final_sum_kernel(int m, const double* partials, double* out) {
  __shared__ double s[kReduceThreads];
  double acc = 0.0;
  for (int i = threadIdx.x; i < m; i += blockDim.x) acc += partials[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = s[0];
}

__host__ __device__ inline uint32_t graph_step_a(uint32_t v) {
  return v * 3u + 1u;
}
__host__ __device__ inline uint32_t graph_step_b(uint32_t v, uint32_t i) {
  return v ^ (i * 2654435761u);
}
__host__ __device__ inline uint32_t graph_step_c(uint32_t v) {
  return (v << 7) | (v >> 25);
}

__global__ void graph_a_kernel(int n, uint32_t* v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = graph_step_a(v[i]);
}
__global__ void graph_b_kernel(int n, uint32_t* v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = graph_step_b(v[i], static_cast<uint32_t>(i));
}
__global__ void graph_c_kernel(int n, uint32_t* v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = graph_step_c(v[i]);
}

__host__ __device__ inline int coop_value(int i) {
  return i * 7 + 3;
}

// Writes a[], synchronises the whole grid, then reads neighbours written by other blocks.
__global__ void coop_kernel(int* a, int* b, int n) {
  cg::grid_group grid = cg::this_grid();
  const int tid = static_cast<int>(grid.thread_rank());
  const int nthreads = static_cast<int>(grid.size());
  for (int i = tid; i < n; i += nthreads) a[i] = coop_value(i);
  grid.sync();
  for (int i = tid; i < n; i += nthreads) b[i] = a[(i + 1) % n] + a[(i + n - 1) % n];
}

__global__ void empty_kernel() {}

// ---------------------------------------------------------------- checks
std::string check_runtime(cudaStream_t stream) {
  const int n = 1 << 20;
  const float a = 2.5f;
  std::vector<float> x(n), y(n), yref(n), yout(n);
  Lcg rng{12345u};
  for (int i = 0; i < n; ++i) x[i] = rng.next();
  for (int i = 0; i < n; ++i) y[i] = rng.next();
  for (int i = 0; i < n; ++i) yref[i] = std::fmaf(a, x[i], y[i]);
  double sum_ref = 0.0;
  for (int i = 0; i < n; ++i) sum_ref += yref[i];

  const int blocks = 1024;
  float *dx = nullptr, *dy = nullptr;
  double *dpartials = nullptr, *dsum = nullptr;
  CK(cudaMalloc(&dx, n * sizeof(float)));
  CK(cudaMalloc(&dy, n * sizeof(float)));
  CK(cudaMalloc(&dpartials, blocks * sizeof(double)));
  CK(cudaMalloc(&dsum, sizeof(double)));
  CK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpyAsync(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  saxpy_kernel<<<blocks, 256, 0, stream>>>(n, a, dx, dy);
  CK(cudaGetLastError());
  partial_sum_kernel<<<blocks, kReduceThreads, 0, stream>>>(n, dy, dpartials);
  CK(cudaGetLastError());
  final_sum_kernel<<<1, kReduceThreads, 0, stream>>>(blocks, dpartials, dsum);
  CK(cudaGetLastError());
  double sum_gpu = 0.0;
  CK(cudaMemcpyAsync(yout.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CK(cudaMemcpyAsync(&sum_gpu, dsum, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaFree(dpartials));
  CK(cudaFree(dsum));

  double max_err = 0.0, checksum = 0.0;
  for (int i = 0; i < n; ++i) {
    max_err = std::max(max_err, std::fabs(static_cast<double>(yout[i]) - yref[i]));
    checksum += yout[i];
  }
  const double rel_err = std::fabs(sum_gpu - sum_ref) / std::max(std::fabs(sum_ref), 1e-30);
  const bool ok = max_err == 0.0 && rel_err <= 1e-12 && checksum == sum_ref;
  return "{\"ok\":" + jbool(ok) + ",\"n\":" + std::to_string(n) +
         ",\"saxpy_max_err\":" + jnum(max_err) + ",\"checksum\":" + jnum(checksum) +
         ",\"gpu_sum\":" + jnum(sum_gpu) + ",\"cpu_sum\":" + jnum(sum_ref) +
         ",\"sum_rel_err\":" + jnum(rel_err) + "}";
}

std::string check_graph(cudaStream_t stream) {
  const int n = 1 << 16;
  const int launches = 10;
  std::vector<uint32_t> h(n), ref(n);
  for (int i = 0; i < n; ++i) h[i] = static_cast<uint32_t>(i);
  for (int i = 0; i < n; ++i) {
    uint32_t v = h[i];
    for (int k = 0; k < launches; ++k)
      v = graph_step_c(graph_step_b(graph_step_a(v), static_cast<uint32_t>(i)));
    ref[i] = v;
  }
  uint32_t* dv = nullptr;
  CK(cudaMalloc(&dv, n * sizeof(uint32_t)));
  CK(cudaMemcpy(dv, h.data(), n * sizeof(uint32_t), cudaMemcpyHostToDevice));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  const int threads = 256, blocks = (n + threads - 1) / threads;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  graph_a_kernel<<<blocks, threads, 0, stream>>>(n, dv);
  graph_b_kernel<<<blocks, threads, 0, stream>>>(n, dv);
  graph_c_kernel<<<blocks, threads, 0, stream>>>(n, dv);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGetLastError());
  size_t nodes = 0;
  CK(cudaGraphGetNodes(graph, nullptr, &nodes));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int k = 0; k < launches; ++k) CK(cudaGraphLaunch(exec, stream));
  CK(cudaStreamSynchronize(stream));
  std::vector<uint32_t> out(n);
  CK(cudaMemcpy(out.data(), dv, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaFree(dv));

  long mismatches = 0;
  unsigned long long checksum = 0;
  for (int i = 0; i < n; ++i) {
    if (out[i] != ref[i]) ++mismatches;
    checksum += out[i];
  }
  const bool ok = mismatches == 0 && nodes == 3;
  return "{\"ok\":" + jbool(ok) + ",\"nodes\":" + std::to_string(nodes) +
         ",\"launches\":" + std::to_string(launches) +
         ",\"mismatches\":" + std::to_string(mismatches) +
         ",\"checksum\":" + std::to_string(checksum) + "}";
}

std::string check_cooperative(cudaStream_t stream, int device) {
  int coop_supported = 0, sm_count = 0, blocks_per_sm = 0;
  CK(cudaDeviceGetAttribute(&coop_supported, cudaDevAttrCooperativeLaunch, device));
  if (!coop_supported) fail("device %d does not support cooperative launch", device);
  CK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  const int threads = 256;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, coop_kernel, threads, 0));
  if (blocks_per_sm < 1) fail("cooperative kernel: occupancy %d blocks per SM", blocks_per_sm);
  const int blocks = sm_count * std::min(blocks_per_sm, 2);
  int n = 1 << 20;
  int *da = nullptr, *db = nullptr;
  CK(cudaMalloc(&da, n * sizeof(int)));
  CK(cudaMalloc(&db, n * sizeof(int)));
  CK(cudaMemsetAsync(db, 0, n * sizeof(int), stream));
  void* args[] = {&da, &db, &n};
  CK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop_kernel), dim3(blocks),
                                 dim3(threads), args, 0, stream));
  CK(cudaStreamSynchronize(stream));
  std::vector<int> out(n);
  CK(cudaMemcpy(out.data(), db, n * sizeof(int), cudaMemcpyDeviceToHost));
  CK(cudaFree(da));
  CK(cudaFree(db));
  long mismatches = 0;
  long long checksum = 0;
  for (int i = 0; i < n; ++i) {
    const int expect = coop_value((i + 1) % n) + coop_value((i + n - 1) % n);
    if (out[i] != expect) ++mismatches;
    checksum += out[i];
  }
  return "{\"ok\":" + jbool(mismatches == 0) + ",\"blocks\":" + std::to_string(blocks) +
         ",\"threads\":" + std::to_string(threads) +
         ",\"mismatches\":" + std::to_string(mismatches) +
         ",\"checksum\":" + std::to_string(checksum) + "}";
}

// The driver API called directly (symbols resolved against libcuda.so.1 at load time),
// plus one entry point obtained with cuGetProcAddress and called through the pointer.
std::string check_driver(std::string* info) {
  CU(cuInit(0));
  CUdevice dev = 0;
  CU(cuDeviceGet(&dev, 0));
  CUcontext current = nullptr, primary = nullptr;
  CU(cuCtxGetCurrent(&current));
  CU(cuDevicePrimaryCtxRetain(&primary, dev));
  const bool current_is_primary = current == primary;
  if (current == nullptr) CU(cuCtxSetCurrent(primary));

  const size_t n = 1 << 20;  // 32-bit words: 4 MiB
  const uint32_t fill = 0xA5A5A5A5u;
  std::vector<uint32_t> half(n / 2), back(n, 0);
  for (size_t i = 0; i < n / 2; ++i) half[i] = static_cast<uint32_t>(i) * 2654435761u;
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, n * sizeof(uint32_t)));
  CU(cuMemsetD32(d, fill, n));
  CU(cuMemcpyHtoD(d, half.data(), half.size() * sizeof(uint32_t)));
  CU(cuMemcpyDtoH(back.data(), d, n * sizeof(uint32_t)));
  CU(cuMemFree(d));
  long mismatches = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t expect = i < n / 2 ? half[i] : fill;
    if (back[i] != expect) ++mismatches;
  }

  size_t free_bytes = 0, total_bytes = 0, device_total = 0;
  CU(cuMemGetInfo(&free_bytes, &total_bytes));
  CU(cuDeviceTotalMem(&device_total, dev));

  void* fn = nullptr;
  CUdriverProcAddressQueryResult query = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CU(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &query));
  if (fn == nullptr || query != CU_GET_PROC_ADDRESS_SUCCESS)
    fail("cuGetProcAddress(cuMemAlloc, 12000): pfn=%p status=%d", fn, static_cast<int>(query));
  auto proc_mem_alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(fn);
  const size_t bytes2 = 1 << 20;
  CUdeviceptr d2 = 0;
  CU(proc_mem_alloc(&d2, bytes2));
  CU(cuMemsetD8(d2, 0x5A, bytes2));
  std::vector<unsigned char> back2(bytes2, 0);
  CU(cuMemcpyDtoH(back2.data(), d2, bytes2));
  CU(cuMemFree(d2));
  long mismatches2 = 0;
  for (unsigned char c : back2)
    if (c != 0x5A) ++mismatches2;
  CU(cuDevicePrimaryCtxRelease(dev));

  int driver_version = 0;
  CU(cuDriverGetVersion(&driver_version));
  char name[256] = {0};
  CU(cuDeviceGetName(name, sizeof name - 1, dev));
  *info += ",\"device\":\"" + json_escape(name) +
           "\",\"driver_version\":" + std::to_string(driver_version) +
           ",\"free_bytes\":" + std::to_string(free_bytes);

  const bool ok = mismatches == 0 && mismatches2 == 0 && free_bytes <= total_bytes &&
                  total_bytes > 0 && device_total > 0;
  return "{\"ok\":" + jbool(ok) + ",\"current_is_primary\":" + jbool(current_is_primary) +
         ",\"memcpy_mismatches\":" + std::to_string(mismatches) +
         ",\"mem_get_info_total\":" + std::to_string(total_bytes) +
         ",\"device_total_mem\":" + std::to_string(device_total) +
         ",\"free_le_total\":" + jbool(free_bytes <= total_bytes) +
         ",\"proc_address_alloc_mismatches\":" + std::to_string(mismatches2) + "}";
}

int run_functional() {
  const int device = 0;
  CK(cudaSetDevice(device));
  CK(cudaFree(nullptr));  // create the primary context now
  int runtime_version = 0;
  CK(cudaRuntimeGetVersion(&runtime_version));
  cudaStream_t stream = nullptr;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const std::string runtime = check_runtime(stream);
  const std::string graph = check_graph(stream);
  const std::string coop = check_cooperative(stream, device);
  std::string info = "\"runtime_version\":" + std::to_string(runtime_version);
  const std::string driver = check_driver(&info);
  CK(cudaStreamDestroy(stream));
  CK(cudaDeviceSynchronize());

  auto sub_ok = [](const std::string& s) { return s.rfind("{\"ok\":true", 0) == 0; };
  const bool ok = sub_ok(runtime) && sub_ok(graph) && sub_ok(coop) && sub_ok(driver);
  std::printf(
      "{\"client\":\"cuda_client\",\"ok\":%s,\"runtime\":%s,\"graph\":%s,\"cooperative\":%s,"
      "\"driver\":%s,\"info\":{%s}}\n",
      jbool(ok).c_str(), runtime.c_str(), graph.c_str(), coop.c_str(), driver.c_str(),
      info.c_str());
  std::fflush(stdout);
  return ok ? 0 : 1;
}

int run_launch_rate(long n) {
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  const long warm = std::max(1000L, n / 10);
  for (long i = 0; i < warm; ++i) empty_kernel<<<1, 1>>>();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const int reps = 5;
  std::vector<double> ns(reps);
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) empty_kernel<<<1, 1>>>();
    CK(cudaDeviceSynchronize());
    const auto t1 = std::chrono::steady_clock::now();
    CK(cudaGetLastError());
    ns[r] = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
  }
  std::vector<double> sorted = ns;
  std::sort(sorted.begin(), sorted.end());
  std::string list;
  for (int r = 0; r < reps; ++r) list += (r ? "," : "") + jnum(ns[r]);
  std::printf(
      "{\"client\":\"cuda_client\",\"mode\":\"launch-rate\",\"ok\":true,\"n\":%ld,\"warmup\":%ld,"
      "\"ns_per_launch\":%s,\"reps_ns\":[%s]}\n",
      n, warm, jnum(sorted[reps / 2]).c_str(), list.c_str());
  std::fflush(stdout);
  return 0;
}

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: cuda_client [--mode functional | --mode launch-rate N]\n");
  std::printf("{\"client\":\"cuda_client\",\"ok\":false,\"error\":\"bad arguments\"}\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "functional";
  long n = 200000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
      mode = argv[++i];
      if (mode == "launch-rate" && i + 1 < argc && argv[i + 1][0] != '-') {
        char* end = nullptr;
        n = std::strtol(argv[++i], &end, 10);
        if (end == nullptr || *end != '\0' || n <= 0) usage();
      }
    } else {
      usage();
    }
  }
  if (mode == "functional") return run_functional();
  if (mode == "launch-rate") return run_launch_rate(n);
  usage();
}
