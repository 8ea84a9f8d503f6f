// VMM shareable handles on the simulated GPU (src/shared_physical.h): memory created with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested exports as a real descriptor, which
// travels to another process over a Unix socket (SCM_RIGHTS) and is imported and mapped
// there; the data is one. The memory lives, and stays charged, while any live process holds
// it: the exporter releasing and unmapping first frees nothing under the importer.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "child_process.h"
#include "fake_device_test.h"
#include "fracgpu/descriptor_passing.h"

namespace fakecuda_test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kContext = 64 * kMiB;

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Hands one descriptor to whoever connects to an abstract socket of this process.
class DescriptorOffer {
 public:
  DescriptorOffer() : name_("fakecuda-ipc-test-" + std::to_string(getpid())) {
    listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path + 1, name_.data(), name_.size());
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name_.size());
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(listen(listener_, 4), 0);
  }
  ~DescriptorOffer() { close(listener_); }
  const std::string& name() const { return name_; }
  // Accepts one peer and sends it `fd` with one byte.
  void give(int fd) {
    const int peer = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(peer, 0);
    const char byte = 'f';
    EXPECT_EQ(fracgpu::descriptor_passing::send_with(peer, &byte, 1, fd, 0), 1);
    close(peer);
  }

 private:
  std::string name_;
  int listener_ = -1;
};

class ShareableHandleTest : public FakeDeviceTest {
 protected:
  CUmemAllocationProp prop(bool exportable) const {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    if (exportable) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
  }
  // cuMemCreate + map + access of `size` bytes, filled with `value`.
  CUdeviceptr create_mapped(size_t size, bool exportable, uint32_t value,
                            CUmemGenericAllocationHandle* handle) {
    const CUmemAllocationProp p = prop(exportable);
    CUdeviceptr va = 0;
    EXPECT_EQ(cu.cuMemCreate(handle, size, &p, 0), CUDA_SUCCESS);
    EXPECT_EQ(cu.cuMemAddressReserve(&va, size, 0, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(cu.cuMemMap(va, size, 0, *handle, 0), CUDA_SUCCESS);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    EXPECT_EQ(cu.cuMemSetAccess(va, size, &access, 1), CUDA_SUCCESS);
    EXPECT_EQ(cu.cuMemsetD32_v2(va, value, size / 4), CUDA_SUCCESS);
    return va;
  }
  int export_fd(CUmemGenericAllocationHandle handle) {
    int fd = -1;
    EXPECT_EQ(
        cu.cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        CUDA_SUCCESS);
    return fd;
  }
  // A peer process that imported `fd` and mapped `size` bytes of it: {handle, pointer}.
  std::pair<std::string, std::string> peer_imports(ChildProcess& child, int fd, size_t size) {
    DescriptorOffer offer;
    child.write_line("recvfd " + offer.name());
    offer.give(fd);
    auto got = words(child.read_line());
    EXPECT_EQ(got.size(), 2u);
    child.write_line("import " + got.at(1));
    auto imported = words(child.read_line());
    EXPECT_EQ(imported.at(1), "CUDA_SUCCESS");
    child.write_line("map " + imported.at(2) + " " + std::to_string(size));
    auto mapped = words(child.read_line());
    EXPECT_EQ(mapped.at(1), "CUDA_SUCCESS");
    return {imported.at(2), mapped.at(2)};
  }
  std::unique_ptr<ChildProcess> peer() {
    auto child = std::make_unique<ChildProcess>(std::vector<std::string>{child_program(), "ipc"});
    EXPECT_EQ(child->read_line(), "ready");
    return child;
  }
  void unmap_release(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle handle) {
    ASSERT_CU(cu.cuMemUnmap(va, size));
    ASSERT_CU(cu.cuMemRelease(handle));
    ASSERT_CU(cu.cuMemAddressFree(va, size));
  }
};

TEST_F(ShareableHandleTest, OnlyMemoryCreatedExportableExportsAndOnlyAsADescriptor) {
  CUmemGenericAllocationHandle plain = 0, exportable = 0;
  create_mapped(2 * kMiB, false, 0, &plain);
  create_mapped(2 * kMiB, true, 0, &exportable);
  int fd = -1;
  EXPECT_CU_ERROR(
      CUDA_ERROR_INVALID_VALUE,
      cu.cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CUmemFabricHandle fabric{};
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_SUPPORTED, cu.cuMemExportToShareableHandle(
                                                &fabric, exportable, CU_MEM_HANDLE_TYPE_FABRIC, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuMemExportToShareableHandle(&fd, exportable,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1));
  fd = export_fd(exportable);
  ASSERT_GE(fd, 0);
  EXPECT_GE(fcntl(fd, F_GETFD), 0) << "a real descriptor";
  // Imported back here: another handle of the same memory, not charged again.
  const uint64_t used = device_status().used;
  CUmemGenericAllocationHandle again = 0;
  ASSERT_CU(cu.import_shareable()(&again, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  EXPECT_EQ(device_status().used, used);
  CUmemAllocationProp seen{};
  ASSERT_CU(cu.properties_from_handle()(&seen, again));
  EXPECT_EQ(seen.location.id, 0);
  EXPECT_EQ(seen.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ASSERT_CU(cu.cuMemRelease(again));
  EXPECT_EQ(device_status().used, used) << "the creator's handle still holds it";
  close(fd);
  // Something that is not exported memory.
  const int other = memfd_create("not-cuda", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(other, 4 * kMiB), 0);
  CUmemGenericAllocationHandle bogus = 0;
  EXPECT_CU_ERROR(
      CUDA_ERROR_INVALID_VALUE,
      cu.import_shareable()(&bogus, reinterpret_cast<void*>(static_cast<intptr_t>(other)),
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(other);
}

TEST_F(ShareableHandleTest, AnotherProcessMapsTheSameMemory) {
  constexpr size_t kSize = 4 * kMiB;
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = create_mapped(kSize, true, 0x5150u, &handle);
  const int fd = export_fd(handle);
  auto child = peer();
  auto [remote_handle, remote] = peer_imports(*child, fd, kSize);
  close(fd);
  child->write_line("read " + remote + " " + std::to_string(kSize / 4));
  auto read = words(child->read_line());
  EXPECT_EQ(read.at(1), "CUDA_SUCCESS");
  EXPECT_EQ(read.at(4), std::to_string(uint64_t{0x5150u} * (kSize / 4)));
  child->write_line("fill " + remote + " 16 42");
  EXPECT_EQ(words(child->read_line()).at(1), "CUDA_SUCCESS");
  uint32_t first = 0;
  ASSERT_CU(cu.cuMemcpyDtoH_v2(&first, va, 4));
  EXPECT_EQ(first, 42u);
  EXPECT_EQ(device_status().used, kSize + 2 * kContext) << "the importer is charged nothing";
}

TEST_F(ShareableHandleTest, MemoryTheExporterLetGoLivesWhileTheImporterMapsIt) {
  constexpr size_t kSize = 4 * kMiB;
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = create_mapped(kSize, true, 9, &handle);
  const int fd = export_fd(handle);
  auto child = peer();
  auto [remote_handle, remote] = peer_imports(*child, fd, kSize);
  close(fd);
  unmap_release(va, kSize, handle);
  EXPECT_EQ(device_status().used, kSize + 2 * kContext) << "still held by the importer";
  child->write_line("read " + remote + " 4");
  auto read = words(child->read_line());
  EXPECT_EQ(read.at(1), "CUDA_SUCCESS");
  EXPECT_EQ(read.at(2), "9");
  child->write_line("unmap " + remote + " " + std::to_string(kSize) + " " + remote_handle);
  EXPECT_EQ(words(child->read_line()).at(1), "CUDA_SUCCESS");
  EXPECT_EQ(device_status().used, 2 * kContext) << "the last holder gave it back";
}

TEST_F(ShareableHandleTest, AKilledImporterHoldsNothing) {
  constexpr size_t kSize = 4 * kMiB;
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = create_mapped(kSize, true, 1, &handle);
  const int fd = export_fd(handle);
  auto child = peer();
  peer_imports(*child, fd, kSize);
  close(fd);
  child->kill_hard();
  child->wait();
  unmap_release(va, kSize, handle);
  EXPECT_EQ(device_status().used, kContext);
}

}  // namespace
}  // namespace fakecuda_test
