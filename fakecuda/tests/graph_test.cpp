// Graphs: stream capture records work instead of running it, the captured graph
// replays it on launch, explicit graphs work the same way, forbidden calls during a
// capture invalidate it, and captures fork/join across streams through events.
#include <vector>

#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

class GraphTest : public FakeDeviceTest {
 protected:
  void SetUp() override {
    FakeDeviceTest::SetUp();
    ASSERT_CU(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cu.cuMemAlloc_v2(&buffer, kCount * sizeof(uint32_t)));
    ASSERT_CU(cu.cuMemsetD32_v2(buffer, 0, kCount));
  }

  std::vector<uint32_t> read_buffer() {
    std::vector<uint32_t> host(kCount);
    EXPECT_EQ(cu.cuMemcpyDtoH_v2(host.data(), buffer, kCount * sizeof(uint32_t)), CUDA_SUCCESS);
    return host;
  }

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

  static constexpr uint64_t kCount = 4096;
  CUstream stream = nullptr;
  CUdeviceptr buffer = 0;
};

TEST_F(GraphTest, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  uint64_t kernels_before = device_status().kernels;
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus capturing{};
  ASSERT_CU(cu.cuStreamIsCapturing(stream, &capturing));
  EXPECT_EQ(capturing, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  launch_fill(stream, buffer, 7, kCount);
  ASSERT_CU(cu.cuMemsetD32Async(buffer, 9, 16, stream));
  launch_spin(stream, 100);
  cuuint64_t id = 0;
  CUgraph captured_graph = nullptr;
  const CUgraphNode* frontier = nullptr;
  size_t frontier_size = 0;
  ASSERT_CU(cu.cuStreamGetCaptureInfo_v3(stream, &capturing, &id, &captured_graph, &frontier,
                                         nullptr, &frontier_size));
  EXPECT_NE(id, 0u);
  EXPECT_EQ(frontier_size, 1u);

  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuStreamEndCapture(stream, &graph));
  EXPECT_EQ(graph, captured_graph);
  // Synchronising and synchronous copies are prohibited during the capture: check after.
  ASSERT_CU(cu.cuCtxSynchronize());
  EXPECT_EQ(read_buffer()[0], 0u);  // nothing ran
  EXPECT_EQ(device_status().kernels, kernels_before);
  EXPECT_EQ(node_types(graph),
            (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMSET,
                                          CU_GRAPH_NODE_TYPE_KERNEL}));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  std::vector<uint32_t> host = read_buffer();
  EXPECT_EQ(host[0], 9u);
  EXPECT_EQ(host[16], 7u);
  EXPECT_EQ(host[kCount - 1], 7u);
  EXPECT_EQ(device_status().kernels, kernels_before + 4);
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(GraphTest, ExplicitlyBuiltGraphRunsInDependencyOrder) {
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuGraphCreate(&graph, 0));
  uint32_t value = 5;
  uint64_t count = kCount;
  void* params[] = {&buffer, &value, &count};
  CUDA_KERNEL_NODE_PARAMS kernel_params{};
  kernel_params.func = kernel("fracgpu_fake_fill");
  kernel_params.gridDimX = kernel_params.gridDimY = kernel_params.gridDimZ = 1;
  kernel_params.blockDimX = kernel_params.blockDimY = kernel_params.blockDimZ = 1;
  kernel_params.kernelParams = params;
  CUgraphNode fill = nullptr, memset = nullptr;
  ASSERT_CU(cu.cuGraphAddKernelNode_v2(&fill, graph, nullptr, 0, &kernel_params));
  value = 1234;  // arguments were copied when the node was added
  CUDA_MEMSET_NODE_PARAMS memset_params{};
  memset_params.dst = buffer;
  memset_params.value = 3;
  memset_params.elementSize = 4;
  memset_params.width = 8;
  memset_params.height = 1;
  ASSERT_CU(cu.cuGraphAddMemsetNode(&memset, graph, &fill, 1, &memset_params, context));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  std::vector<uint32_t> host = read_buffer();
  EXPECT_EQ(host[7], 3u);
  EXPECT_EQ(host[8], 5u);
  CUgraphNode foreign = reinterpret_cast<CUgraphNode>(&host);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuGraphAddMemsetNode(&memset, graph, &foreign, 1, &memset_params, context));
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

TEST_F(GraphTest, SynchronizingDuringCaptureInvalidatesIt) {
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  launch_spin(stream, 10);
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cu.cuStreamSynchronize(stream));
  CUgraph graph = nullptr;
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cu.cuStreamEndCapture(stream, &graph));
  EXPECT_EQ(graph, nullptr);
  CUstreamCaptureStatus capturing{};
  ASSERT_CU(cu.cuStreamIsCapturing(stream, &capturing));
  EXPECT_EQ(capturing, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_CU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  cu.cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL));
}

TEST_F(GraphTest, CaptureForksAndJoinsThroughEvents) {
  CUstream side = nullptr;
  CUevent fork = nullptr, join = nullptr;
  ASSERT_CU(cu.cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cu.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cu.cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cu.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cu.cuEventRecord(fork, stream));
  ASSERT_CU(cu.cuStreamWaitEvent(side, fork, 0));  // `side` joins the capture
  CUstreamCaptureStatus capturing{};
  ASSERT_CU(cu.cuStreamIsCapturing(side, &capturing));
  EXPECT_EQ(capturing, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  launch_fill(side, buffer, 11, kCount);
  ASSERT_CU(cu.cuEventRecord(join, side));
  ASSERT_CU(cu.cuStreamWaitEvent(stream, join, 0));
  ASSERT_CU(cu.cuMemsetD32Async(buffer, 1, 1, stream));
  CUgraph graph = nullptr;
  ASSERT_CU(cu.cuStreamEndCapture(stream, &graph));
  ASSERT_CU(cu.cuStreamIsCapturing(side, &capturing));
  EXPECT_EQ(capturing, CU_STREAM_CAPTURE_STATUS_NONE);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cu.cuGraphInstantiateWithFlags(&exec, graph, 0));
  ASSERT_CU(cu.cuGraphLaunch(exec, stream));
  ASSERT_CU(cu.cuStreamSynchronize(stream));
  std::vector<uint32_t> host = read_buffer();
  EXPECT_EQ(host[0], 1u);
  EXPECT_EQ(host[1], 11u);
  ASSERT_CU(cu.cuGraphExecDestroy(exec));
  ASSERT_CU(cu.cuGraphDestroy(graph));
}

}  // namespace
}  // namespace fakecuda_test
