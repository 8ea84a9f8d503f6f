// fracgpu-async-client: stream-ordered allocation the way PyTorch's cudaMallocAsync backend
// uses it (cuMemAllocAsync / cuMemFreeAsync per tensor on the current stream, the device's
// default pool), for tests/integration/overcommit_async_test.cpp.
//
//   order --bytes N      stream order on the simulated GPU: a block freed on a stream that
//                        is still busy (a spin kernel ahead of the free) is reused at once
//                        on that stream, not by another stream until it has run; plus where
//                        the memory came from (the default pool's used bytes, the pointer's
//                        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE), and the allocation nodes a
//                        captured cuMemAllocAsync makes. One JSON line.
//   trim --bytes N --chunk C --go FILE
//                        allocates N in chunks of C, prints {"allocated":N}, waits for FILE,
//                        frees everything with cuMemFreeAsync, synchronises, trims the default
//                        pool to 0, prints {"trimmed":true} and exits once FILE.exit exists.
// A failed call prints {"error":...} and exits 1.
#include <cuda.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client_check.h"

namespace {

struct Args {
  std::string mode, go;
  uint64_t bytes = 64ull << 20, chunk = 32ull << 20;
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc > 1) a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--bytes") a.bytes = std::stoull(v);
    if (k == "--chunk") a.chunk = std::stoull(v);
    if (k == "--go") a.go = v;
  }
  return a;
}

uint64_t pool_used(CUmemoryPool pool) {
  cuuint64_t used = 0;
  CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  return used;
}

void spin(CUfunction kernel, uint32_t us, CUstream s) {
  void* params[] = {&us};
  CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr));
}

// A stream-ordered allocation and free captured on `s`: how many allocation nodes the graph
// got (1 when the driver saw the allocation, as it must during capture).
int captured_alloc_nodes(CUstream s, uint64_t bytes) {
  CUdeviceptr p = 0;
  CUgraph graph;
  CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK(cuMemAllocAsync(&p, bytes, s));
  CHECK(cuMemFreeAsync(p, s));
  CHECK(cuStreamEndCapture(s, &graph));
  size_t n = 0;
  CHECK(cuGraphGetNodes(graph, nullptr, &n));
  std::vector<CUgraphNode> nodes(n);
  CHECK(cuGraphGetNodes(graph, nodes.data(), &n));
  int allocs = 0;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    CHECK(cuGraphNodeGetType(node, &type));
    allocs += type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  }
  CHECK(cuGraphDestroy(graph));
  return allocs;
}

int order(const Args& a, CUdevice dev) {
  static const char kImage[] = "fracgpu fake module";
  CUmodule module;
  CUfunction kernel;
  CHECK(cuModuleLoadData(&module, kImage));
  CHECK(cuModuleGetFunction(&kernel, module, "fracgpu_fake_spin"));
  CUmemoryPool pool;
  CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
  CUstream s1, s2, s3;
  CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));

  CUdeviceptr first = 0, again = 0, other = 0, later = 0;
  CHECK(cuMemAllocAsync(&first, a.bytes, s1));
  CUmemoryPool owner = nullptr;
  CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, first));
  const uint64_t used = pool_used(pool);
  spin(kernel, 400'000, s1);  // stream 1 is busy for 0.4 s, then reaches the free
  CHECK(cuMemFreeAsync(first, s1));
  CHECK(cuMemAllocAsync(&again, a.bytes, s1));  // after the free in stream 1's order
  CHECK(cuMemFreeAsync(again, s1));
  CHECK(cuMemAllocAsync(&other, a.bytes, s2));  // stream 1 has not reached its free
  CUresult busy = cuStreamQuery(s1);
  CHECK(cuStreamSynchronize(s1));
  CHECK(cuMemAllocAsync(&later, a.bytes, s3));  // stream 1 ran past the free
  CHECK(cuMemFreeAsync(other, s2));
  CHECK(cuMemFreeAsync(later, s3));
  CHECK(cuStreamSynchronize(s2));
  CHECK(cuStreamSynchronize(s3));
  const int nodes = captured_alloc_nodes(s2, a.bytes);
  std::printf(
      "{\"pool_used\":%llu,\"from_default_pool\":%s,\"same_stream_reuse\":%s,"
      "\"busy_stream\":%s,\"other_stream_while_busy_differs\":%s,\"other_stream_after\":%s,"
      "\"captured_alloc_nodes\":%d}\n",
      static_cast<unsigned long long>(used), owner == pool ? "true" : "false",
      again == first ? "true" : "false", busy == CUDA_ERROR_NOT_READY ? "true" : "false",
      other != first ? "true" : "false", later == first ? "true" : "false", nodes);
  return 0;
}

int trim(const Args& a, CUdevice dev) {
  CUmemoryPool pool;
  CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::vector<CUdeviceptr> blocks;
  for (uint64_t done = 0; done < a.bytes; done += a.chunk) {
    CUdeviceptr p = 0;
    CHECK(cuMemAllocAsync(&p, a.chunk, s));
    blocks.push_back(p);
  }
  CHECK(cuStreamSynchronize(s));
  std::printf("{\"allocated\":%llu}\n", static_cast<unsigned long long>(a.bytes));
  std::fflush(stdout);
  while (access(a.go.c_str(), F_OK) != 0) usleep(20'000);
  for (CUdeviceptr p : blocks) CHECK(cuMemFreeAsync(p, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuMemPoolTrimTo(pool, 0));
  std::printf("{\"trimmed\":true}\n");
  std::fflush(stdout);
  const std::string exit_file = a.go + ".exit";  // the test reads the books meanwhile
  while (access(exit_file.c_str(), F_OK) != 0) usleep(20'000);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  if (a.mode == "order") return order(a, dev);
  if (a.mode == "trim") return trim(a, dev);
  std::printf("{\"error\":\"usage: fracgpu-async-client order|trim ...\"}\n");
  return 2;
}
