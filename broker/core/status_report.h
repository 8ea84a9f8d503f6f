// What the broker tells operators: the TENANT_STATUS / GPU objects of protocol.h (used
// by `fracgpu status` and `tenant list`), read straight from the live quota and ledger
// counters. The Prometheus metrics are tenant_metrics.h and metrics_exposition.h.
#pragma once

#include <nlohmann/json.hpp>

#include "core/audit_service.h"
#include "core/compute_service.h"
#include "core/gpu_inventory.h"
#include "core/tenant_registry.h"

namespace fracgpu::broker {

nlohmann::json gpu_json(const GpuInfo& gpu, uint64_t reserve);
nlohmann::json gpus_json(const GpuInventory& gpus, uint64_t reserve);
// With `audit`: the tenant's "violations" (AuditService::tenant_json).
nlohmann::json tenant_status_json(Tenant& tenant, const ComputeService* compute = nullptr,
                                  const AuditService* audit = nullptr);

}  // namespace fracgpu::broker
