// Whether this process is still counted where it thinks it is (tenant_segment.h, "A ledger
// lost"): the quota's ledger incarnation as it was when the process registered, and its
// slot as the broker filled it (pid and start time: the broker's, from SO_PEERCRED and
// /proc, so the host's pid even in a pod) in a ledger whose header is intact. Anything
// else means its slot may be gone — zeroed with the file, or in a file the broker no
// longer serves — and the process re-registers (TenantSession). The ledger is read with
// process_vm_readv on this very process: a ledger file truncated under the mapping turns
// into an error there instead of the SIGBUS a plain load would raise in the application.
// No hot path: TenantSession's watch calls it every 500 ms and on the incarnation's wake.
#pragma once

#include <cstdint>

#include "fracgpu/tenant_segment.h"

namespace fracgpu {

struct Membership {
  uint32_t slot = 0;
  int32_t pid = 0;           // ProcessSlot.pid as the broker wrote it
  uint64_t start_time = 0;   // ProcessSlot.start_time as the broker wrote it
  uint32_t incarnation = 0;  // TenantQuota.ledger_incarnation read before registering
  bool magic_ok = true;      // the ledger's header had its magic then (a header still
                             // zeroed when the process re-registered is no news later)
};

enum class MembershipCheck {
  kIntact,      // nothing to do
  kRebuilt,     // the broker rebuilt or re-created the ledger: re-register
  kSlotLost,    // the slot is not this process's any more (or the header is gone)
  kUnreadable,  // the ledger file is shorter than the mapping: wait for the broker
};
const char* membership_check_name(MembershipCheck check);

MembershipCheck check_membership(const TenantQuota& quota, const TenantLedger& ledger,
                                 const Membership& mine);

// The identity in `slot` of `ledger` just after a registration reply (the broker filled it
// before replying), with the incarnation read before the request.
Membership membership_of(const TenantLedger& ledger, uint32_t slot, uint32_t incarnation);

}  // namespace fracgpu
