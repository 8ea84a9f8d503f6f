// Memset entry points: cuMemsetD8/D16/D32 and the 2D forms, synchronous (v1, v2,
// _v2_ptds) and asynchronous (plain and _ptsz). Element counts and pitches follow
// the driver API: widths in elements, pitches in bytes.
#include "api_support.h"
#include "capture.h"
#include "memory_transfer.h"
#include "stream.h"

using namespace fakecuda;

namespace {

// The capture rules (capture.h): a synchronous set is potentially unsafe, and any set on
// the legacy stream conflicts with a capture of a blocking stream.
CUresult capture_check(CUstream stream, bool sync) {
  return sync ? check_synchronous_transfer(stream) : check_stream_use(stream);
}

CUresult set_1d(CUdeviceptr dst, uint32_t value, uint32_t element_size, size_t count,
                CUstream stream, bool sync) {
  if (CUresult status = capture_check(stream, sync); status != CUDA_SUCCESS) return status;
  return memset_device(dst, count * element_size, value, element_size, count, 1, stream, sync);
}

CUresult set_2d(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t element_size, size_t width,
                size_t height, CUstream stream, bool sync) {
  if (CUresult status = capture_check(stream, sync); status != CUDA_SUCCESS) return status;
  return memset_device(dst, pitch, value, element_size, width, height, stream, sync);
}

const CUstream kLegacy = nullptr;
const CUstream kPerThread = CU_STREAM_PER_THREAD;

}  // namespace

// 1D, synchronous.
extern "C" CUresult fakecuda_impl_cuMemsetD8_v2(CUdeviceptr d, unsigned char uc, size_t N) {
  return set_1d(d, uc, 1, N, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char uc, size_t N) {
  return set_1d(d, uc, 1, N, kPerThread, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD8(CUdeviceptr_v1 d, unsigned char uc, unsigned int N) {
  return set_1d(d, uc, 1, N, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD16_v2(CUdeviceptr d, unsigned short us, size_t N) {
  return set_1d(d, us, 2, N, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short us, size_t N) {
  return set_1d(d, us, 2, N, kPerThread, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD16(CUdeviceptr_v1 d, unsigned short us, unsigned int N) {
  return set_1d(d, us, 2, N, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD32_v2(CUdeviceptr d, unsigned int ui, size_t N) {
  return set_1d(d, ui, 4, N, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int ui, size_t N) {
  return set_1d(d, ui, 4, N, kPerThread, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD32(CUdeviceptr_v1 d, unsigned int ui, unsigned int N) {
  return set_1d(d, ui, 4, N, kLegacy, true);
}

// 1D, asynchronous.
extern "C" CUresult fakecuda_impl_cuMemsetD8Async(CUdeviceptr d, unsigned char uc, size_t N,
                                                  CUstream s) {
  return set_1d(d, uc, 1, N, s, false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char uc, size_t N,
                                                       CUstream s) {
  return set_1d(d, uc, 1, N, per_thread_handle(s), false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD16Async(CUdeviceptr d, unsigned short us, size_t N,
                                                   CUstream s) {
  return set_1d(d, us, 2, N, s, false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short us, size_t N,
                                                        CUstream s) {
  return set_1d(d, us, 2, N, per_thread_handle(s), false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD32Async(CUdeviceptr d, unsigned int ui, size_t N,
                                                   CUstream s) {
  return set_1d(d, ui, 4, N, s, false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int ui, size_t N,
                                                        CUstream s) {
  return set_1d(d, ui, 4, N, per_thread_handle(s), false);
}

// 2D, synchronous.
extern "C" CUresult fakecuda_impl_cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char uc,
                                                  size_t w, size_t h) {
  return set_2d(d, p, uc, 1, w, h, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char uc,
                                                       size_t w, size_t h) {
  return set_2d(d, p, uc, 1, w, h, kPerThread, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D8(CUdeviceptr_v1 d, unsigned int p, unsigned char uc,
                                               unsigned int w, unsigned int h) {
  return set_2d(d, p, uc, 1, w, h, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D16_v2(CUdeviceptr d, size_t p, unsigned short us,
                                                   size_t w, size_t h) {
  return set_2d(d, p, us, 2, w, h, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t p, unsigned short us,
                                                        size_t w, size_t h) {
  return set_2d(d, p, us, 2, w, h, kPerThread, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D16(CUdeviceptr_v1 d, unsigned int p, unsigned short us,
                                                unsigned int w, unsigned int h) {
  return set_2d(d, p, us, 2, w, h, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D32_v2(CUdeviceptr d, size_t p, unsigned int ui,
                                                   size_t w, size_t h) {
  return set_2d(d, p, ui, 4, w, h, kLegacy, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t p, unsigned int ui,
                                                        size_t w, size_t h) {
  return set_2d(d, p, ui, 4, w, h, kPerThread, true);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D32(CUdeviceptr_v1 d, unsigned int p, unsigned int ui,
                                                unsigned int w, unsigned int h) {
  return set_2d(d, p, ui, 4, w, h, kLegacy, true);
}

// 2D, asynchronous.
extern "C" CUresult fakecuda_impl_cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char uc,
                                                    size_t w, size_t h, CUstream s) {
  return set_2d(d, p, uc, 1, w, h, s, false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t p, unsigned char uc,
                                                         size_t w, size_t h, CUstream s) {
  return set_2d(d, p, uc, 1, w, h, per_thread_handle(s), false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short us,
                                                     size_t w, size_t h, CUstream s) {
  return set_2d(d, p, us, 2, w, h, s, false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t p,
                                                          unsigned short us, size_t w, size_t h,
                                                          CUstream s) {
  return set_2d(d, p, us, 2, w, h, per_thread_handle(s), false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int ui,
                                                     size_t w, size_t h, CUstream s) {
  return set_2d(d, p, ui, 4, w, h, s, false);
}
extern "C" CUresult fakecuda_impl_cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t p, unsigned int ui,
                                                          size_t w, size_t h, CUstream s) {
  return set_2d(d, p, ui, 4, w, h, per_thread_handle(s), false);
}
