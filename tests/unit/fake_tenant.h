// Fakes for the unit tests of the shim's policies (core/tenant_policies.h): a tenant of
// one GPU over in-memory segments (TenantLink, with a broker that grants burst when told
// to) and a simulated driver behind the DriverCalls, FenceOps and CaptureOps the core is
// given. The driver's state is static (plain function pointers cannot capture); each
// test starts with FakeDriver::reset().
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/driver_calls.h"
#include "core/memory_ledger.h"
#include "core/tenant_link.h"
#include "fracgpu/gpu_uuid.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::testing {

// The simulated driver: one device, pools and graphs whose figures the test sets.
struct FakeDriver {
  static inline const unsigned char kUuid[16] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                                 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xf0, 0x01};
  static inline std::map<CUmemoryPool, uint64_t> pool_reserved;  // RESERVED_MEM_CURRENT per pool
  static inline CUmemoryPool default_pool = reinterpret_cast<CUmemoryPool>(0x500);
  static inline uint64_t graph_reserved = 0;  // CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT
  static inline uint64_t graph_used = 0;      // CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT
  static inline std::vector<uint64_t>
      graph_allocations;  // bytes of each memory node of every graph
  static inline int frees = 0;
  static inline bool capturing = false;  // every stream's capture status

  static void reset() {
    pool_reserved.clear();
    graph_reserved = graph_used = 0;
    graph_allocations.clear();
    frees = 0;
    capturing = false;
  }

  static DriverCalls calls() {
    DriverCalls c;
    c.cuDeviceGetCount = [](int* count) {
      *count = 1;
      return CUDA_SUCCESS;
    };
    c.cuDeviceGetUuid = [](CUuuid* uuid, CUdevice) {
      std::memcpy(uuid->bytes, kUuid, sizeof(kUuid));
      return CUDA_SUCCESS;
    };
    c.cuCtxGetDevice = [](CUdevice* device) {
      *device = 0;
      return CUDA_SUCCESS;
    };
    c.cuDeviceGetMemPool = [](CUmemoryPool* pool, CUdevice) {
      *pool = default_pool;
      return CUDA_SUCCESS;
    };
    c.cuMemPoolGetAttribute = [](CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
      if (attribute != CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<cuuint64_t*>(value) = pool_reserved[pool];
      return CUDA_SUCCESS;
    };
    c.cuMemFree = [](CUdeviceptr) {
      ++frees;
      return CUDA_SUCCESS;
    };
    c.cuGraphGetNodes = [](CUgraph, CUgraphNode* nodes, size_t* count) {
      if (nodes != nullptr) {
        for (size_t i = 0; i < *count && i < graph_allocations.size(); ++i)
          nodes[i] = reinterpret_cast<CUgraphNode>(i + 1);
      }
      *count = graph_allocations.size();
      return CUDA_SUCCESS;
    };
    c.cuGraphNodeGetType = [](CUgraphNode, CUgraphNodeType* type) {
      *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      return CUDA_SUCCESS;
    };
    c.cuGraphMemAllocNodeGetParams = [](CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
      params->bytesize = graph_allocations[reinterpret_cast<uintptr_t>(node) - 1];
      return CUDA_SUCCESS;
    };
    c.cuDeviceGetGraphMemAttribute = [](CUdevice, CUgraphMem_attribute attribute, void* value) {
      *static_cast<cuuint64_t*>(value) =
          attribute == CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ? graph_reserved : graph_used;
      return CUDA_SUCCESS;
    };
    return c;
  }

  // Fences that complete at once (the limiter's bookkeeping, not its waiting, is tested here).
  static FenceOps fence_ops() {
    FenceOps o;
    o.ctx_get_current = [](CUcontext* ctx) {
      *ctx = reinterpret_cast<CUcontext>(0x1);
      return CUDA_SUCCESS;
    };
    o.event_create = [](CUevent* event, unsigned) {
      static uintptr_t next = 0x100;
      *event = reinterpret_cast<CUevent>(next++);
      return CUDA_SUCCESS;
    };
    o.event_record = [](CUevent, CUstream) { return CUDA_SUCCESS; };
    o.event_query = [](CUevent) { return CUDA_SUCCESS; };
    o.event_synchronize = [](CUevent) { return CUDA_SUCCESS; };
    o.event_elapsed = [](float* ms, CUevent, CUevent) {
      *ms = 0.001f;
      return CUDA_SUCCESS;
    };
    o.event_destroy = [](CUevent) { return CUDA_SUCCESS; };
    o.stream_is_capturing = stream_is_capturing;
    return o;
  }

  static CaptureOps capture_ops() {
    CaptureOps o;
    o.exchange_mode = [](CUstreamCaptureMode*) { return CUDA_SUCCESS; };
    o.stream_is_capturing = stream_is_capturing;
    return o;
  }

  static CUresult stream_is_capturing(CUstream, CUstreamCaptureStatus* status) {
    *status = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
};

// A tenant of one GPU (the fake driver's) over in-memory segments, slot 0.
class FakeTenant : public TenantLink {
 public:
  FakeTenant(uint64_t limit, uint64_t grant, uint64_t context_footprint = 0) {
    quota_->device_count = 1;
    DeviceQuota& d = quota_->devices[0];
    d.present = 1;
    std::strncpy(d.uuid, format_gpu_uuid(FakeDriver::kUuid).c_str(), kUuidSize - 1);
    d.memory_limit = limit;
    d.memory_request = grant;
    d.memory_grant = grant;
    d.context_footprint = context_footprint;
    d.grant_word = make_grant_word(1, true, false);
    ledger_map_->size = sizeof(TenantLedger);
    ledger_ = MemoryLedger(quota_.get(), ledger_map_.get(), 0);
  }

  const std::string& tenant() const override { return name_; }
  const TenantQuota* quota() const override { return quota_.get(); }
  TenantLedger* ledger_map() override { return ledger_map_.get(); }
  MemoryLedger& ledger() override { return ledger_; }
  uint32_t slot() const override { return 0; }
  bool needs_registration() const override { return false; }
  bool register_forked_child(std::string*) override { return true; }
  // The broker: raises the grant as far as asked (within the limit) while bursts are allowed.
  bool request_burst(uint32_t device, uint64_t bytes, std::string* error) override {
    ++burst_requests;
    DeviceQuota& d = quota_->devices[device];
    if (!allow_burst) {
      *error = "no burst in this test";
      return false;
    }
    d.memory_grant = std::min<uint64_t>(d.memory_limit, ledger_.used(device) + bytes);
    return true;
  }

  uint64_t used() { return ledger_.used(0); }
  uint64_t oom_events() { return ledger_map_->devices[0].oom_events.load(); }
  TenantQuota& quota_map() { return *quota_; }

  bool allow_burst = false;
  int burst_requests = 0;

 private:
  std::string name_ = "unit";
  std::unique_ptr<TenantQuota> quota_ = std::make_unique<TenantQuota>();
  std::unique_ptr<TenantLedger> ledger_map_ = std::make_unique<TenantLedger>();
  MemoryLedger ledger_;
};

}  // namespace fracgpu::testing
