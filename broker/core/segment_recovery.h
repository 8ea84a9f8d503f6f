// Recovery of a tenant's ledger whose header is no longer valid (zeroed, damaged, or
// written by garbage) when the broker re-opens it. The ledger's counters live in the
// processes' own slots as much as in the header: each registered process keeps its
// ProcessSlot (pid, start time, used[] per GPU, swapped pages) current itself, and keeps
// it mapped across a broker restart. So instead of zeroing the file, which would make
// the broker forget every live process's usage, the ledger is rebuilt from those slots:
// slots that cannot be a process's (bad state, no pid) and the slots of processes that
// are already known dead are cleared, the tenant-wide used/swapped are recomputed from
// the remaining live slots (the consistent-snapshot rule of tenant_segment.h, because
// the processes may be allocating meanwhile), and the header is stamped last. The
// broker's start-up then re-attaches (or reclaims) those processes exactly as after a
// normal restart. Runs once per tenant at start; no hot path.
#pragma once

#include <cstdint>

#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

struct LedgerRebuild {
  uint32_t live_slots = 0;     // kept: the processes re-attach through them
  uint32_t cleared_slots = 0;  // garbage or dead slots wiped
  bool settled = true;         // false: a counter was set from a best-effort sum
};

LedgerRebuild rebuild_ledger(TenantLedger& ledger);

}  // namespace fracgpu::broker
