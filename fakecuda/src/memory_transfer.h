// The common path of every copy entry point: resolve the stream, validate the device
// side of each address against known allocations, stage pageable host sources (the
// real driver copies them before returning, so the caller may reuse the buffer), and
// submit a MemcpyOp — or record it, when the stream is capturing. Synchronous copies
// are the same operation on the stream followed by a wait.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fakecuda {

// Where an address lives, as the entry point states it.
enum class MemorySide { Host, Device, Unified };

struct TransferEnd {
  uintptr_t address = 0;
  size_t pitch = 0;  // bytes between rows (ignored when height == 1)
  MemorySide side = MemorySide::Unified;
};

struct TransferRequest {
  TransferEnd dst;
  TransferEnd src;
  size_t width = 0;  // bytes per row
  size_t height = 1;
  CUstream stream = nullptr;
  bool synchronous = false;
};

CUresult transfer(const TransferRequest& request);

// 1D convenience wrapper.
CUresult transfer_1d(uintptr_t dst, MemorySide dst_side, uintptr_t src, MemorySide src_side,
                     size_t bytes, CUstream stream, bool synchronous);

// Memsets share the stream/validation path: value is replicated per element.
CUresult memset_device(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t element_size,
                       size_t width, size_t height, CUstream stream, bool synchronous);

}  // namespace fakecuda
