// Copies and sets through the stream machinery (see memory_transfer.h).
#include "memory_transfer.h"

#include <cstring>
#include <memory>
#include <vector>

#include "api_support.h"
#include "operations.h"
#include "stream.h"

namespace fakecuda {
namespace {

size_t extent(size_t pitch, size_t width, size_t height) {
  return (height - 1) * pitch + width;
}

// True if the end is memory the device can reach (an allocation we know about).
bool known_memory(Driver& driver, const TransferEnd& end, size_t width, size_t height) {
  return driver.allocations.covers(end.address, extent(end.pitch, width, height));
}

CUresult validate_end(Driver& driver, const TransferEnd& end, size_t width, size_t height) {
  if (end.address == 0) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && end.pitch < width) return CUDA_ERROR_INVALID_VALUE;
  if (end.side == MemorySide::Device && !known_memory(driver, end, width, height))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

bool pageable_host(Driver& driver, const TransferEnd& end, size_t width, size_t height) {
  return end.side != MemorySide::Device && !known_memory(driver, end, width, height);
}

std::shared_ptr<std::vector<unsigned char>> stage(const TransferEnd& src, size_t width,
                                                  size_t height) {
  auto staging = std::make_shared<std::vector<unsigned char>>(width * height);
  for (size_t row = 0; row < height; ++row) {
    std::memcpy(staging->data() + row * width,
                reinterpret_cast<const void*>(src.address + row * src.pitch), width);
  }
  return staging;
}

CUresult finish(Stream& stream, bool wait) {
  if (!wait) return CUDA_SUCCESS;
  stream.wait_idle();
  return stream.queue().sticky_error();
}

}  // namespace

CUresult transfer(const TransferRequest& request) {
  if (request.width == 0 || request.height == 0) return CUDA_SUCCESS;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(request.stream, stream);
    if (status != CUDA_SUCCESS) return status;
    if ((status = validate_end(driver, request.dst, request.width, request.height)) != CUDA_SUCCESS)
      return status;
    if ((status = validate_end(driver, request.src, request.width, request.height)) != CUDA_SUCCESS)
      return status;
    MemcpyOp op;
    op.dst = request.dst.address;
    op.dst_pitch = request.height > 1 ? request.dst.pitch : request.width;
    op.src = request.src.address;
    op.src_pitch = request.height > 1 ? request.src.pitch : request.width;
    op.width = request.width;
    op.height = request.height;
    if (pageable_host(driver, request.src, request.width, request.height)) {
      op.staging = stage(request.src, request.width, request.height);
    }
    // Into pageable memory the real driver returns only once the data has arrived.
    bool wait =
        request.synchronous || pageable_host(driver, request.dst, request.width, request.height);
    if ((status = submit_operation(*stream, std::move(op))) != CUDA_SUCCESS) return status;
    return finish(*stream, wait);
  });
}

CUresult transfer_1d(uintptr_t dst, MemorySide dst_side, uintptr_t src, MemorySide src_side,
                     size_t bytes, CUstream stream, bool synchronous) {
  TransferRequest request;
  request.dst = TransferEnd{dst, bytes, dst_side};
  request.src = TransferEnd{src, bytes, src_side};
  request.width = bytes;
  request.stream = stream;
  request.synchronous = synchronous;
  return transfer(request);
}

CUresult memset_device(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t element_size,
                       size_t width, size_t height, CUstream stream_handle, bool synchronous) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst == 0 || dst % element_size != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(stream_handle, stream);
    if (status != CUDA_SUCCESS) return status;
    size_t row_bytes = width * element_size;
    if (height > 1 && pitch < row_bytes) return CUDA_ERROR_INVALID_VALUE;
    if (!driver.allocations.covers(dst, extent(pitch, row_bytes, height)))
      return CUDA_ERROR_INVALID_VALUE;
    MemsetOp op;
    op.dst = dst;
    op.pitch = height > 1 ? pitch : row_bytes;
    op.value = value;
    op.element_size = element_size;
    op.width = width;
    op.height = height;
    if ((status = submit_operation(*stream, op)) != CUDA_SUCCESS) return status;
    return finish(*stream, synchronous);
  });
}

}  // namespace fakecuda
