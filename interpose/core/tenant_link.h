// TenantLink: what the shim's policies need of the tenant this process belongs to — its
// segments (quota read-only, ledger shared), its process slot, and the broker's slow
// paths (burst beyond the grant, registration of a forked child). TenantSession is the
// real one (registered over the tenant socket); unit tests give a fake over in-memory
// segments. Each call is one virtual call; the policies cache nothing that fork() or a
// re-registration can change except the ledger object, which lives as long as the link.
#pragma once

#include <cstdint>
#include <string>

#include "core/memory_ledger.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

class TenantLink {
 public:
  virtual ~TenantLink() = default;

  virtual const std::string& tenant() const = 0;  // its name, for log lines
  virtual const TenantQuota* quota() const = 0;
  virtual TenantLedger* ledger_map() = 0;
  virtual MemoryLedger& ledger() = 0;  // the reserve/release protocol over ledger_map()
  virtual uint32_t slot() const = 0;
  // Bumped each time this process moves to another slot while it runs (a re-registration
  // after its ledger was lost, tenant_segment.h): what holds slot pointers binds again.
  virtual uint32_t slot_generation() const { return 0; }

  // This process's TenantLedger.host_reserved word (tenant_segment.h, "The swap reserve");
  // null when the ledger carries none (a broker of minor < 6).
  virtual std::atomic<uint64_t>* host_reserved_word() {
    TenantLedger* l = ledger_map();
    return l != nullptr && ledger_has_host_reserved(l->size) ? &l->host_reserved[slot()] : nullptr;
  }

  // A forked child must register (and get a slot of its own) before it allocates or launches.
  virtual bool needs_registration() const = 0;
  virtual bool register_forked_child(std::string* error) = 0;
  // Asks the broker to raise the grant on `device` so that `bytes` more fit.
  virtual bool request_burst(uint32_t device, uint64_t bytes, std::string* error) = 0;
};

}  // namespace fracgpu
