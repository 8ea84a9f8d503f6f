// Stream-ordered allocation and memory pools: cuMemAllocAsync, cuMemAllocFromPoolAsync,
// cuMemFreeAsync (+ _ptsz), cuMemPool*, cuDevice{Get,Set,GetDefault}MemPool, and the
// graph memory pool: cuDeviceGraphMemTrim, cuDevice{Get,Set}GraphMemAttribute.
// Allocation happens at the call (so an over-capacity request fails at once with
// CUDA_ERROR_OUT_OF_MEMORY); the free is a work item, so memory stays valid until the
// stream reaches it, which is what stream-ordered semantics promise. On a capturing
// stream both become graph memory nodes instead (nothing is allocated then; the
// address returned is the node's, see mem_pool.h), and cuMemFreeAsync of a graph
// allocation returns it to the graph memory pool.
#include "api_support.h"
#include "capture.h"
#include "device_memory.h"
#include "mem_pool.h"
#include "operations.h"
#include "stream.h"

using namespace fakecuda;

namespace {

CUresult stream_context(Driver& driver, Stream& stream, std::shared_ptr<Context>& context) {
  context = driver.handles.get<Context>(stream.context());
  return context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

// The allocation node cuMemAllocAsync records while capturing (from the pool's device).
CUresult graph_alloc_op(Driver& driver, Context& context, MemPool& pool, size_t bytes,
                        MemAllocOp& op) {
  op.allocation = graph_memory()->create(driver, pool.device(), context.handle(), bytes);
  if (!op.allocation) return CUDA_ERROR_OUT_OF_MEMORY;
  op.pool_props = pool.props();
  op.pool_props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  op.pool_props.location.id = driver.ordinal_of(pool.device());
  op.access = std::make_shared<const std::vector<CUmemAccessDesc>>();
  return CUDA_SUCCESS;
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool_handle, CUstream hStream) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    std::shared_ptr<Context> context;
    if ((status = stream_context(driver, *stream, context)) != CUDA_SUCCESS) return status;
    if (pool_handle == nullptr) {
      std::lock_guard lock(driver.pools_mutex);
      pool_handle = driver.current_pools[stream->device()];
    }
    std::shared_ptr<MemPool> pool = driver.handles.get<MemPool>(pool_handle);
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (capture_status(*stream) != CU_STREAM_CAPTURE_STATUS_NONE) {
      MemAllocOp op;
      if ((status = graph_alloc_op(driver, *context, *pool, bytes, op)) != CUDA_SUCCESS)
        return status;
      CUresult result = CUDA_SUCCESS;
      if (capture_operation(*stream, op, result)) {
        if (result == CUDA_SUCCESS) *dptr = op.allocation->base();
        return result;
      }
    }
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
    std::shared_ptr<GraphMemory> memory = graph_memory();
    std::shared_ptr<GraphAllocation> graph_allocation = memory->find(dptr);
    if (capture_status(*stream) != CU_STREAM_CAPTURE_STATUS_NONE) {
      // A free node, which must free a graph allocation.
      if (!graph_allocation) {
        invalidate_capture(*stream);
        return CUDA_ERROR_INVALID_VALUE;
      }
      CUresult result = CUDA_SUCCESS;
      if (capture_operation(*stream, MemFreeOp{graph_allocation}, result)) return result;
    }
    Driver* owner = &driver;
    if (graph_allocation) {  // freed now for the API, unmapped once the stream gets there
      if ((status = memory->begin_free_async(graph_allocation)) != CUDA_SUCCESS) return status;
      stream->submit(
          [memory, graph_allocation](WorkScope&) { memory->end_free_async(graph_allocation); });
      return CUDA_SUCCESS;
    }
    std::optional<Allocation> found = driver.allocations.find(dptr);
    if (!found || found->base != dptr || found->is_host_kind() ||
        found->kind == MemoryKind::VmmMapping) {
      return CUDA_ERROR_INVALID_VALUE;
    }
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
  if (CUresult legacy = check_stream_use(hStream); legacy != CUDA_SUCCESS) return legacy;
  return alloc_async(dptr, bytesize, nullptr, hStream);
}
extern "C" CUresult fakecuda_impl_cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                       CUstream hStream) {
  if (CUresult legacy = check_stream_use(per_thread_handle(hStream)); legacy != CUDA_SUCCESS)
    return legacy;
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

// Graph memory pool of a device (see mem_pool.h).
extern "C" CUresult fakecuda_impl_cuDeviceGraphMemTrim(CUdevice device) {
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
    graph_memory()->trim(driver, driver.physical(device));
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceGetGraphMemAttribute(CUdevice device,
                                                               CUgraphMem_attribute attr,
                                                               void* value) {
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
    return graph_memory()->get_attribute(driver.physical(device), attr, value);
  });
}

extern "C" CUresult fakecuda_impl_cuDeviceSetGraphMemAttribute(CUdevice device,
                                                               CUgraphMem_attribute attr,
                                                               void* value) {
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
    return graph_memory()->set_attribute(driver.physical(device), attr, value);
  });
}
