// fracgpu-expandable-client: device memory the way PyTorch's expandable segments hold it
// (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), for the overcommit tests of the
// application's own VMM memory (tests/integration/overcommit_app_vmm_test.cpp). Prints one
// JSON line per step.
//
//   --handles K --handle-bytes B --go FILE [--done FILE2] [--export 1] [--drop-first N]
//   [--remap M] [--device N]
//     one cuMemAddressReserve of K*B, then K handles of B bytes (cuMemCreate asking for a
//     POSIX descriptor, as PyTorch does) mapped at increasing offsets, one cuMemSetAccess
//     over the whole range, each handle filled with its own pattern; with --export, handle 0
//     is exported (cuMemExportToShareableHandle: another process could map it). Prints
//     {"ready":K}, waits for FILE (memory may move to host meanwhile), reads everything back
//     at the same addresses — with --drop-first, handles 0..N-1 are unmapped and released
//     first, before any call that touches the GPU (on host, they come back never) —
//     ({"intact":...}: data, the handles' properties, a retained
//     handle's value), then unmaps and releases every handle (unmap first, as PyTorch
//     does), maps M new ones (default K) at the same offsets, fills and checks them
//     ({"remapped":...}),
//     waits for FILE2 and frees everything.
#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client_check.h"

namespace {

struct Args {
  uint64_t handles = 8;
  uint64_t handle_bytes = 2ull << 20;
  std::string go_file, done_file;
  bool export_first = false;
  uint64_t drop_first = 0;
  uint64_t remap = 0;  // 0: all
  int device = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--handles") a.handles = std::strtoull(value.c_str(), nullptr, 10);
    if (key == "--handle-bytes") a.handle_bytes = std::strtoull(value.c_str(), nullptr, 10);
    if (key == "--go") a.go_file = value;
    if (key == "--done") a.done_file = value;
    if (key == "--export") a.export_first = value == "1";
    if (key == "--device") a.device = std::atoi(value.c_str());
    if (key == "--remap") a.remap = std::strtoull(value.c_str(), nullptr, 10);
    if (key == "--drop-first") a.drop_first = std::strtoull(value.c_str(), nullptr, 10);
  }
  return a;
}

void wait_for_file(const std::string& path) {
  while (!path.empty() && access(path.c_str(), F_OK) != 0) usleep(2000);
}

uint32_t word(uint64_t round, uint64_t handle, uint64_t w) {
  return static_cast<uint32_t>((round * 0x9e3779b97f4a7c15ull) ^ (handle * 0x85ebca6bu) ^
                               (w * 2654435761u));
}

class Segment {
 public:
  Segment(CUdevice dev, const Args& a) : a_(a), host_(a.handle_bytes / 4) {
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
    prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CHECK(cuMemAddressReserve(&base_, a.handles * a.handle_bytes, 0, 0, 0));
    handles_.resize(a.handles);
  }
  // Creates and maps every handle, grants access over the whole range, fills them.
  void map_all(uint64_t round, uint64_t count) {
    mapped_ = count;
    for (uint64_t i = 0; i < mapped_; ++i) {
      CHECK(cuMemCreate(&handles_[i], a_.handle_bytes, &prop_, 0));
      CHECK(cuMemMap(at(i), a_.handle_bytes, 0, handles_[i], 0));
    }
    CUmemAccessDesc access{};
    access.location = prop_.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuMemSetAccess(base_, mapped_ * a_.handle_bytes, &access, 1));
    for (uint64_t i = 0; i < mapped_; ++i) {
      for (uint64_t w = 0; w < host_.size(); ++w) host_[w] = word(round, i, w);
      CHECK(cuMemcpyHtoD(at(i), host_.data(), a_.handle_bytes));
    }
  }
  bool intact(uint64_t round) {
    bool ok = true;
    for (uint64_t i = dropped_; i < mapped_; ++i) {
      CHECK(cuMemcpyDtoH(host_.data(), at(i), a_.handle_bytes));
      for (uint64_t w = 0; w < host_.size() && ok; ++w) ok = host_[w] == word(round, i, w);
    }
    return ok;
  }
  // What a handle still answers after its memory may have moved.
  bool handles_answer() {
    for (uint64_t i = dropped_; i < mapped_; ++i) {
      CUmemAllocationProp prop{};
      CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, handles_[i]));
      if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
          prop.location.id != prop_.location.id)
        return false;
    }
    CUmemGenericAllocationHandle retained = 0;
    CHECK(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(at(mapped_ - 1))));
    const bool same = retained == handles_[mapped_ - 1];
    CHECK(cuMemRelease(retained));
    return same;
  }
  int export_first() {
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, handles_[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                       0));
    return fd;
  }
  void unmap_all() {
    for (uint64_t i = dropped_; i < mapped_; ++i) unmap(i);
    dropped_ = 0;
  }
  void drop_first(uint64_t n) {
    for (; dropped_ < n && dropped_ + 1 < mapped_; ++dropped_) unmap(dropped_);
  }
  void free_range() { CHECK(cuMemAddressFree(base_, a_.handles * a_.handle_bytes)); }

 private:
  CUdeviceptr at(uint64_t i) const { return base_ + i * a_.handle_bytes; }
  void unmap(uint64_t i) {
    CHECK(cuMemUnmap(at(i), a_.handle_bytes));
    CHECK(cuMemRelease(handles_[i]));
  }
  uint64_t dropped_ = 0;
  uint64_t mapped_ = 0;  // handles 0..mapped_-1 were mapped
  const Args& a_;
  CUmemAllocationProp prop_{};
  CUdeviceptr base_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<uint32_t> host_;
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, a.device));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  Segment segment(dev, a);
  segment.map_all(1, a.handles);
  int fd = a.export_first ? segment.export_first() : -1;
  std::printf("{\"ready\":%llu,\"exported_fd\":%d}\n", static_cast<unsigned long long>(a.handles),
              fd);
  std::fflush(stdout);
  wait_for_file(a.go_file);
  segment.drop_first(a.drop_first);
  const bool intact = segment.intact(1);
  const bool answer = segment.handles_answer();
  std::printf("{\"intact\":%s,\"handles_answer\":%s}\n", intact ? "true" : "false",
              answer ? "true" : "false");
  std::fflush(stdout);
  segment.unmap_all();
  segment.map_all(2, a.remap != 0 ? std::min(a.remap, a.handles) : a.handles);
  const bool remapped = segment.intact(2);
  std::printf("{\"remapped\":%s}\n", remapped ? "true" : "false");
  std::fflush(stdout);
  wait_for_file(a.done_file);
  segment.unmap_all();
  segment.free_range();
  if (fd >= 0) close(fd);
  return intact && answer && remapped ? 0 : 3;
}
