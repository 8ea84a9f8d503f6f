// Legacy CUDA IPC on the simulated GPU (src/ipc_memory.h), as the real driver behaves: a
// handle names a whole cuMemAlloc allocation; another process opens it at an address of
// its own and sees this process's data, and this process sees its writes; VMM, managed and
// pool memory are refused; opening one's own handle, a freed allocation's or an exited
// process's fails.
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "child_process.h"
#include "fake_device_test.h"
#include "ipc_child.h"

namespace fakecuda_test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The words of one reply line.
std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

class IpcTest : public FakeDeviceTest {
 protected:
  CUdeviceptr allocate_filled(uint64_t bytes, uint32_t value) {
    CUdeviceptr ptr = 0;
    EXPECT_EQ(cu.cuMemAlloc_v2(&ptr, bytes), CUDA_SUCCESS);
    EXPECT_EQ(cu.cuMemsetD32_v2(ptr, value, bytes / 4), CUDA_SUCCESS);
    return ptr;
  }
  CUipcMemHandle handle_of(CUdeviceptr ptr) {
    CUipcMemHandle handle{};
    EXPECT_EQ(cu.cuIpcGetMemHandle(&handle, ptr), CUDA_SUCCESS);
    return handle;
  }
  std::vector<uint32_t> read_back(CUdeviceptr ptr, uint64_t count) {
    std::vector<uint32_t> values(count);
    EXPECT_EQ(cu.cuMemcpyDtoH_v2(values.data(), ptr, count * 4), CUDA_SUCCESS);
    return values;
  }
  // Starts the peer process (its own context on device 0).
  std::unique_ptr<ChildProcess> peer() {
    auto child = std::make_unique<ChildProcess>(std::vector<std::string>{child_program(), "ipc"});
    EXPECT_EQ(child->read_line(), "ready");
    return child;
  }
  std::vector<std::string> ask(ChildProcess& child, const std::string& line) {
    child.write_line(line);
    return words(child.read_line());
  }
};

TEST_F(IpcTest, AHandleNamesTheWholeAllocationAndIsUniqueToIt) {
  CUdeviceptr a = allocate_filled(4 * kMiB, 1);
  CUdeviceptr b = allocate_filled(4 * kMiB, 2);
  CUipcMemHandle of_base = handle_of(a);
  CUipcMemHandle of_inside = handle_of(a + kMiB + 12);
  EXPECT_EQ(std::memcmp(&of_base, &of_inside, sizeof of_base), 0);
  const CUipcMemHandle again_a = handle_of(a), of_b = handle_of(b);
  EXPECT_EQ(std::memcmp(&of_base, &again_a, sizeof of_base), 0) << "stable across calls";
  EXPECT_NE(std::memcmp(&of_base, &of_b, sizeof of_base), 0);
  // Exporting keeps the data where it was.
  EXPECT_EQ(read_back(a, 1024), std::vector<uint32_t>(1024, 1));
  ASSERT_CU(cu.cuMemFree_v2(a));
  CUdeviceptr again = allocate_filled(4 * kMiB, 3);
  CUipcMemHandle of_new = handle_of(again);
  EXPECT_NE(std::memcmp(&of_base, &of_new, sizeof of_base), 0) << "a new allocation, a new handle";
}

TEST_F(IpcTest, VmmManagedAndPoolMemoryAreNotLegacyIpcCapable) {
  CUipcMemHandle handle{};
  // VMM: cuMemCreate + cuMemMap, what fracgpu's shim backs swappable allocations with.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle physical = 0;
  CUdeviceptr vmm = 0;
  ASSERT_CU(cu.cuMemCreate(&physical, 2 * kMiB, &prop, 0));
  ASSERT_CU(cu.cuMemAddressReserve(&vmm, 2 * kMiB, 0, 0, 0));
  ASSERT_CU(cu.cuMemMap(vmm, 2 * kMiB, 0, physical, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuIpcGetMemHandle(&handle, vmm));
  int capable = -1;
  ASSERT_CU(
      cu.cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, vmm));
  EXPECT_EQ(capable, 0);

  CUdeviceptr managed = 0;
  ASSERT_CU(cu.cuMemAllocManaged(&managed, kMiB, CU_MEM_ATTACH_GLOBAL));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuIpcGetMemHandle(&handle, managed));

  CUdeviceptr pooled = 0;
  ASSERT_CU(cu.cuMemAllocAsync(&pooled, kMiB, nullptr));
  ASSERT_CU(cu.cuCtxSynchronize());
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuIpcGetMemHandle(&handle, pooled));

  CUdeviceptr plain = allocate_filled(kMiB, 0);
  ASSERT_CU(
      cu.cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, plain));
  EXPECT_EQ(capable, 1);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuIpcGetMemHandle(&handle, 0x1000));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuIpcGetMemHandle(nullptr, plain));
}

TEST_F(IpcTest, OpeningInTheExportingProcessIsAnInvalidContext) {
  CUdeviceptr a = allocate_filled(kMiB, 7);
  CUdeviceptr opened = 0;
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_CONTEXT, cu.cuIpcOpenMemHandle_v2(&opened, handle_of(a), 0));
  CUipcMemHandle garbage{};
  std::memset(&garbage, 0x5a, sizeof garbage);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuIpcOpenMemHandle_v2(&opened, garbage, 0));
  // Not an opened mapping.
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuIpcCloseMemHandle(a));
}

TEST_F(IpcTest, AnotherProcessReadsTheDataAndItsWritesAreSeenHere) {
  constexpr uint64_t kBytes = 8 * kMiB;
  constexpr uint64_t kCount = kBytes / 4;
  CUdeviceptr a = allocate_filled(kBytes, 0xabcd0001u);
  const std::string hex = hex_of_handle(handle_of(a));
  auto child = peer();
  auto opened =
      ask(*child, "open " + hex + " " + std::to_string(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  ASSERT_EQ(opened.size(), 3u);
  ASSERT_EQ(opened[1], "CUDA_SUCCESS");
  const std::string remote = opened[2];
  EXPECT_NE(remote, std::to_string(a)) << "mapped at an address of its own (allowed, not required)";
  auto read = ask(*child, "read " + remote + " " + std::to_string(kCount));
  ASSERT_EQ(read.size(), 5u);
  EXPECT_EQ(read[1], "CUDA_SUCCESS");
  EXPECT_EQ(read[2], std::to_string(0xabcd0001u));
  EXPECT_EQ(read[3], std::to_string(0xabcd0001u));
  EXPECT_EQ(read[4], std::to_string(uint64_t{0xabcd0001u} * kCount));
  EXPECT_EQ(ask(*child, "fill " + remote + " 1024 77")[1], "CUDA_SUCCESS");
  std::vector<uint32_t> seen = read_back(a, 1025);
  EXPECT_EQ(seen[0], 77u);
  EXPECT_EQ(seen[1023], 77u);
  EXPECT_EQ(seen[1024], 0xabcd0001u);
  // Our later writes reach the peer too.
  ASSERT_CU(cu.cuMemsetD32_v2(a, 99, 1));
  EXPECT_EQ(ask(*child, "read " + remote + " 1")[2], "99");

  // A second open returns the same mapping; each close drops one reference.
  EXPECT_EQ(ask(*child, "open1 " + hex + " 0")[2], remote);
  EXPECT_EQ(ask(*child, "close " + remote)[1], "CUDA_SUCCESS");
  EXPECT_EQ(ask(*child, "read " + remote + " 1")[1], "CUDA_SUCCESS") << "still mapped once";
  EXPECT_EQ(ask(*child, "close " + remote)[1], "CUDA_SUCCESS");
  EXPECT_EQ(ask(*child, "close " + remote)[1], "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(ask(*child, "read " + remote + " 1")[1], "CUDA_ERROR_INVALID_VALUE") << "unmapped";
  // Bad flags are refused before anything is looked up.
  EXPECT_EQ(ask(*child, "open " + hex + " 6")[1], "CUDA_ERROR_INVALID_VALUE");
  // The opener is charged nothing: the device holds our allocation and two contexts.
  EXPECT_EQ(ask(*child, "open " + hex + " 0")[1], "CUDA_SUCCESS");
  EXPECT_EQ(device_status().used, kBytes + 2 * 64 * kMiB);
  child->write_line("quit");
  EXPECT_EQ(child->wait(), 0);
}

TEST_F(IpcTest, AFreedAllocationsHandleNoLongerOpens) {
  CUdeviceptr a = allocate_filled(kMiB, 5);
  const std::string hex = hex_of_handle(handle_of(a));
  ASSERT_CU(cu.cuMemFree_v2(a));
  CUdeviceptr b = allocate_filled(kMiB, 6);  // may reuse the address and the descriptor number
  const std::string other = hex_of_handle(handle_of(b));
  auto child = peer();
  EXPECT_EQ(ask(*child, "open " + hex + " 0")[1], "CUDA_ERROR_INVALID_VALUE");
  auto opened = ask(*child, "open " + other + " 0");
  ASSERT_EQ(opened[1], "CUDA_SUCCESS");
  EXPECT_EQ(ask(*child, "read " + opened[2] + " 4")[2], "6");
}

TEST_F(IpcTest, AHandleOfAnExitedProcessNoLongerOpens) {
  auto exporter = peer();
  auto exported = ask(*exporter, "export " + std::to_string(2 * kMiB) + " 11");
  ASSERT_EQ(exported.size(), 3u);
  ASSERT_EQ(exported[1], "CUDA_SUCCESS");
  CUipcMemHandle handle{};
  ASSERT_TRUE(handle_from_hex(exported[2], &handle));
  CUdeviceptr opened = 0;
  ASSERT_CU(cu.cuIpcOpenMemHandle_v2(&opened, handle, 0));
  EXPECT_EQ(read_back(opened, 8), std::vector<uint32_t>(8, 11u));
  ASSERT_CU(cu.cuIpcCloseMemHandle(opened));
  exporter->write_line("quit");
  ASSERT_EQ(exporter->wait(), 0);
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE, cu.cuIpcOpenMemHandle_v2(&opened, handle, 0));
}

}  // namespace
}  // namespace fakecuda_test
