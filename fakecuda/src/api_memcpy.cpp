// Copy entry points: cuMemcpy*, their Async forms, the _ptds/_ptsz per-thread-stream
// variants (all streams of a context share one queue, so they behave identically),
// the legacy 32-bit v1 ABIs, peer copies and 2D copies between host and device memory.
#include "api_support.h"
#include "capture.h"
#include "memory_transfer.h"
#include "stream.h"

using namespace fakecuda;

namespace {

constexpr MemorySide kHost = MemorySide::Host;
constexpr MemorySide kDevice = MemorySide::Device;
constexpr MemorySide kUnified = MemorySide::Unified;

uintptr_t host(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// The capture rules (capture.h): a synchronous copy is potentially unsafe, and any copy
// on the legacy stream conflicts with a capture of a blocking stream.
CUresult capture_check(CUstream stream, bool sync) {
  return sync ? check_synchronous_transfer(stream) : check_stream_use(stream);
}

CUresult htod(CUdeviceptr dst, const void* src, size_t n, CUstream stream, bool sync) {
  if (CUresult status = capture_check(stream, sync); status != CUDA_SUCCESS) return status;
  return transfer_1d(dst, kDevice, host(src), kHost, n, stream, sync);
}
CUresult dtoh(void* dst, CUdeviceptr src, size_t n, CUstream stream, bool sync) {
  if (CUresult status = capture_check(stream, sync); status != CUDA_SUCCESS) return status;
  return transfer_1d(host(dst), kHost, src, kDevice, n, stream, sync);
}
CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, bool sync) {
  if (CUresult status = capture_check(stream, sync); status != CUDA_SUCCESS) return status;
  return transfer_1d(dst, kDevice, src, kDevice, n, stream, sync);
}
CUresult unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, bool sync) {
  if (CUresult status = capture_check(stream, sync); status != CUDA_SUCCESS) return status;
  return transfer_1d(dst, kUnified, src, kUnified, n, stream, sync);
}

CUresult peer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
              CUstream stream, bool sync) {
  return with_driver([&](Driver& driver) {
    if (!driver.handles.get<Context>(dst_ctx) || !driver.handles.get<Context>(src_ctx)) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    return dtod(dst, src, n, stream, sync);
  });
}

MemorySide side_of(CUmemorytype type) {
  if (type == CU_MEMORYTYPE_HOST) return kHost;
  if (type == CU_MEMORYTYPE_DEVICE) return kDevice;
  return kUnified;
}

// Resolves one end of a CUDA_MEMCPY2D; arrays are opaque here and cannot be copied.
bool end_2d(CUmemorytype type, const void* host_ptr, CUdeviceptr device_ptr, size_t x, size_t y,
            size_t pitch, TransferEnd& end) {
  if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
    return false;
  uintptr_t base = type == CU_MEMORYTYPE_HOST ? host(host_ptr) : device_ptr;
  if (base == 0) return false;
  end = TransferEnd{base + y * pitch + x, pitch, side_of(type)};
  return true;
}

CUresult copy_2d(const CUDA_MEMCPY2D* copy, CUstream stream, bool sync) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult status = capture_check(stream, sync); status != CUDA_SUCCESS) return status;
  TransferRequest request;
  if (!end_2d(copy->srcMemoryType, copy->srcHost, copy->srcDevice, copy->srcXInBytes, copy->srcY,
              copy->srcPitch, request.src) ||
      !end_2d(copy->dstMemoryType, copy->dstHost, copy->dstDevice, copy->dstXInBytes, copy->dstY,
              copy->dstPitch, request.dst)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  request.width = copy->WidthInBytes;
  request.height = copy->Height;
  request.stream = stream;
  request.synchronous = sync;
  return transfer(request);
}

}  // namespace

// Unified-address copies.
extern "C" CUresult fakecuda_impl_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return unified(dst, src, ByteCount, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src,
                                                size_t ByteCount) {
  return unified(dst, src, ByteCount, CU_STREAM_PER_THREAD, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                                CUstream hStream) {
  return unified(dst, src, ByteCount, hStream, false);
}
extern "C" CUresult fakecuda_impl_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src,
                                                     size_t ByteCount, CUstream hStream) {
  return unified(dst, src, ByteCount, per_thread_handle(hStream), false);
}

// Host to device.
extern "C" CUresult fakecuda_impl_cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost,
                                                  size_t ByteCount) {
  return htod(dstDevice, srcHost, ByteCount, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost,
                                                       size_t ByteCount) {
  return htod(dstDevice, srcHost, ByteCount, CU_STREAM_PER_THREAD, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void* srcHost,
                                               unsigned int ByteCount) {
  return htod(dstDevice, srcHost, ByteCount, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost,
                                                       size_t ByteCount, CUstream hStream) {
  return htod(dstDevice, srcHost, ByteCount, hStream, false);
}
extern "C" CUresult fakecuda_impl_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice,
                                                            const void* srcHost, size_t ByteCount,
                                                            CUstream hStream) {
  return htod(dstDevice, srcHost, ByteCount, per_thread_handle(hStream), false);
}
extern "C" CUresult fakecuda_impl_cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void* srcHost,
                                                    unsigned int ByteCount, CUstream hStream) {
  return htod(dstDevice, srcHost, ByteCount, hStream, false);
}

// Device to host.
extern "C" CUresult fakecuda_impl_cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice,
                                                  size_t ByteCount) {
  return dtoh(dstHost, srcDevice, ByteCount, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice,
                                                       size_t ByteCount) {
  return dtoh(dstHost, srcDevice, ByteCount, CU_STREAM_PER_THREAD, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoH(void* dstHost, CUdeviceptr_v1 srcDevice,
                                               unsigned int ByteCount) {
  return dtoh(dstHost, srcDevice, ByteCount, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice,
                                                       size_t ByteCount, CUstream hStream) {
  return dtoh(dstHost, srcDevice, ByteCount, hStream, false);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice,
                                                            size_t ByteCount, CUstream hStream) {
  return dtoh(dstHost, srcDevice, ByteCount, per_thread_handle(hStream), false);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoHAsync(void* dstHost, CUdeviceptr_v1 srcDevice,
                                                    unsigned int ByteCount, CUstream hStream) {
  return dtoh(dstHost, srcDevice, ByteCount, hStream, false);
}

// Device to device.
extern "C" CUresult fakecuda_impl_cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                  size_t ByteCount) {
  return dtod(dstDevice, srcDevice, ByteCount, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                       size_t ByteCount) {
  return dtod(dstDevice, srcDevice, ByteCount, CU_STREAM_PER_THREAD, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                               unsigned int ByteCount) {
  return dtod(dstDevice, srcDevice, ByteCount, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                       size_t ByteCount, CUstream hStream) {
  return dtod(dstDevice, srcDevice, ByteCount, hStream, false);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice,
                                                            CUdeviceptr srcDevice, size_t ByteCount,
                                                            CUstream hStream) {
  return dtod(dstDevice, srcDevice, ByteCount, per_thread_handle(hStream), false);
}
extern "C" CUresult fakecuda_impl_cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice,
                                                    CUdeviceptr_v1 srcDevice,
                                                    unsigned int ByteCount, CUstream hStream) {
  return dtod(dstDevice, srcDevice, ByteCount, hStream, false);
}

// Peer copies (all simulated devices share the host's memory, so these are plain copies).
extern "C" CUresult fakecuda_impl_cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext,
                                               CUdeviceptr srcDevice, CUcontext srcContext,
                                               size_t ByteCount) {
  return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
                                                    CUdeviceptr srcDevice, CUcontext srcContext,
                                                    size_t ByteCount) {
  return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, CU_STREAM_PER_THREAD, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                                    CUdeviceptr srcDevice, CUcontext srcContext,
                                                    size_t ByteCount, CUstream hStream) {
  return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, false);
}
extern "C" CUresult fakecuda_impl_cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice,
                                                         CUcontext dstContext,
                                                         CUdeviceptr srcDevice,
                                                         CUcontext srcContext, size_t ByteCount,
                                                         CUstream hStream) {
  return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, per_thread_handle(hStream),
              false);
}

// 2D copies.
extern "C" CUresult fakecuda_impl_cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) {
  return copy_2d(pCopy, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  return copy_2d(pCopy, CU_STREAM_PER_THREAD, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* pCopy) {
  return copy_2d(pCopy, nullptr, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  return copy_2d(pCopy, CU_STREAM_PER_THREAD, true);
}
extern "C" CUresult fakecuda_impl_cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  return copy_2d(pCopy, hStream, false);
}
extern "C" CUresult fakecuda_impl_cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* pCopy,
                                                          CUstream hStream) {
  return copy_2d(pCopy, per_thread_handle(hStream), false);
}
