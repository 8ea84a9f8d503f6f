// The shim's legacy-IPC core (interpose/core/ipc_*.h) over a fake driver port: the handle
// format, the exporter's descriptor server and the opener, between two exporter/opener pairs
// in this process (each pair stands for one process: its own nonce). The descriptor that
// crosses the socket is checked to be the exported memory's own (same inode); refusals,
// stale handles, a gone exporter and a forked child are covered.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/ipc_exporter.h"
#include "core/ipc_handle.h"
#include "core/ipc_opener.h"

namespace fracgpu {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The server counts a descriptor once sendmsg returned, which may be after the opener has it.
template <typename Predicate>
bool soon(Predicate predicate) {
  for (int i = 0; i < 1000 && !predicate(); ++i) usleep(1000);
  return predicate();
}

uint64_t inode_of(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// The driver as the IPC core sees it: physical handles are memfds of this test.
struct FakeIpcDriver {
  std::map<CUmemGenericAllocationHandle, int> physical;  // exportable memory
  CUresult export_result = CUDA_SUCCESS;
  std::vector<uint64_t> imported_inodes;
  CUmemGenericAllocationHandle next_import = 1000;
  CUdeviceptr next_va = 0x7f00'0000'0000;
  CUcontext current = reinterpret_cast<CUcontext>(0x1234);
  int owner_device = 1;  // where imported memory lives
  int maps = 0, unmaps = 0, releases = 0, frees = 0;
  std::vector<int> last_access;  // devices granted by the last cuMemSetAccess

  ~FakeIpcDriver() {
    for (auto& [h, fd] : physical) ::close(fd);
  }
  CUmemGenericAllocationHandle add_physical() {
    const int fd = memfd_create("ipc-test", MFD_CLOEXEC);
    const auto handle = static_cast<CUmemGenericAllocationHandle>(100 + physical.size());
    physical[handle] = fd;
    return handle;
  }
};
FakeIpcDriver* g_driver = nullptr;

CUresult fake_export(void* out, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                     unsigned long long) {
  if (g_driver->export_result != CUDA_SUCCESS) return g_driver->export_result;
  auto it = g_driver->physical.find(handle);
  if (it == g_driver->physical.end() || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  *static_cast<int*>(out) = ::dup(it->second);
  return CUDA_SUCCESS;
}
CUresult fake_import(CUmemGenericAllocationHandle* handle, void* os, CUmemAllocationHandleType) {
  g_driver->imported_inodes.push_back(inode_of(static_cast<int>(reinterpret_cast<intptr_t>(os))));
  *handle = g_driver->next_import++;
  return CUDA_SUCCESS;
}
CUresult fake_props(CUmemAllocationProp* prop, CUmemGenericAllocationHandle) {
  *prop = CUmemAllocationProp{};
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = g_driver->owner_device;
  return CUDA_SUCCESS;
}
CUresult fake_reserve(CUdeviceptr* va, size_t size, size_t, CUdeviceptr, unsigned long long) {
  *va = g_driver->next_va;
  g_driver->next_va += size;
  return CUDA_SUCCESS;
}
CUresult fake_address_free(CUdeviceptr, size_t) {
  ++g_driver->frees;
  return CUDA_SUCCESS;
}
CUresult fake_map(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) {
  ++g_driver->maps;
  return CUDA_SUCCESS;
}
CUresult fake_unmap(CUdeviceptr, size_t) {
  ++g_driver->unmaps;
  return CUDA_SUCCESS;
}
CUresult fake_set_access(CUdeviceptr, size_t, const CUmemAccessDesc* desc, size_t count) {
  g_driver->last_access.clear();
  for (size_t i = 0; i < count; ++i) g_driver->last_access.push_back(desc[i].location.id);
  return CUDA_SUCCESS;
}
CUresult fake_release(CUmemGenericAllocationHandle) {
  ++g_driver->releases;
  return CUDA_SUCCESS;
}
CUresult fake_ctx_current(CUcontext* ctx) {
  *ctx = g_driver->current;
  return CUDA_SUCCESS;
}
CUresult fake_ctx_device(CUdevice* device) {
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult fake_device_count(int* count) {
  *count = 3;
  return CUDA_SUCCESS;
}
CUresult fake_can_access_peer(int* can, CUdevice dev, CUdevice peer) {
  *can = dev != peer && dev != 2 ? 1 : 0;  // device 2 reaches no peer
  return CUDA_SUCCESS;
}

IpcDriverCalls fake_calls() {
  IpcDriverCalls c;
  c.cuMemExportToShareableHandle = &fake_export;
  c.cuMemImportFromShareableHandle = &fake_import;
  c.cuMemGetAllocationPropertiesFromHandle = &fake_props;
  c.cuMemAddressReserve = &fake_reserve;
  c.cuMemAddressFree = &fake_address_free;
  c.cuMemMap = &fake_map;
  c.cuMemUnmap = &fake_unmap;
  c.cuMemSetAccess = &fake_set_access;
  c.cuMemRelease = &fake_release;
  c.cuCtxGetCurrent = &fake_ctx_current;
  c.cuCtxGetDevice = &fake_ctx_device;
  c.cuDeviceGetCount = &fake_device_count;
  c.cuDeviceCanAccessPeer = &fake_can_access_peer;
  return c;
}

// The swap engine as the exporter sees it: what it backs, and who was pinned.
class FakeShareable final : public ShareableMemory {
 public:
  std::optional<CUresult> pin_for_sharing(CUdeviceptr ptr,
                                          ShareableAllocation* out) noexcept override {
    for (auto& [base, a] : allocations) {
      if (ptr < base || ptr >= base + a.size) continue;
      ++pins[base];
      if (pin_result != CUDA_SUCCESS) return pin_result;
      *out = a;
      return CUDA_SUCCESS;
    }
    return std::nullopt;
  }
  std::map<CUdeviceptr, ShareableAllocation> allocations;
  std::map<CUdeviceptr, int> pins;
  CUresult pin_result = CUDA_SUCCESS;
};

class IpcSharing : public ::testing::Test {
 protected:
  void SetUp() override {
    g_driver = &driver_;
    const CUmemGenericAllocationHandle physical = driver_.add_physical();
    memory_.allocations[kBase] = ShareableAllocation{kBase, 64 * kMiB, physical};
  }
  void TearDown() override { g_driver = nullptr; }

  CUipcMemHandle exported(CUdeviceptr ptr = kBase) {
    CUipcMemHandle handle{};
    EXPECT_EQ(exporter_.get_handle(&handle, ptr), std::optional<CUresult>(CUDA_SUCCESS));
    return handle;
  }
  uint64_t exported_inode() const { return inode_of(driver_.physical.begin()->second); }

  static constexpr CUdeviceptr kBase = 0x5000'0000'0000;
  FakeIpcDriver driver_;
  IpcDriverCalls calls_ = fake_calls();
  FakeShareable memory_;
  IpcExporter exporter_{memory_, calls_};
  // Another process: an exporter of its own (its own nonce) and its opener.
  FakeShareable other_memory_;
  IpcExporter other_exporter_{other_memory_, calls_};
  IpcOpener opener_{calls_, &other_exporter_};
};

TEST(IpcHandle, RoundTripsAndRejectsEverythingElse) {
  const IpcHandleFields fields{4242, 0x0123456789abcdefull, 7, 64 * kMiB};
  CUipcMemHandle handle{};
  encode_ipc_handle(fields, &handle);
  ASSERT_EQ(decode_ipc_handle(handle), fields);
  CUipcMemHandle zero{};
  EXPECT_FALSE(decode_ipc_handle(zero));
  for (size_t byte : {0u, 9u, 12u, 20u, 30u, 40u, 50u, 63u}) {
    CUipcMemHandle bad = handle;
    bad.reserved[byte] ^= 0x10;
    EXPECT_FALSE(decode_ipc_handle(bad)) << "flipped byte " << byte;
  }
  EXPECT_EQ(ipc_socket_name(4242, 0xab), "fracgpu-ipc-4242-00000000000000ab");
  EXPECT_NE(random_nonce(), random_nonce());
}

TEST_F(IpcSharing, AnotherProcessMapsTheExportedMemory) {
  const CUipcMemHandle handle = exported(kBase + 3 * kMiB);  // an interior pointer: the whole
  const auto fields = decode_ipc_handle(handle);
  ASSERT_TRUE(fields);
  EXPECT_EQ(fields->pid, getpid());
  EXPECT_EQ(fields->size, 64 * kMiB);
  EXPECT_EQ(memory_.pins[kBase], 1) << "pinned before it is shared";
  const CUipcMemHandle again = exported();
  EXPECT_EQ(std::memcmp(&handle, &again, sizeof handle), 0) << "one handle per allocation";
  EXPECT_EQ(exporter_.exports(), 1u);

  CUdeviceptr va = 0;
  ASSERT_EQ(opener_.open(&va, handle, 0), std::optional<CUresult>(CUDA_SUCCESS));
  ASSERT_EQ(driver_.imported_inodes.size(), 1u);
  EXPECT_EQ(driver_.imported_inodes[0], exported_inode()) << "the exporter's own memory came over";
  EXPECT_EQ(driver_.maps, 1);
  EXPECT_EQ(driver_.last_access, std::vector<int>{0}) << "the current context's device";
  EXPECT_TRUE(soon([&] { return exporter_.served() == 1; }));

  // Opened again: the same address, no second import; closes count down.
  CUdeviceptr same = 0;
  ASSERT_EQ(opener_.open(&same, handle, 0), std::optional<CUresult>(CUDA_SUCCESS));
  EXPECT_EQ(same, va);
  EXPECT_EQ(driver_.imported_inodes.size(), 1u);
  EXPECT_EQ(opener_.close(va), std::optional<CUresult>(CUDA_SUCCESS));
  EXPECT_EQ(driver_.unmaps, 0);
  EXPECT_EQ(opener_.close(va), std::optional<CUresult>(CUDA_SUCCESS));
  EXPECT_EQ(driver_.unmaps, 1);
  EXPECT_EQ(driver_.releases, 1);
  EXPECT_EQ(driver_.frees, 1);
  EXPECT_EQ(opener_.open_mappings(), 0u);
  EXPECT_FALSE(opener_.close(va)) << "no longer ours: the driver's";
}

TEST_F(IpcSharing, LazyPeerAccessGrantsEveryDeviceThatReachesTheMemory) {
  CUdeviceptr va = 0;
  ASSERT_EQ(opener_.open(&va, exported(), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            std::optional<CUresult>(CUDA_SUCCESS));
  // Current device 0, the memory's device 1; device 2 reaches no peer.
  EXPECT_EQ(driver_.last_access, (std::vector<int>{0, 1}));
  CUdeviceptr other = 0;
  EXPECT_EQ(opener_.open(&other, exported(), 4), std::optional<CUresult>(CUDA_ERROR_INVALID_VALUE));
}

TEST_F(IpcSharing, WhatIsNotOursGoesToTheDriver) {
  CUipcMemHandle handle{};
  EXPECT_FALSE(exporter_.get_handle(&handle, 0x1000)) << "memory the shim does not back";
  CUipcMemHandle driver_handle{};
  std::memset(&driver_handle, 0x33, sizeof driver_handle);
  CUdeviceptr va = 0;
  EXPECT_FALSE(opener_.open(&va, driver_handle, 0));
  EXPECT_FALSE(opener_.close(0x1234));
  EXPECT_EQ(exporter_.exports(), 0u);
}

TEST_F(IpcSharing, OpeningOnesOwnHandleOrWithoutAContextIsAnInvalidContext) {
  IpcOpener own(calls_, &exporter_);
  CUdeviceptr va = 0;
  EXPECT_EQ(own.open(&va, exported(), 0), std::optional<CUresult>(CUDA_ERROR_INVALID_CONTEXT));
  driver_.current = nullptr;
  EXPECT_EQ(opener_.open(&va, exported(), 0), std::optional<CUresult>(CUDA_ERROR_INVALID_CONTEXT));
  EXPECT_EQ(opener_.open(nullptr, exported(), 0),
            std::optional<CUresult>(CUDA_ERROR_INVALID_VALUE));
}

TEST_F(IpcSharing, AFreedAllocationsHandleNoLongerOpens) {
  const CUipcMemHandle handle = exported();
  exporter_.shared_allocation_freed(kBase);
  EXPECT_EQ(exporter_.exports(), 0u);
  CUdeviceptr va = 0;
  EXPECT_EQ(opener_.open(&va, handle, 0), std::optional<CUresult>(CUDA_ERROR_INVALID_VALUE));
  EXPECT_TRUE(driver_.imported_inodes.empty());
  // Exported anew, it is a new allocation with a new id.
  const CUipcMemHandle fresh = exported();
  EXPECT_NE(decode_ipc_handle(fresh)->id, decode_ipc_handle(handle)->id);
  EXPECT_EQ(opener_.open(&va, fresh, 0), std::optional<CUresult>(CUDA_SUCCESS));
}

TEST_F(IpcSharing, AGoneExporterOrAForeignNonceIsAStaleHandle) {
  auto short_lived_memory = std::make_unique<FakeShareable>();
  short_lived_memory->allocations = memory_.allocations;
  auto short_lived = std::make_unique<IpcExporter>(*short_lived_memory, calls_);
  CUipcMemHandle handle{};
  ASSERT_EQ(short_lived->get_handle(&handle, kBase), std::optional<CUresult>(CUDA_SUCCESS));
  short_lived.reset();  // its server is gone
  CUdeviceptr va = 0;
  EXPECT_EQ(opener_.open(&va, handle, 0), std::optional<CUresult>(CUDA_ERROR_INVALID_VALUE));
  // A live exporter, asked with another nonce (a reused pid) or another id.
  IpcHandleFields fields = *decode_ipc_handle(exported());
  fields.nonce ^= 1;
  int fd = -1;
  EXPECT_EQ(fetch_exported_descriptor(fields, &fd), CUDA_ERROR_INVALID_VALUE);
  fields = *decode_ipc_handle(exported());
  fields.id += 100;
  EXPECT_EQ(fetch_exported_descriptor(fields, &fd), CUDA_ERROR_INVALID_VALUE);
  fields = *decode_ipc_handle(exported());
  fields.size += 4096;
  EXPECT_EQ(fetch_exported_descriptor(fields, &fd), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fd, -1);
}

TEST_F(IpcSharing, APeerOfAnotherUidIsRefused) {
  // The rule as it would read for an exporter run by uid 12345 that does not trust root.
  IpcExporter strict(memory_, calls_, IpcAccessRule{12345, false});
  CUipcMemHandle handle{};
  ASSERT_EQ(strict.get_handle(&handle, kBase), std::optional<CUresult>(CUDA_SUCCESS));
  CUdeviceptr va = 0;
  EXPECT_EQ(opener_.open(&va, handle, 0), std::optional<CUresult>(CUDA_ERROR_INVALID_VALUE));
  EXPECT_EQ(strict.refused(), 1u);
  EXPECT_EQ(strict.served(), 0u);
  EXPECT_TRUE(driver_.imported_inodes.empty());
}

TEST_F(IpcSharing, AProcessOfAnotherUidIsRefusedByTheDefaultRule) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a peer as another uid";
  const IpcHandleFields fields = *decode_ipc_handle(exported());
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    int fd = -1;
    const CUresult rc = fetch_exported_descriptor(fields, &fd);
    _exit(rc == CUDA_ERROR_INVALID_VALUE && fd < 0 ? 0 : 101);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(exporter_.refused(), 1u);
}

TEST_F(IpcSharing, WhenTheDriverCannotExportTheCallFailsCleanly) {
  driver_.export_result = CUDA_ERROR_NOT_SUPPORTED;
  CUipcMemHandle handle{};
  EXPECT_EQ(exporter_.get_handle(&handle, kBase),
            std::optional<CUresult>(CUDA_ERROR_INVALID_VALUE));
  EXPECT_EQ(exporter_.exports(), 0u);
  memory_.pin_result = CUDA_ERROR_OUT_OF_MEMORY;  // on host and it cannot come back
  EXPECT_EQ(exporter_.get_handle(&handle, kBase),
            std::optional<CUresult>(CUDA_ERROR_OUT_OF_MEMORY));
  memory_.pin_result = CUDA_SUCCESS;
  EXPECT_EQ(exporter_.get_handle(nullptr, kBase),
            std::optional<CUresult>(CUDA_ERROR_INVALID_VALUE));
}

TEST_F(IpcSharing, AForkedChildHasItsOwnIdentityAndOpensItsParentsHandles) {
  const CUipcMemHandle handle = exported();
  const pid_t child = fork();
  if (child == 0) {
    // What the shim's fork handler does in the child.
    exporter_.after_fork_in_child();
    opener_.after_fork_in_child();
    const auto fields = decode_ipc_handle(handle);
    if (exporter_.owns(*fields) || exporter_.exports() != 0) _exit(10);
    IpcOpener child_opener(calls_, &exporter_);
    CUdeviceptr va = 0;
    if (child_opener.open(&va, handle, 0) != std::optional<CUresult>(CUDA_SUCCESS)) _exit(11);
    _exit(driver_.imported_inodes.size() == 1 && driver_.imported_inodes[0] == exported_inode()
              ? 0
              : 12);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(soon([&] { return exporter_.served() == 1; })) << "the parent's server answered";
}

}  // namespace
}  // namespace fracgpu
