// The allocation routes of fracgpu-alloc-client's `pattern` mode (alloc_client.cpp): one
// chunk allocated, written, read back and freed the way an application using that route
// would, so that a test can see which routes move to host memory with their data and which
// stay on the GPU. A failed call prints {"error":...} and exits 1, like the client.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

[[noreturn]] inline void pattern_die(const char* what, CUresult rc) {
  const char* name = "?";
  cuGetErrorName(rc, &name);
  std::printf("{\"error\":\"%s: %s\"}\n", what, name);
  std::exit(1);
}

#define PATTERN_CHECK(call)                           \
  do {                                                \
    CUresult rc_ = (call);                            \
    if (rc_ != CUDA_SUCCESS) pattern_die(#call, rc_); \
  } while (0)

// One chunk of `pattern`, allocated by one route (see the header).
struct Chunk {
  CUdeviceptr ptr = 0;
  CUarray array = nullptr;
  void* host = nullptr;  // hostreg
  CUmemGenericAllocationHandle handle = 0;
};

class PatternRoute {
 public:
  PatternRoute(const std::string& route, CUdevice dev, uint64_t chunk)
      : route_(route), dev_(dev), chunk_(chunk) {
    PATTERN_CHECK(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    if (route_ == "pool") {
      CUmemPoolProps props{};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev_};
      PATTERN_CHECK(cuMemPoolCreate(&pool_, &props));
    }
    if (route_ == "vmm") {
      prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop_.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev_};
      size_t granularity = 0;
      PATTERN_CHECK(
          cuMemGetAllocationGranularity(&granularity, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
      chunk_ = (chunk_ + granularity - 1) / granularity * granularity;
    }
  }
  bool known() const {
    for (const char* r : {"alloc", "pitch", "managed", "async", "pool", "vmm", "array", "hostreg"})
      if (route_ == r) return true;
    return false;
  }
  Chunk allocate() {
    Chunk c;
    size_t pitch = 0;
    if (route_ == "alloc") PATTERN_CHECK(cuMemAlloc(&c.ptr, chunk_));
    if (route_ == "pitch") PATTERN_CHECK(cuMemAllocPitch(&c.ptr, &pitch, 4096, chunk_ / 4096, 4));
    if (route_ == "managed") PATTERN_CHECK(cuMemAllocManaged(&c.ptr, chunk_, CU_MEM_ATTACH_GLOBAL));
    if (route_ == "async") PATTERN_CHECK(cuMemAllocAsync(&c.ptr, chunk_, stream_));
    if (route_ == "pool") PATTERN_CHECK(cuMemAllocFromPoolAsync(&c.ptr, chunk_, pool_, stream_));
    if (route_ == "async" || route_ == "pool") PATTERN_CHECK(cuStreamSynchronize(stream_));
    if (route_ == "vmm") {
      PATTERN_CHECK(cuMemCreate(&c.handle, chunk_, &prop_, 0));
      PATTERN_CHECK(cuMemAddressReserve(&c.ptr, chunk_, 0, 0, 0));
      PATTERN_CHECK(cuMemMap(c.ptr, chunk_, 0, c.handle, 0));
      CUmemAccessDesc access{};
      access.location = prop_.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      PATTERN_CHECK(cuMemSetAccess(c.ptr, chunk_, &access, 1));
    }
    if (route_ == "array") {
      CUDA_ARRAY3D_DESCRIPTOR desc{};
      desc.Width = 8192;
      desc.Height = std::max<uint64_t>(chunk_ / 8192 / 4, 1);
      desc.Format = CU_AD_FORMAT_FLOAT;
      desc.NumChannels = 1;
      PATTERN_CHECK(cuArray3DCreate(&c.array, &desc));
    }
    if (route_ == "hostreg") {
      c.host = std::aligned_alloc(4096, chunk_);
      if (c.host == nullptr) pattern_die("aligned_alloc", CUDA_ERROR_OUT_OF_MEMORY);
      PATTERN_CHECK(cuMemHostRegister(c.host, chunk_, 0));
    }
    return c;
  }
  // Writes the words (from `words`), or reads them back into `words`.
  void write(const Chunk& c, const uint32_t* words) {
    if (c.host != nullptr) std::memcpy(c.host, words, chunk_);
    if (c.ptr != 0) PATTERN_CHECK(cuMemcpyHtoD(c.ptr, words, chunk_));
  }
  void read(const Chunk& c, uint32_t* words) {
    if (c.host != nullptr) std::memcpy(words, c.host, chunk_);
    if (c.ptr != 0) PATTERN_CHECK(cuMemcpyDtoH(words, c.ptr, chunk_));
  }
  bool has_data(const Chunk& c) const { return c.array == nullptr; }
  bool still_there(const Chunk& c) {
    CUDA_ARRAY3D_DESCRIPTOR desc{};
    return c.array == nullptr || cuArray3DGetDescriptor(&desc, c.array) == CUDA_SUCCESS;
  }
  void free(const Chunk& c) {
    if (route_ == "vmm") {
      PATTERN_CHECK(cuMemUnmap(c.ptr, chunk_));
      PATTERN_CHECK(cuMemRelease(c.handle));
      PATTERN_CHECK(cuMemAddressFree(c.ptr, chunk_));
    } else if (route_ == "async" || route_ == "pool") {
      PATTERN_CHECK(cuMemFreeAsync(c.ptr, stream_));
      PATTERN_CHECK(cuStreamSynchronize(stream_));
    } else if (c.ptr != 0) {
      PATTERN_CHECK(cuMemFree(c.ptr));
    }
    if (c.array != nullptr) PATTERN_CHECK(cuArrayDestroy(c.array));
    if (c.host != nullptr) {
      PATTERN_CHECK(cuMemHostUnregister(c.host));
      std::free(c.host);
    }
  }
  uint64_t chunk() const { return chunk_; }

 private:
  std::string route_;
  CUdevice dev_;
  uint64_t chunk_;
  CUstream stream_ = nullptr;
  CUmemoryPool pool_ = nullptr;
  CUmemAllocationProp prop_{};
};
