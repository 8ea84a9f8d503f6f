// In-memory quota/ledger pairs for unit tests of the arbiter and the ledger rules:
// the same structs the broker maps from files, zero-initialised on the heap.
#pragma once

#include <cstring>
#include <memory>
#include <string>

#include "core/ledger_ops.h"
#include "core/memory_arbiter.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker::testing {

inline constexpr uint64_t kGiB = 1ull << 30;
inline constexpr uint64_t kMiB = 1ull << 20;

struct MemoryTenant {
  std::string name;
  std::unique_ptr<TenantQuota> quota = std::make_unique<TenantQuota>();
  std::unique_ptr<TenantLedger> ledger = std::make_unique<TenantLedger>();
  uint32_t slot = 0;  // one "process" registered in slot `slot`

  MemoryTenant(std::string n, uint32_t gpu, uint64_t limit, uint64_t request) : name(std::move(n)) {
    std::memset(static_cast<void*>(quota.get()), 0, sizeof(TenantQuota));
    ledger::initialize(*ledger);
    quota->device_count = 1;
    DeviceQuota& d = quota->devices[0];
    d.present = 1;
    d.host_index = gpu;
    d.memory_limit = limit;
    d.memory_request = request;
    d.memory_grant = request;
    slot = *ledger::claim_slot(*ledger, 1000, 1);
  }
  ArbiterMember member() const { return {name, quota.get(), ledger.get()}; }
  DeviceQuota& q() { return quota->devices[0]; }
  uint64_t grant() const { return quota->devices[0].memory_grant.load(); }
  uint64_t used() const { return ledger->devices[0].used.load(); }
  bool reserve(uint64_t bytes) { return ledger::reserve(*ledger, *quota, slot, 0, bytes); }
  void release(uint64_t bytes) { ledger::release(*ledger, slot, 0, bytes); }
};

}  // namespace fracgpu::broker::testing
