// Graph memory nodes and conditional nodes: captured stream-ordered allocations become
// allocation/free nodes that use no memory until the graph is launched, the graph
// memory pool then charges the shared device (another process sees it, a launch that
// does not fit fails) and keeps it until cuDeviceGraphMemTrim; allocations a graph does
// not free outlive the launch; IF / IF-ELSE / WHILE / SWITCH nodes run the right bodies
// the right number of times.
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "child_process.h"
#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The entry points these tests need beyond the common table.
struct GraphApi {
  template <typename T>
  static T load(const char* name) {
    auto function = reinterpret_cast<T>(driver_api().symbol(name));
    EXPECT_NE(function, nullptr) << name;
    return function;
  }
  PFN_cuGraphAddMemAllocNode_v11040 add_mem_alloc_node =
      load<PFN_cuGraphAddMemAllocNode_v11040>("cuGraphAddMemAllocNode");
  PFN_cuGraphAddMemFreeNode_v11040 add_mem_free_node =
      load<PFN_cuGraphAddMemFreeNode_v11040>("cuGraphAddMemFreeNode");
  PFN_cuGraphMemAllocNodeGetParams_v11040 mem_alloc_node_params =
      load<PFN_cuGraphMemAllocNodeGetParams_v11040>("cuGraphMemAllocNodeGetParams");
  PFN_cuGraphMemFreeNodeGetParams_v11040 mem_free_node_params =
      load<PFN_cuGraphMemFreeNodeGetParams_v11040>("cuGraphMemFreeNodeGetParams");
  PFN_cuDeviceGraphMemTrim_v11040 trim =
      load<PFN_cuDeviceGraphMemTrim_v11040>("cuDeviceGraphMemTrim");
  PFN_cuDeviceGetGraphMemAttribute_v11040 get_attribute =
      load<PFN_cuDeviceGetGraphMemAttribute_v11040>("cuDeviceGetGraphMemAttribute");
  PFN_cuDeviceSetGraphMemAttribute_v11040 set_attribute =
      load<PFN_cuDeviceSetGraphMemAttribute_v11040>("cuDeviceSetGraphMemAttribute");
  PFN_cuGraphAddNode_v12020 add_node = load<PFN_cuGraphAddNode_v12020>("cuGraphAddNode");
  PFN_cuGraphAddNode_v12030 add_node_v2 = load<PFN_cuGraphAddNode_v12030>("cuGraphAddNode_v2");
  PFN_cuGraphConditionalHandleCreate_v12030 conditional_handle_create =
      load<PFN_cuGraphConditionalHandleCreate_v12030>("cuGraphConditionalHandleCreate");
  PFN_cuGraphAddChildGraphNode_v10000 add_child_graph_node =
      load<PFN_cuGraphAddChildGraphNode_v10000>("cuGraphAddChildGraphNode");
  PFN_cuGraphChildGraphNodeGetGraph_v10000 child_graph =
      load<PFN_cuGraphChildGraphNodeGetGraph_v10000>("cuGraphChildGraphNodeGetGraph");
  PFN_cuGraphUpload_v11010 upload = load<PFN_cuGraphUpload_v11010>("cuGraphUpload");
  // Implemented by the capture work; may be absent.
  PFN_cuStreamBeginCaptureToGraph_v12030 begin_capture_to_graph =
      reinterpret_cast<PFN_cuStreamBeginCaptureToGraph_v12030>(
          driver_api().symbol("cuStreamBeginCaptureToGraph"));
};

class GraphMemoryTest : public FakeDeviceTest {
 protected:
  void SetUp() override {
    FakeDeviceTest::SetUp();
    ASSERT_CU(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  }

  uint64_t attribute(CUgraphMem_attribute which) {
    cuuint64_t value = 0;
    EXPECT_CU_ERROR(CUDA_SUCCESS, api.get_attribute(0, which, &value));
    return value;
  }
  uint64_t reserved() { return attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT); }
  uint64_t used() { return attribute(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT); }

  std::vector<CUgraphNodeType> node_types(CUgraph graph) {
    size_t count = 0;
    EXPECT_EQ(cu.cuGraphGetNodes(graph, nullptr, &count), CUDA_SUCCESS);
    std::vector<CUgraphNode> nodes(count);
    EXPECT_EQ(cu.cuGraphGetNodes(graph, nodes.data(), &count), CUDA_SUCCESS);
    std::vector<CUgraphNodeType> types;
    for (CUgraphNode node : nodes) {
      CUgraphNodeType type{};
      EXPECT_EQ(cu.cuGraphNodeGetType(node, &type), CUDA_SUCCESS);
      types.push_back(type);
    }
    return types;
  }

  std::vector<uint32_t> read(CUdeviceptr pointer, size_t count) {
    std::vector<uint32_t> host(count);
    EXPECT_EQ(cu.cuMemcpyDtoH_v2(host.data(), pointer, count * sizeof(uint32_t)), CUDA_SUCCESS);
    return host;
  }

  // Captures alloc(bytes) -> fill(value) [-> free] on `stream`; returns the graph.
  CUgraph capture_alloc_fill(uint64_t bytes, uint32_t value, bool free_it, CUdeviceptr* out) {
    CUgraph graph = nullptr;
    EXPECT_CU_ERROR(CUDA_SUCCESS,
                    cu.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuMemAllocAsync(out, bytes, stream));
    launch_fill(stream, *out, value, std::min<uint64_t>(bytes / sizeof(uint32_t), 1024));
    if (free_it) EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuMemFreeAsync(*out, stream));
    EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuStreamEndCapture(stream, &graph));
    return graph;
  }

  CUgraphExec instantiate(CUgraph graph, unsigned long long flags = 0) {
    CUgraphExec exec = nullptr;
    EXPECT_CU_ERROR(CUDA_SUCCESS, cu.cuGraphInstantiateWithFlags(&exec, graph, flags));
    return exec;
  }

  CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(size_t bytes) {
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params.poolProps.location.id = 0;
    params.bytesize = bytes;
    return params;
  }

  // A kernel node of one of the fake kernels with the given argument pointers.
  CUgraphNode add_kernel(CUgraph graph, const char* name, std::vector<void*> args,
                         const std::vector<CUgraphNode>& deps = {}) {
    CUDA_KERNEL_NODE_PARAMS params{};
    params.func = kernel(name);
    params.gridDimX = params.gridDimY = params.gridDimZ = 1;
    params.blockDimX = params.blockDimY = params.blockDimZ = 1;
    params.kernelParams = args.empty() ? nullptr : args.data();
    CUgraphNode node = nullptr;
    EXPECT_CU_ERROR(CUDA_SUCCESS,
                    cu.cuGraphAddKernelNode_v2(&node, graph, deps.data(), deps.size(), &params));
    return node;
  }
  CUgraphNode add_fill(CUgraph graph, CUdeviceptr dst, uint32_t value, uint64_t count,
                       const std::vector<CUgraphNode>& deps = {}) {
    return add_kernel(graph, "fracgpu_fake_fill", {&dst, &value, &count}, deps);
  }
  // out[0] += one[0] (float): counts how often a body ran.
  CUgraphNode add_increment(CUgraph graph, CUdeviceptr counter, CUdeviceptr one,
                            const std::vector<CUgraphNode>& deps = {}) {
    uint64_t n = 1;
    return add_kernel(graph, "fracgpu_fake_add", {&counter, &one, &counter, &n}, deps);
  }
  CUgraphNode add_set_condition(CUgraph graph, CUgraphConditionalHandle handle, uint32_t value,
                                const std::vector<CUgraphNode>& deps = {}) {
    return add_kernel(graph, "fracgpu_fake_set_condition", {&handle, &value}, deps);
  }

  CUgraphConditionalHandle conditional_handle(CUgraph graph, unsigned default_value,
                                              unsigned flags = CU_GRAPH_COND_ASSIGN_DEFAULT) {
    CUgraphConditionalHandle handle = 0;
    EXPECT_CU_ERROR(CUDA_SUCCESS,
                    api.conditional_handle_create(&handle, graph, context, default_value, flags));
    return handle;
  }

  // Adds a conditional node; returns its body graphs.
  std::vector<CUgraph> add_conditional(CUgraph graph, CUgraphConditionalHandle handle,
                                       CUgraphConditionalNodeType type, unsigned size,
                                       const std::vector<CUgraphNode>& deps = {},
                                       CUgraphNode* node_out = nullptr) {
    CUgraphNodeParams params{};
    params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.conditional.handle = handle;
    params.conditional.type = type;
    params.conditional.size = size;
    params.conditional.ctx = context;
    CUgraphNode node = nullptr;
    EXPECT_CU_ERROR(CUDA_SUCCESS, api.add_node(&node, graph, deps.data(), deps.size(), &params));
    if (node_out != nullptr) *node_out = node;
    if (params.conditional.phGraph_out == nullptr) return {};
    return std::vector<CUgraph>(params.conditional.phGraph_out,
                                params.conditional.phGraph_out + size);
  }

  // Instantiates, launches once, synchronises, destroys the executable graph.
  void run_once(CUgraph graph) {
    CUgraphExec exec = instantiate(graph);
    ASSERT_CU(cu.cuGraphLaunch(exec, stream));
    ASSERT_CU(cu.cuStreamSynchronize(stream));
    ASSERT_CU(cu.cuGraphExecDestroy(exec));
  }

  float read_float(CUdeviceptr pointer) {
    float value = 0;
    EXPECT_EQ(cu.cuMemcpyDtoH_v2(&value, pointer, sizeof value), CUDA_SUCCESS);
    return value;
  }
  void write_float(CUdeviceptr pointer, float value) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    ASSERT_CU(cu.cuMemsetD32_v2(pointer, bits, 1));
  }

  GraphApi api;
  CUstream stream = nullptr;
};

TEST_F(GraphMemoryTest, CapturedAllocationUsesNoMemoryUntilLaunchAndIsKeptUntilTrim) {
  const uint64_t bytes = 64 * kMiB;
  const uint64_t device_used = device_status().used;
  uint32_t* host = nullptr;
  ASSERT_CU(cu.cuMemAllocHost_v2(reinterpret_cast<void**>(&host), 64 * sizeof(uint32_t)));

  CUdeviceptr pointer = 0;
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cu.cuMemAllocAsync(&pointer, bytes, stream));
  EXPECT_NE(pointer, 0u);
  launch_fill(stream, pointer, 7, 4096);
  ASSERT_CU(cu.cuMemsetD32Async(pointer, 9, 16, stream));
  ASSERT_CU(cu.cuMemcpyDtoHAsync_v2(host, pointer, 64 * sizeof(uint32_t), stream));
  EXPECT_EQ(device_status().used, device_used);  // another process's view, mid-capture
  ASSERT_CU(cu.cuMemFreeAsync(pointer, stream));
  ASSERT_CU(cu.cuStreamEndCapture(stream, &graph));
  EXPECT_EQ(node_types(graph),
            (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_KERNEL,
                                          CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEMCPY,
                                          CU_GRAPH_NODE_TYPE_MEM_FREE}));
  EXPECT_EQ(device_status().used, device_used);
  EXPECT_EQ(reserved(), 0u);

  CUgraphExec exec = instantiate(graph);
  EXPECT_EQ(reserved(), 0u);  // instantiation maps nothing
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(host[0], 9u);
  EXPECT_EQ(host[15], 9u);
  EXPECT_EQ(host[16], 7u);
  EXPECT_EQ(host[63], 7u);
  EXPECT_EQ(reserved(), bytes);
  EXPECT_EQ(used(), bytes);  // still mapped to the executable graph
  DeviceStatus status = device_status();
  EXPECT_EQ(status.used, device_used + bytes);
  ASSERT_NE(status.process(getpid()), nullptr);
  EXPECT_EQ(status.process(getpid())->used_bytes, device_used + bytes);

  // Relaunches reuse the same memory.
  std::memset(host, 0, 64 * sizeof(uint32_t));
  for (int i = 0; i < 3; ++i) ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(host[16], 7u);
  EXPECT_EQ(reserved(), bytes);
  EXPECT_EQ(attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), bytes);
  EXPECT_EQ(device_status().used, device_used + bytes);

  // Trim gives back what no launch in flight uses; the next launch maps again.
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(device_status().used, device_used);
  EXPECT_EQ(attribute(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), bytes);
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(reserved(), bytes);

  // Destroying the executable graph keeps the memory reserved for other graphs.
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(reserved(), bytes);
  EXPECT_EQ(device_status().used, device_used + bytes);
  ASSERT_CU(cu.cuGraphDestroy(graph));
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);
  EXPECT_EQ(device_status().used, device_used);
  ASSERT_CU(cu.cuMemFreeHost(host));
}

TEST_F(GraphMemoryTest, TrimKeepsMemoryOfALaunchInFlight) {
  CUdeviceptr pointer = 0;
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cu.cuMemAllocAsync(&pointer, 8 * kMiB, stream));
  launch_spin(stream, 100000);  // 100 ms
  launch_fill(stream, pointer, 3, 1024);
  ASSERT_CU(cu.cuMemFreeAsync(pointer, stream));
  ASSERT_CU(cu.cuStreamEndCapture(stream, &graph));
  CUgraphExec exec = instantiate(graph);
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 8 * kMiB);         // the launch is still running
  ASSERT_CU(cu.cuGraphExecDestroy(exec));  // freed when the launch completes
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(cu.cuStreamQuery(stream), CUDA_SUCCESS);
  EXPECT_EQ(used(), 0u);
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(GraphMemoryTest, ExplicitMemoryNodesAndTheirParameters) {
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS params = alloc_params(kMiB);
  CUgraphNode alloc = nullptr;
  ASSERT_CU(api.add_mem_alloc_node(&alloc, graph, nullptr, 0, &params));
  ASSERT_NE(params.dptr, 0u);
  CUDA_MEM_ALLOC_NODE_PARAMS queried{};
  ASSERT_CU(api.mem_alloc_node_params(alloc, &queried));
  EXPECT_EQ(queried.dptr, params.dptr);
  EXPECT_EQ(queried.bytesize, kMiB);
  EXPECT_EQ(queried.poolProps.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  CUgraphNode fill = add_fill(graph, params.dptr, 42, kMiB / 4, {alloc});
  CUgraphNode free_node = nullptr;
  ASSERT_CU(api.add_mem_free_node(&free_node, graph, &fill, 1, params.dptr));
  CUdeviceptr freed = 0;
  ASSERT_CU(api.mem_free_node_params(free_node, &freed));
  EXPECT_EQ(freed, params.dptr);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, api.mem_free_node_params(alloc, &freed));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, api.mem_alloc_node_params(fill, &queried));
  EXPECT_EQ(node_types(graph),
            (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_KERNEL,
                                          CU_GRAPH_NODE_TYPE_MEM_FREE}));

  // The real driver's refusals: an allocation freed twice in one graph, an address no
  // allocation node returned, an empty or IPC-shareable allocation.
  CUgraphNode refused = nullptr;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.add_mem_free_node(&refused, graph, &free_node, 1, params.dptr));
  CUdeviceptr ordinary = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&ordinary, 4096));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.add_mem_free_node(&refused, graph, nullptr, 0, ordinary));
  CUDA_MEM_ALLOC_NODE_PARAMS bad = alloc_params(0);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.add_mem_alloc_node(&refused, graph, nullptr, 0, &bad));
  bad = alloc_params(4096);
  bad.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.add_mem_alloc_node(&refused, graph, nullptr, 0, &bad));

  // The address is fixed for the node's lifetime: every launch writes the same range.
  CUgraphExec exec = instantiate(graph);
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(reserved(), kMiB);
  // Only one executable graph of a graph with memory nodes may exist at a time.
  CUgraphExec second = nullptr;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuGraphInstantiateWithFlags(&second, graph, 0));
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  exec = instantiate(graph);
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);
  ASSERT_CU(cu.cuMemFree_v2(ordinary));
}

TEST_F(GraphMemoryTest, GenericAddNodeBuildsMemoryNodes) {
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  CUgraphNodeParams alloc_node{};
  alloc_node.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  alloc_node.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc_node.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc_node.alloc.bytesize = 4096;
  CUgraphNode alloc = nullptr;
  ASSERT_CU(api.add_node(&alloc, graph, nullptr, 0, &alloc_node));
  CUdeviceptr pointer = alloc_node.alloc.dptr;
  ASSERT_NE(pointer, 0u);
  CUgraphNodeParams memset_node{};
  memset_node.type = CU_GRAPH_NODE_TYPE_MEMSET;
  memset_node.memset.dst = pointer;
  memset_node.memset.value = 0x5a5a5a5a;
  memset_node.memset.elementSize = 4;
  memset_node.memset.width = 1024;
  memset_node.memset.height = 1;
  CUgraphNode memset = nullptr;
  CUgraphEdgeData edge{};
  ASSERT_CU(api.add_node_v2(&memset, graph, &alloc, &edge, 1, &memset_node));
  CUgraphNodeParams free_node{};
  free_node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  free_node.free.dptr = pointer;
  CUgraphNode free = nullptr;
  ASSERT_CU(api.add_node(&free, graph, &memset, 1, &free_node));
  CUgraphNodeType type{};
  ASSERT_CU(cu.cuGraphNodeGetType(alloc, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  ASSERT_CU(cu.cuGraphNodeGetType(free, &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_MEM_FREE);
  CUgraphNodeParams unsupported{};
  unsupported.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  CUgraphNode refused = nullptr;
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_SUPPORTED,
                  api.add_node(&refused, graph, nullptr, 0, &unsupported));
  run_once(graph);
  EXPECT_EQ(reserved(), 4096u);
  ASSERT_CU(cu.cuGraphDestroy(graph));
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);
}

class SmallDeviceGraphMemoryTest : public GraphMemoryTest {
 protected:
  TestDeviceConfig device_config() const override {
    TestDeviceConfig config;
    config.memory = "256MiB";
    return config;
  }
};

TEST_F(SmallDeviceGraphMemoryTest, LaunchThatDoesNotFitFailsWithOutOfMemoryAndLeaksNothing) {
  CUdeviceptr held = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&held, 64 * kMiB));  // 256 - 64 (context) - 64 = 128 MiB free
  CUdeviceptr pointer = 0;
  CUgraph graph = capture_alloc_fill(160 * kMiB, 1, true, &pointer);  // capture needs nothing
  CUgraphExec exec = instantiate(graph);
  uint64_t free_before = free_bytes();
  uint64_t used_before = device_status().used;
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, cu.cuGraphLaunch(exec, stream));
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, api.upload(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(free_bytes(), free_before);
  EXPECT_EQ(device_status().used, used_before);
  EXPECT_EQ(reserved(), 0u);
  EXPECT_EQ(used(), 0u);

  ASSERT_CU(cu.cuMemFree_v2(held));  // now it fits
  ASSERT_CU(api.upload(exec, stream));
  EXPECT_EQ(reserved(), 160 * kMiB);
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(reserved(), 160 * kMiB);
  CUdeviceptr other = 0;  // the graph pool's memory is not available to cuMemAlloc
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, cu.cuMemAlloc_v2(&other, 64 * kMiB));
  ASSERT_CU(api.trim(0));
  ASSERT_CU(cu.cuMemAlloc_v2(&other, 64 * kMiB));
  ASSERT_CU(cu.cuMemFree_v2(other));
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(GraphMemoryTest, UnfreedAllocationOutlivesTheLaunchUntilFreedOutsideTheGraph) {
  const uint64_t bytes = 32 * kMiB;
  CUdeviceptr pointer = 0;
  CUgraph graph = capture_alloc_fill(bytes, 5, false, &pointer);
  EXPECT_EQ(node_types(graph), (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_MEM_ALLOC,
                                                             CU_GRAPH_NODE_TYPE_KERNEL}));
  CUgraphExec exec = instantiate(graph);
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(read(pointer, 4), (std::vector<uint32_t>{5, 5, 5, 5}));  // usable after the graph
  // Still allocated: relaunching first needs a free (or AUTO_FREE_ON_LAUNCH).
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), bytes);  // an unfreed allocation is never trimmed

  ASSERT_CU(cu.cuMemFree_v2(pointer));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemFree_v2(pointer));  // freed already
  EXPECT_EQ(reserved(), bytes);  // back in the graph pool, unused
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);

  // cuMemFreeAsync works the same, in stream order.
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuMemFreeAsync(pointer, stream));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));  // allowed: the free was issued
  ASSERT_CU(cu.cuMemFreeAsync(pointer, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);

  // A free node of another graph frees it too.
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  CUgraph freeing = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&freeing, 0));
  CUgraphNode free_node = nullptr;
  ASSERT_CU(api.add_mem_free_node(&free_node, freeing, nullptr, 0, pointer));
  CUgraphExec freeing_exec = instantiate(freeing);
  ASSERT_CU(cu.cuGraphLaunch(freeing_exec, stream));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuGraphLaunch(freeing_exec, stream));  // not allocated
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);

  // The allocation survives the destruction of its graphs until it is freed.
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  ASSERT_CU(cu.cuGraphExecDestroy(freeing_exec));
  ASSERT_CU(cu.cuGraphDestroy(freeing));
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
  EXPECT_EQ(used(), bytes);
  EXPECT_EQ(read(pointer, 1)[0], 5u);
  ASSERT_CU(cu.cuMemFree_v2(pointer));
  EXPECT_EQ(used(), 0u);
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);
}

TEST_F(GraphMemoryTest, AutoFreeOnLaunchFreesThePreviousLaunchsAllocation) {
  CUdeviceptr pointer = 0;
  CUgraph graph = capture_alloc_fill(kMiB, 8, false, &pointer);
  CUgraphExec exec = nullptr;
  constexpr unsigned long long kBoth =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuGraphInstantiateWithFlags(&exec, graph, kBoth));
  exec = instantiate(graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
  for (int i = 0; i < 3; ++i) ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(read(pointer, 1)[0], 8u);
  EXPECT_EQ(reserved(), kMiB);
  ASSERT_CU(cu.cuMemFree_v2(pointer));
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(reserved(), 0u);
}

TEST_F(GraphMemoryTest, AnotherProcessSeesGraphMemoryAsUsed) {
  CUdeviceptr pointer = 0;
  CUgraph graph = capture_alloc_fill(640 * kMiB, 1, true, &pointer);
  CUgraphExec exec = instantiate(graph);
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  DeviceStatus status = device_status();
  EXPECT_EQ(status.used, 64 * kMiB + 640 * kMiB);
  ASSERT_NE(status.process(getpid()), nullptr);
  EXPECT_EQ(status.process(getpid())->used_bytes, 704 * kMiB);
  {
    // 1024 - 704 = 320 MiB free: a child needs 64 MiB for its context plus what it holds.
    ChildProcess child({child_program(), "hold", std::to_string(300 * kMiB)});
    EXPECT_EQ(child.read_line(), "error cuMemAlloc CUDA_ERROR_OUT_OF_MEMORY");
    child.wait();
  }
  ASSERT_CU(api.trim(0));  // the executable graph is idle
  ChildProcess child({child_program(), "hold", std::to_string(300 * kMiB)});
  EXPECT_EQ(child.read_line(), "ready");
  // The pool must now charge the device again, and cannot.
  EXPECT_CU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, cu.cuGraphLaunch(exec, stream));
  child.kill_hard();
  child.wait();
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(GraphMemoryTest, AttributesAndTheirHighWaterMarks) {
  CUdeviceptr pointer = 0;
  CUgraph graph = capture_alloc_fill(16 * kMiB, 1, true, &pointer);
  run_once(graph);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(reserved(), 16 * kMiB);
  EXPECT_EQ(attribute(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 16 * kMiB);
  ASSERT_CU(api.trim(0));
  EXPECT_EQ(attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 16 * kMiB);
  cuuint64_t zero = 0, one = 1;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.set_attribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.set_attribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero));
  ASSERT_CU(api.set_attribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
  ASSERT_CU(api.set_attribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
  EXPECT_EQ(attribute(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 0u);
  EXPECT_EQ(attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 0u);
  cuuint64_t value = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_DEVICE,
                  api.get_attribute(7, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &value));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_DEVICE, api.trim(7));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(GraphMemoryTest, CapturedFreeOfANonGraphAllocationInvalidatesTheCapture) {
  CUdeviceptr ordinary = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&ordinary, 4096));
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuMemFreeAsync(ordinary, stream));
  CUgraph graph = nullptr;
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cu.cuStreamEndCapture(stream, &graph));
  ASSERT_CU(cu.cuMemFree_v2(ordinary));
}

// --- conditional nodes ---

class ConditionalTest : public GraphMemoryTest {
 protected:
  void SetUp() override {
    GraphMemoryTest::SetUp();
    ASSERT_CU(cu.cuMemAlloc_v2(&buffer, 16 * sizeof(uint32_t)));
    ASSERT_CU(cu.cuMemsetD32_v2(buffer, 0, 16));
    ASSERT_CU(cu.cuMemAlloc_v2(&one, sizeof(float)));
    write_float(one, 1.0f);
  }
  CUdeviceptr slot(int i) const { return buffer + i * sizeof(uint32_t); }

  CUdeviceptr buffer = 0;
  CUdeviceptr one = 0;
};

TEST_F(ConditionalTest, IfRunsItsBodyOnlyWhenTheConditionIsSet) {
  for (uint32_t value : {0u, 1u, 7u}) {
    ASSERT_CU(cu.cuMemsetD32_v2(buffer, 0, 16));
    CUgraph graph = nullptr;
    ASSERT_CU(cu.cuGraphCreate(&graph, 0));
    CUgraphConditionalHandle handle = conditional_handle(graph, 0);
    CUgraphNode set = add_set_condition(graph, handle, value);
    std::vector<CUgraph> bodies = add_conditional(graph, handle, CU_GRAPH_COND_TYPE_IF, 1, {set});
    ASSERT_EQ(bodies.size(), 1u);
    add_fill(bodies[0], slot(0), 11, 1);
    run_once(graph);
    EXPECT_EQ(read(slot(0), 1)[0], value != 0 ? 11u : 0u) << "condition " << value;
    ASSERT_CU(cu.cuGraphDestroy(graph));
  }
}

TEST_F(ConditionalTest, IfElseRunsExactlyOneBranch) {
  for (uint32_t value : {0u, 1u}) {
    ASSERT_CU(cu.cuMemsetD32_v2(buffer, 0, 16));
    CUgraph graph = nullptr;
    ASSERT_CU(cu.cuGraphCreate(&graph, 0));
    // The default value decides when no kernel sets the condition.
    CUgraphConditionalHandle handle = conditional_handle(graph, value);
    CUgraphNode node = nullptr;
    std::vector<CUgraph> bodies =
        add_conditional(graph, handle, CU_GRAPH_COND_TYPE_IF, 2, {}, &node);
    ASSERT_EQ(bodies.size(), 2u);
    CUgraphNodeType type{};
    ASSERT_CU(cu.cuGraphNodeGetType(node, &type));
    EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_CONDITIONAL);
    add_fill(bodies[0], slot(0), 11, 1);
    add_fill(bodies[1], slot(1), 22, 1);
    run_once(graph);
    std::vector<uint32_t> host = read(buffer, 2);
    EXPECT_EQ(host[0], value != 0 ? 11u : 0u);
    EXPECT_EQ(host[1], value != 0 ? 0u : 22u);
    ASSERT_CU(cu.cuGraphDestroy(graph));
  }
}

TEST_F(ConditionalTest, WhileRunsItsBodyUntilTheCountdownReachesZero) {
  CUdeviceptr counter = slot(8);
  CUdeviceptr total = slot(9);
  write_float(total, 0.0f);
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  CUgraphConditionalHandle handle = conditional_handle(graph, 1);
  std::vector<CUgraph> bodies = add_conditional(graph, handle, CU_GRAPH_COND_TYPE_WHILE, 1);
  ASSERT_EQ(bodies.size(), 1u);
  CUgraphNode increment = add_increment(bodies[0], total, one);
  add_kernel(bodies[0], "fracgpu_fake_countdown_condition", {&handle, &counter}, {increment});
  CUgraphExec exec = instantiate(graph);
  ASSERT_CU(cu.cuMemsetD32_v2(counter, 3, 1));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(read_float(total), 3.0f);
  EXPECT_EQ(read(counter, 1)[0], 0u);
  // The default (1) is assigned again at every launch.
  ASSERT_CU(cu.cuMemsetD32_v2(counter, 5, 1));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  EXPECT_EQ(read_float(total), 8.0f);
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));

  // A WHILE whose condition starts at 0 never runs its body.
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  handle = conditional_handle(graph, 0);
  bodies = add_conditional(graph, handle, CU_GRAPH_COND_TYPE_WHILE, 1);
  add_increment(bodies[0], total, one);
  run_once(graph);
  EXPECT_EQ(read_float(total), 8.0f);
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(ConditionalTest, SwitchRunsTheBodyTheValueSelects) {
  for (uint32_t value : {0u, 2u, 5u}) {
    ASSERT_CU(cu.cuMemsetD32_v2(buffer, 0, 16));
    CUgraph graph = nullptr;
    ASSERT_CU(cu.cuGraphCreate(&graph, 0));
    CUgraphConditionalHandle handle = conditional_handle(graph, 0);
    CUgraphNode set = add_set_condition(graph, handle, value);
    std::vector<CUgraph> bodies =
        add_conditional(graph, handle, CU_GRAPH_COND_TYPE_SWITCH, 3, {set});
    ASSERT_EQ(bodies.size(), 3u);
    for (int i = 0; i < 3; ++i) add_fill(bodies[i], slot(i), 100 + i, 1);
    run_once(graph);
    std::vector<uint32_t> host = read(buffer, 3);
    for (uint32_t i = 0; i < 3; ++i)
      EXPECT_EQ(host[i], i == value ? 100 + i : 0u) << "switch " << value << " body " << i;
    ASSERT_CU(cu.cuGraphDestroy(graph));
  }
}

TEST_F(ConditionalTest, NestedConditionalsAndChildGraphsAreInstantiated) {
  // parent: child graph (fill slot 0) -> IF { child graph (fill slot 1), WHILE { countdown } }
  CUgraph child = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&child, 0));
  add_fill(child, slot(0), 1, 1);
  CUgraph body_child = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&body_child, 0));
  add_fill(body_child, slot(1), 2, 1);

  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  CUgraphNode child_node = nullptr;
  ASSERT_CU(api.add_child_graph_node(&child_node, graph, nullptr, 0, child));
  CUgraph embedded = nullptr;
  ASSERT_CU(api.child_graph(child_node, &embedded));
  EXPECT_NE(embedded, child);  // a clone
  EXPECT_EQ(node_types(embedded), std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_KERNEL});
  ASSERT_CU(cu.cuGraphDestroy(child));  // the clone is independent of the original
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuGraphDestroy(embedded));  // owned by the node

  CUgraphConditionalHandle outer = conditional_handle(graph, 1);
  std::vector<CUgraph> if_body =
      add_conditional(graph, outer, CU_GRAPH_COND_TYPE_IF, 1, {child_node});
  CUgraphNode nested_child = nullptr;
  ASSERT_CU(api.add_child_graph_node(&nested_child, if_body[0], nullptr, 0, body_child));
  CUgraphConditionalHandle inner = conditional_handle(if_body[0], 1);
  std::vector<CUgraph> while_body =
      add_conditional(if_body[0], inner, CU_GRAPH_COND_TYPE_WHILE, 1, {nested_child});
  CUdeviceptr counter = slot(8);
  CUdeviceptr total = slot(9);
  write_float(total, 0.0f);
  CUgraphNode increment = add_increment(while_body[0], total, one);
  add_kernel(while_body[0], "fracgpu_fake_countdown_condition", {&inner, &counter}, {increment});
  ASSERT_CU(cu.cuMemsetD32_v2(counter, 4, 1));
  run_once(graph);
  std::vector<uint32_t> host = read(buffer, 2);
  EXPECT_EQ(host[0], 1u);
  EXPECT_EQ(host[1], 2u);
  EXPECT_EQ(read_float(total), 4.0f);

  // Bodies take only kernel, empty, memset, memcpy, child graph and conditional nodes;
  // a child graph cannot hold conditional nodes.
  CUgraphNode refused = nullptr;
  CUDA_MEM_ALLOC_NODE_PARAMS params = alloc_params(4096);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.add_mem_alloc_node(&refused, if_body[0], nullptr, 0, &params));
  CUgraphNodeParams host_node{};
  host_node.type = CU_GRAPH_NODE_TYPE_HOST;
  host_node.host.fn = [](void*) {};
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.add_node(&refused, if_body[0], nullptr, 0, &host_node));
  CUgraph with_conditional = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&with_conditional, 0));
  add_conditional(with_conditional, conditional_handle(with_conditional, 0), CU_GRAPH_COND_TYPE_IF,
                  1);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.add_child_graph_node(&refused, graph, nullptr, 0, with_conditional));
  ASSERT_CU(cu.cuGraphDestroy(with_conditional));

  // Destroying the parent destroys every graph and node it owns.
  CUgraphNode body_node = nullptr;
  size_t count = 1;
  ASSERT_CU(cu.cuGraphGetNodes(while_body[0], &body_node, &count));
  ASSERT_CU(cu.cuGraphDestroy(graph));
  CUgraphNodeType type{};
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuGraphNodeGetType(body_node, &type));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuGraphGetNodes(if_body[0], nullptr, &count));
  ASSERT_CU(cu.cuGraphDestroy(body_child));
}

TEST_F(ConditionalTest, InvalidConditionalParametersAreRefused) {
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  CUgraphConditionalHandle handle = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  api.conditional_handle_create(&handle, graph, context, 0, 0x80));
  handle = conditional_handle(graph, 0, 0);
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = handle;
  params.conditional.ctx = context;
  CUgraphNode node = nullptr;
  params.conditional.type = CU_GRAPH_COND_TYPE_IF;
  params.conditional.size = 3;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, api.add_node(&node, graph, nullptr, 0, &params));
  params.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  params.conditional.size = 2;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, api.add_node(&node, graph, nullptr, 0, &params));
  params.conditional.type = CU_GRAPH_COND_TYPE_SWITCH;
  params.conditional.size = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, api.add_node(&node, graph, nullptr, 0, &params));
  params.conditional.size = 1;
  params.conditional.handle = 12345;  // never created
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, api.add_node(&node, graph, nullptr, 0, &params));
  // Setting a condition outside a launch of its graph is an illegal access.
  uint32_t value = 1;
  void* args[] = {&handle, &value};
  ASSERT_CU(cu.cuLaunchKernel(kernel("fracgpu_fake_set_condition"), 1, 1, 1, 1, 1, 1, 0, stream,
                              args, nullptr));
  EXPECT_CU_ERROR(CUDA_ERROR_ILLEGAL_ADDRESS, cu.cuStreamSynchronize(stream));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(ConditionalTest, BodyFilledByStreamCapture) {
  if (api.begin_capture_to_graph == nullptr)
    GTEST_SKIP() << "needs cuStreamBeginCaptureToGraph (not exported by the simulated driver yet)";
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  CUgraphConditionalHandle handle = conditional_handle(graph, 1);
  std::vector<CUgraph> bodies = add_conditional(graph, handle, CU_GRAPH_COND_TYPE_IF, 2);
  ASSERT_CU(api.begin_capture_to_graph(stream, bodies[0], nullptr, nullptr, 0,
                                       CU_STREAM_CAPTURE_MODE_GLOBAL));
  launch_fill(stream, slot(0), 33, 1);
  ASSERT_CU(cu.cuMemsetD32Async(slot(1), 44, 1, stream));
  CUgraph captured = nullptr;
  ASSERT_CU(cu.cuStreamEndCapture(stream, &captured));
  EXPECT_EQ(captured, bodies[0]);
  EXPECT_EQ(node_types(bodies[0]),
            (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMSET}));
  run_once(graph);
  std::vector<uint32_t> host = read(buffer, 2);
  EXPECT_EQ(host[0], 33u);
  EXPECT_EQ(host[1], 44u);
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

}  // namespace
}  // namespace fakecuda_test
