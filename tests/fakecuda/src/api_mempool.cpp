// Stream-ordered allocation and memory pools: cuMemAllocAsync, cuMemAllocFromPoolAsync,
// cuMemFreeAsync (+ _ptsz), cuMemPool*, cuDevice{Get,Set,GetDefault}MemPool.
// Allocation happens at the call (so an over-capacity request fails at once with
// CUDA_ERROR_OUT_OF_MEMORY); the free is a work item, so memory stays valid until the
// stream reaches it, which is what stream-ordered semantics promise.
#include "api_support.h"
#include "capture.h"
#include "device_memory.h"
#include "mem_pool.h"
#include "stream.h"

using namespace fakecuda;

namespace {

CUresult stream_context(Driver& driver, Stream& stream, std::shared_ptr<Context>& context) {
  context = driver.handles.get<Context>(stream.context());
  return context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool_handle, CUstream hStream) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    if (capture_status(*stream) != CU_STREAM_CAPTURE_STATUS_NONE) {
      invalidate_capture(*stream);  // graph memory nodes are not simulated
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    std::shared_ptr<Context> context;
    if ((status = stream_context(driver, *stream, context)) != CUDA_SUCCESS) return status;
    if (pool_handle == nullptr) {
      std::lock_guard lock(driver.pools_mutex);
      pool_handle = driver.current_pools[stream->device()];
    }
    std::shared_ptr<MemPool> pool = driver.handles.get<MemPool>(pool_handle);
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    DeviceAllocationRequest request;
    request.bytes = bytes;
    request.pool = pool_handle;
    request.device = static_cast<int>(pool->device());
    return allocate_device_memory(driver, *context, request, *dptr);
  });
}

CUresult free_async(CUdeviceptr dptr, CUstream hStream) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    std::optional<Allocation> found = driver.allocations.find(dptr);
    if (!found || found->base != dptr || found->is_host_kind() ||
        found->kind == MemoryKind::VmmMapping) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (capture_status(*stream) != CU_STREAM_CAPTURE_STATUS_NONE) {
      invalidate_capture(*stream);
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    Driver* owner = &driver;
    stream->submit([owner, dptr](WorkScope&) {
      if (std::optional<Allocation> taken = owner->allocations.take(dptr))
        release_allocation(*owner, *taken);
    });
    return CUDA_SUCCESS;
  });
}

template <typename Body>
CUresult with_pool(CUmemoryPool handle, Body&& body) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<MemPool> pool = driver.handles.get<MemPool>(handle);
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    return body(driver, *pool);
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                                  CUstream hStream) {
  return alloc_async(dptr, bytesize, nullptr, hStream);
}
extern "C" CUresult fakecuda_impl_cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                       CUstream hStream) {
  return alloc_async(dptr, bytesize, nullptr, hStream);
}
extern "C" CUresult fakecuda_impl_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                          CUmemoryPool pool, CUstream hStream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytesize, pool, hStream);
}
extern "C" CUresult fakecuda_impl_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                               CUmemoryPool pool,
                                                               CUstream hStream) {
  return fakecuda_impl_cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}
extern "C" CUresult fakecuda_impl_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return free_async(dptr, hStream);
}
extern "C" CUresult fakecuda_impl_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return free_async(dptr, hStream);
}

extern "C" CUresult fakecuda_impl_cuMemPoolCreate(CUmemoryPool* pool,
                                                  const CUmemPoolProps* poolProps) {
  if (pool == nullptr || poolProps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !driver.valid_device(poolProps->location.id)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto created =
        std::make_shared<MemPool>(driver.physical(poolProps->location.id), *poolProps, false);
    driver.handles.add(created);
    *pool = created->handle();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuMemPoolDestroy(CUmemoryPool pool) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<MemPool> found = driver.handles.get<MemPool>(pool);
    if (!found || found->is_default()) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(driver.pools_mutex);
    // A destroyed current pool reverts the device to its default pool.
    if (driver.current_pools[found->device()] == pool) {
      driver.current_pools[found->device()] = driver.default_pools[found->device()];
    }
    driver.handles.take<MemPool>(pool);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuMemPoolTrimTo(CUmemoryPool pool, size_t) {
  // Nothing is ever cached, so there is nothing to trim.
  return with_pool(pool, [](Driver&, MemPool&) { return CUDA_SUCCESS; });
}

extern "C" CUresult fakecuda_impl_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                        void* value) {
  return with_pool(pool, [&](Driver&, MemPool& found) { return found.set_attribute(attr, value); });
}

extern "C" CUresult fakecuda_impl_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                        void* value) {
  return with_pool(pool, [&](Driver&, MemPool& found) { return found.get_attribute(attr, value); });
}

extern "C" CUresult fakecuda_impl_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map,
                                                     size_t count) {
  if (count != 0 && map == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_pool(pool, [](Driver&, MemPool&) { return CUDA_SUCCESS; });
}

extern "C" CUresult fakecuda_impl_cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool,
                                                     CUmemLocation* location) {
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_pool(memPool, [&](Driver&, MemPool&) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard lock(driver.pools_mutex);
    *pool_out = driver.default_pools[driver.physical(dev)];
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard lock(driver.pools_mutex);
    *pool = driver.current_pools[driver.physical(dev)];
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::shared_ptr<MemPool> found = driver.handles.get<MemPool>(pool);
    if (!found || found->device() != driver.physical(dev)) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard lock(driver.pools_mutex);
    driver.current_pools[driver.physical(dev)] = pool;
    return CUDA_SUCCESS;
  });
}
