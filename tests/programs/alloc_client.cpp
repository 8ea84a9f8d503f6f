// fracgpu-alloc-client: device-memory workloads for the quota tests, run with the shim
// preloaded over the simulated GPU (or a real one). Prints one JSON line.
//
//   fill --chunk BYTES [--hold 1] allocate until refused; report what fit, what
//                                 cuMemGetInfo says, and whether a freed chunk can be
//                                 allocated again (with --hold: keep it all, sleep)
//   storm --chunk BYTES --ms N [--go FILE]
//                                 allocate/free at random for N ms, holding what fits
//                                 (with --go: start only once FILE exists)
//   hold --bytes N                allocate N bytes, print, then sleep until killed
//   routes --bytes N              every allocation route once: charge and release
//   lifetimes --bytes N           memory that outlives the call that "frees" it: a VMM
//                                 handle released while still mapped, a pool destroyed
//                                 with an allocation outstanding (charge while alive, 0 after)
//   pattern --bytes N --chunk C --go FILE [--route R] [--done FILE2]
//                                 allocate N bytes in chunks of C, fill each with its own
//                                 pattern, print, wait for FILE (memory may move to host
//                                 meanwhile), then read everything back from the same
//                                 addresses and report whether it is intact, how long the
//                                 first read took (a swap-in) and when it ended
//                                 ("resumed_at_ns", CLOCK_MONOTONIC); with --done, keep it all
//                                 until FILE2 exists. --route: how each chunk is allocated:
//                                 alloc (cuMemAlloc, default), pitch (cuMemAllocPitch, 4 KiB
//                                 rows), managed, async (cuMemAllocAsync, the default pool),
//                                 pool (cuMemAllocFromPoolAsync, a pool of its own), vmm (the
//                                 program's own cuMemCreate + cuMemMap), array
//                                 (cuArray3DCreate: the simulated GPU keeps no array data, so
//                                 only that it is still there is checked), hostreg
//                                 (cuMemHostRegister'd host memory: charged nothing)
//   info                          cuMemGetInfo / cuDeviceTotalMem
//   pairs --bytes N --count K     time K cuMemAlloc+cuMemFree pairs of N bytes (ns per pair,
//                                 median of 5 rounds after a warm-up round)
//   devices                       cuDeviceGetCount, and per ordinal: cuDeviceGet, UUID,
//                                 cuDeviceTotalMem and cuMemGetInfo in its primary context
//   peers                         peer-access queries between every pair of devices
//                                 (cuDeviceCanAccessPeer, cuDeviceGetP2PAttribute) and
//                                 cuCtxEnablePeerAccess/DisablePeerAccess results, by name
//
// Every mode takes --device N (default 0): the device ordinal its context is made on.
#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client_check.h"
#include "fracgpu/gpu_uuid.h"
#include "pattern_route.h"

namespace {

struct Args {
  std::string mode;
  uint64_t chunk = 1 << 20;
  uint64_t bytes = 64 << 20;
  int ms = 1000;
  std::string go_file;
  std::string done_file;
  std::string route = "alloc";
  bool hold = false;
};

int g_device = 0;  // --device

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: fracgpu-alloc-client fill|storm|hold|routes|info [options]\n");
    std::exit(2);
  }
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--go" || k == "--done" || k == "--route") {
      (k == "--go" ? a.go_file : k == "--done" ? a.done_file : a.route) = argv[i + 1];
      continue;
    }
    uint64_t v = std::strtoull(argv[i + 1], nullptr, 0);
    if (k == "--chunk" || k == "--count")
      a.chunk = v;
    else if (k == "--bytes")
      a.bytes = v;
    else if (k == "--ms")
      a.ms = static_cast<int>(v);
    else if (k == "--hold")
      a.hold = v != 0;
    else if (k == "--device")
      g_device = static_cast<int>(v);
  }
  return a;
}

CUdevice start() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, g_device));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  return dev;
}

int fill(const Args& a) {
  start();
  std::vector<CUdeviceptr> held;
  uint64_t total = 0;
  CUresult refused = CUDA_SUCCESS;
  for (;;) {
    CUdeviceptr p = 0;
    refused = cuMemAlloc(&p, a.chunk);
    if (refused != CUDA_SUCCESS) break;
    held.push_back(p);
    total += a.chunk;
  }
  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
  bool again = false;
  if (!held.empty()) {
    CHECK(cuMemFree(held.back()));
    held.pop_back();
    CUdeviceptr p = 0;
    again = cuMemAlloc(&p, a.chunk) == CUDA_SUCCESS;
    if (again) held.push_back(p);
  }
  const char* name = "?";
  cuGetErrorName(refused, &name);
  if (a.hold) {
    std::printf(
        "{\"allocated\":%llu,\"refused_with\":\"%s\",\"info_total\":%zu,\"holding\":true}\n",
        static_cast<unsigned long long>(total), name, total_bytes);
    std::fflush(stdout);
    for (;;) pause();
  }
  for (CUdeviceptr p : held) CHECK(cuMemFree(p));
  std::printf(
      "{\"allocated\":%llu,\"refused_with\":\"%s\",\"info_total\":%zu,\"info_free\":%zu,\"again\":%"
      "s}\n",
      static_cast<unsigned long long>(total), name, total_bytes, free_bytes,
      again ? "true" : "false");
  return 0;
}

int storm(const Args& a) {
  start();
  while (!a.go_file.empty() && access(a.go_file.c_str(), F_OK) != 0) usleep(1000);
  std::mt19937_64 rng(static_cast<uint64_t>(getpid()));
  std::vector<CUdeviceptr> held;
  uint64_t allocs = 0, refusals = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.ms);
  while (std::chrono::steady_clock::now() < end) {
    CUdeviceptr p = 0;
    const uint64_t size = a.chunk / 2 + rng() % a.chunk;
    if (cuMemAlloc(&p, size) == CUDA_SUCCESS) {
      held.push_back(p);
      ++allocs;
    } else {
      ++refusals;
    }
    if (!held.empty() && rng() % 3 == 0) {
      std::swap(held[rng() % held.size()], held.back());
      CHECK(cuMemFree(held.back()));
      held.pop_back();
    }
  }
  for (CUdeviceptr p : held) CHECK(cuMemFree(p));
  std::printf("{\"allocs\":%llu,\"refusals\":%llu}\n", static_cast<unsigned long long>(allocs),
              static_cast<unsigned long long>(refusals));
  return 0;
}

int hold(const Args& a) {
  start();
  CUdeviceptr p = 0;
  CHECK(cuMemAlloc(&p, a.bytes));
  std::printf("{\"holding\":%llu}\n", static_cast<unsigned long long>(a.bytes));
  std::fflush(stdout);
  for (;;) pause();
}

// The fill and the check touch only this thread's own buffer, so ThreadSanitizer has
// nothing to find there; instrumented, their word-by-word passes over gigabytes make a
// ThreadSanitizer build's borrower miss the tests' readiness deadlines. Raw pointers: a
// sanitizer build (-Og) does not inline vector's accessors, which would be instrumented calls.
__attribute__((always_inline)) inline uint32_t pattern_word(std::size_t chunk, std::size_t word) {
  return static_cast<uint32_t>(chunk * 2654435761u) ^ static_cast<uint32_t>(word * 40503u);
}

__attribute__((no_sanitize("thread"))) void fill_pattern(uint32_t* words, std::size_t n,
                                                         std::size_t chunk) {
  for (std::size_t w = 0; w < n; ++w) words[w] = pattern_word(chunk, w);
}

__attribute__((no_sanitize("thread"))) bool has_pattern(const uint32_t* words, std::size_t n,
                                                        std::size_t chunk) {
  for (std::size_t w = 0; w < n; ++w)
    if (words[w] != pattern_word(chunk, w)) return false;
  return true;
}

void wait_for_file(const std::string& path) {
  while (!path.empty() && access(path.c_str(), F_OK) != 0) usleep(2000);
}

int pattern(const Args& a) {
  const CUdevice dev = start();
  PatternRoute route(a.route, dev, a.chunk);
  if (!route.known()) {
    std::fprintf(stderr, "unknown route %s\n", a.route.c_str());
    return 2;
  }
  std::vector<Chunk> chunks;
  std::vector<uint32_t> host(route.chunk() / 4);
  for (uint64_t done = 0; done + a.chunk <= a.bytes; done += a.chunk) {
    Chunk c = route.allocate();
    fill_pattern(host.data(), host.size(), chunks.size());
    route.write(c, host.data());
    chunks.push_back(c);
  }
  std::printf("{\"ready\":%zu,\"route\":\"%s\",\"first\":%llu}\n", chunks.size(), a.route.c_str(),
              chunks.empty() ? 0ull : static_cast<unsigned long long>(chunks[0].ptr));
  std::fflush(stdout);
  wait_for_file(a.go_file);
  const auto t0 = std::chrono::steady_clock::now();
  bool intact = true;
  double first_ms = -1;
  int64_t resumed_at_ns = 0;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    route.read(chunks[c], host.data());
    if (first_ms < 0) {
      const auto now = std::chrono::steady_clock::now();
      first_ms = std::chrono::duration<double, std::milli>(now - t0).count();
      resumed_at_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    }
    intact = intact && route.still_there(chunks[c]) &&
             (!route.has_data(chunks[c]) || has_pattern(host.data(), host.size(), c));
  }
  std::printf("{\"intact\":%s,\"chunks\":%zu,\"resume_ms\":%.1f,\"resumed_at_ns\":%lld}\n",
              intact ? "true" : "false", chunks.size(), first_ms,
              static_cast<long long>(resumed_at_ns));
  std::fflush(stdout);
  wait_for_file(a.done_file);
  for (const Chunk& c : chunks) route.free(c);
  return intact ? 0 : 3;
}

// Each route charges at least `bytes` and gives all of it back.
int routes(const Args& a) {
  CUdevice dev = start();
  size_t free0 = 0, total = 0, free1 = 0;
  std::string out = "{";
  auto used_now = [&] {
    CHECK(cuMemGetInfo(&free1, &total));
    return static_cast<long long>(free0) - static_cast<long long>(free1);
  };
  auto record = [&](const char* route, long long charged, long long after) {
    out += std::string(out.size() > 1 ? "," : "") + "\"" + route + "\":[" +
           std::to_string(charged) + "," + std::to_string(after) + "]";
  };
  CHECK(cuMemGetInfo(&free0, &total));
  CUdeviceptr p = 0;
  CHECK(cuMemAlloc(&p, a.bytes));
  long long c = used_now();
  CHECK(cuMemFree(p));
  record("cuMemAlloc", c, used_now());

  size_t pitch = 0;
  CHECK(cuMemAllocPitch(&p, &pitch, 1000, a.bytes / 1000, 4));
  c = used_now();
  CHECK(cuMemFree(p));
  record("cuMemAllocPitch", c, used_now());

  CHECK(cuMemAllocManaged(&p, a.bytes, CU_MEM_ATTACH_GLOBAL));
  c = used_now();
  CHECK(cuMemFree(p));
  record("cuMemAllocManaged", c, used_now());

  CUstream stream = nullptr;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemAllocAsync(&p, a.bytes, stream));
  c = used_now();
  CHECK(cuMemFreeAsync(p, stream));
  CHECK(cuStreamSynchronize(stream));
  CUmemoryPool pool = nullptr;
  CHECK(cuDeviceGetMemPool(&pool, dev));
  CHECK(cuMemPoolTrimTo(pool, 0));
  record("cuMemAllocAsync", c, used_now());

  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  CHECK(cuMemPoolCreate(&pool, &props));
  CHECK(cuMemAllocFromPoolAsync(&p, a.bytes, pool, stream));
  c = used_now();
  CHECK(cuMemFreeAsync(p, stream));
  CHECK(cuStreamSynchronize(stream));
  CHECK(cuMemPoolDestroy(pool));
  record("cuMemAllocFromPoolAsync", c, used_now());

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  size_t granularity = 0;
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t vmm_size = (a.bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  CHECK(cuMemCreate(&handle, vmm_size, &prop, 0));
  c = used_now();
  CHECK(cuMemRelease(handle));
  record("cuMemCreate", c, used_now());

  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = 8192;  // within every GPU's 2D (mipmapped) array limits up to 256 MiB of floats
  desc.Height = std::max<uint64_t>(a.bytes / 8192 / 4, 1);
  desc.Depth = 0;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray array = nullptr;
  CHECK(cuArray3DCreate(&array, &desc));
  c = used_now();
  CHECK(cuArrayDestroy(array));
  record("cuArray3DCreate", c, used_now());

  CUmipmappedArray mip = nullptr;
  CHECK(cuMipmappedArrayCreate(&mip, &desc, 3));
  c = used_now();
  CHECK(cuMipmappedArrayDestroy(mip));
  record("cuMipmappedArrayCreate", c, used_now());

  CUcontext extra = nullptr, primary = nullptr;
  CHECK(cuCtxGetCurrent(&primary));
  CHECK(cuCtxCreate(&extra, nullptr, 0, dev));
  c = used_now();
  CHECK(cuCtxDestroy(extra));
  CHECK(cuCtxSetCurrent(primary));
  record("cuCtxCreate", c, used_now());
  CHECK(cuStreamDestroy(stream));
  std::printf("%s}\n", out.c_str());
  return 0;
}

int pairs(const Args& a) {
  start();
  const uint64_t count = a.chunk == (1 << 20) ? 2000 : a.chunk;  // --count arrives as chunk
  std::vector<double> rounds;
  for (int round = 0; round < 6; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < count; ++i) {
      CUdeviceptr p = 0;
      CHECK(cuMemAlloc(&p, a.bytes));
      CHECK(cuMemFree(p));
    }
    double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
        count;
    if (round > 0) rounds.push_back(ns);
  }
  std::sort(rounds.begin(), rounds.end());
  std::printf("{\"ns_per_pair\":%.1f,\"bytes\":%llu,\"count\":%llu}\n", rounds[rounds.size() / 2],
              static_cast<unsigned long long>(a.bytes), static_cast<unsigned long long>(count));
  return 0;
}

int lifetimes(const Args& a) {
  CUdevice dev = start();
  size_t free0 = 0, free1 = 0, total = 0;
  CHECK(cuMemGetInfo(&free0, &total));
  auto used = [&] {
    CHECK(cuMemGetInfo(&free1, &total));
    return static_cast<long long>(free0) - static_cast<long long>(free1);
  };
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  size_t granularity = 0;
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t size = (a.bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  CHECK(cuMemCreate(&handle, size, &prop, 0));
  CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
  CHECK(cuMemMap(va, size, 0, handle, 0));
  CHECK(cuMemRelease(handle));  // still mapped: the memory is still there
  const long long released_mapped = used();
  CHECK(cuMemUnmap(va, size));
  const long long unmapped = used();
  CHECK(cuMemAddressFree(va, size));

  CUstream stream = nullptr;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  CUmemoryPool pool = nullptr;
  CUdeviceptr p = 0;
  CHECK(cuMemPoolCreate(&pool, &props));
  CHECK(cuMemAllocFromPoolAsync(&p, a.bytes, pool, stream));
  CHECK(cuStreamSynchronize(stream));
  CHECK(cuMemPoolDestroy(pool));  // deferred by the driver until p is freed
  const long long destroyed_live = used();
  CHECK(cuMemFreeAsync(p, stream));
  CHECK(cuStreamSynchronize(stream));
  const long long freed = used();
  CHECK(cuStreamDestroy(stream));
  std::printf(
      "{\"vmm_released_while_mapped\":%lld,\"vmm_unmapped\":%lld,\"pool_destroyed_live\":%lld,"
      "\"pool_freed\":%lld}\n",
      released_mapped, unmapped, destroyed_live, freed);
  return 0;
}

int info() {
  CUdevice dev = start();
  size_t free_bytes = 0, total = 0, device_total = 0;
  CHECK(cuMemGetInfo(&free_bytes, &total));
  CHECK(cuDeviceTotalMem(&device_total, dev));
  std::printf("{\"free\":%zu,\"total\":%zu,\"device_total\":%zu}\n", free_bytes, total,
              device_total);
  return 0;
}

const char* result_name(CUresult rc) {
  const char* name = "?";
  cuGetErrorName(rc, &name);
  return name;
}

int devices() {
  CHECK(cuInit(0));
  int count = 0;
  CHECK(cuDeviceGetCount(&count));
  std::string out = "{\"count\":" + std::to_string(count) + ",\"devices\":[";
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice dev = -1;
    CHECK(cuDeviceGet(&dev, ordinal));
    CUuuid uuid{};
    CHECK(cuDeviceGetUuid(&uuid, dev));
    size_t device_total = 0, free_bytes = 0, total = 0;
    CHECK(cuDeviceTotalMem(&device_total, dev));
    CUcontext ctx = nullptr;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemGetInfo(&free_bytes, &total));
    CUdevice current = -1;
    CHECK(cuCtxGetDevice(&current));
    char line[256];
    std::snprintf(
        line, sizeof line,
        "%s{\"ordinal\":%d,\"device\":%d,\"ctx_device\":%d,\"uuid\":\"%s\",\"device_total\":%zu,"
        "\"info_total\":%zu}",
        ordinal == 0 ? "" : ",", ordinal, static_cast<int>(dev), static_cast<int>(current),
        fracgpu::format_gpu_uuid(uuid.bytes).c_str(), device_total, total);
    out += line;
  }
  CUdevice beyond = -1;
  out += "],\"get_beyond\":\"" + std::string(result_name(cuDeviceGet(&beyond, count))) + "\"}";
  std::printf("%s\n", out.c_str());
  return 0;
}

int peers() {
  CHECK(cuInit(0));
  int count = 0;
  CHECK(cuDeviceGetCount(&count));
  std::vector<CUcontext> contexts(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d)
    CHECK(cuDevicePrimaryCtxRetain(&contexts[static_cast<size_t>(d)], d));
  std::string out = "{\"count\":" + std::to_string(count) + ",\"pairs\":[";
  for (int a = 0; a < count; ++a) {
    for (int b = 0; b < count; ++b) {
      int can = -1, access = -1, rank = -1;
      CUresult can_rc = cuDeviceCanAccessPeer(&can, a, b);
      CUresult access_rc =
          cuDeviceGetP2PAttribute(&access, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, a, b);
      CUresult rank_rc =
          cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, a, b);
      CHECK(cuCtxSetCurrent(contexts[static_cast<size_t>(a)]));
      CUresult enable = cuCtxEnablePeerAccess(contexts[static_cast<size_t>(b)], 0);
      CUresult again = cuCtxEnablePeerAccess(contexts[static_cast<size_t>(b)], 0);
      CUresult disable = cuCtxDisablePeerAccess(contexts[static_cast<size_t>(b)]);
      CUresult disable_again = cuCtxDisablePeerAccess(contexts[static_cast<size_t>(b)]);
      char line[512];
      std::snprintf(
          line, sizeof line,
          "%s{\"a\":%d,\"b\":%d,\"can_access\":[\"%s\",%d],\"p2p_access\":[\"%s\",%d],"
          "\"p2p_rank\":[\"%s\",%d],\"enable\":\"%s\",\"enable_again\":\"%s\",\"disable\":\"%s\","
          "\"disable_again\":\"%s\"}",
          a + b == 0 ? "" : ",", a, b, result_name(can_rc), can, result_name(access_rc), access,
          result_name(rank_rc), rank, result_name(enable), result_name(again), result_name(disable),
          result_name(disable_again));
      out += line;
    }
  }
  int can = -1;
  out += "],\"out_of_range\":\"" + std::string(result_name(cuDeviceCanAccessPeer(&can, 0, count))) +
         "\"}";
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.mode == "fill") return fill(a);
  if (a.mode == "storm") return storm(a);
  if (a.mode == "hold") return hold(a);
  if (a.mode == "routes") return routes(a);
  if (a.mode == "info") return info();
  if (a.mode == "pattern") return pattern(a);
  if (a.mode == "pairs") return pairs(a);
  if (a.mode == "lifetimes") return lifetimes(a);
  if (a.mode == "devices") return devices();
  if (a.mode == "peers") return peers();
  std::fprintf(stderr, "unknown mode %s\n", a.mode.c_str());
  return 2;
}
