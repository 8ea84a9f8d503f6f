// check_membership and its fault-proof reads (see membership.h).
#include "core/membership.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace fracgpu {
namespace {

enum class Read { kOk, kFault, kUnavailable };

// Copies `size` bytes at `from` (this process's memory) without faulting: EFAULT for a
// page that cannot be read (beyond the end of a truncated file), never SIGBUS.
Read read_own(void* to, const void* from, std::size_t size) {
  iovec local{to, size};
  iovec remote{const_cast<void*>(from), size};
  const ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  if (n == static_cast<ssize_t>(size)) return Read::kOk;
  if (n >= 0 || errno == EFAULT) return Read::kFault;
  return Read::kUnavailable;  // ENOSYS, EPERM (a seccomp filter): not knowable this way
}

// The fields that say whose a slot is: state, pid, start_time (tenant_segment.h).
struct SlotHead {
  uint32_t state;
  int32_t pid;
  uint64_t start_time;
};
static_assert(offsetof(ProcessSlot, state) == 0 && offsetof(ProcessSlot, pid) == 4 &&
              offsetof(ProcessSlot, start_time) == 8);

}  // namespace

const char* membership_check_name(MembershipCheck check) {
  switch (check) {
    case MembershipCheck::kIntact:
      return "intact";
    case MembershipCheck::kRebuilt:
      return "ledger rebuilt by the broker";
    case MembershipCheck::kSlotLost:
      return "slot no longer this process's";
    case MembershipCheck::kUnreadable:
      return "ledger file truncated";
  }
  return "intact";
}

MembershipCheck check_membership(const TenantQuota& quota, const TenantLedger& ledger,
                                 const Membership& mine) {
  if (quota.ledger_incarnation.load(std::memory_order_acquire) != mine.incarnation)
    return MembershipCheck::kRebuilt;
  if (mine.slot >= kMaxProcesses) return MembershipCheck::kSlotLost;
  uint64_t magic = 0;
  SlotHead head{};
  const Read a = read_own(&magic, &ledger.magic, sizeof magic);
  const Read b = read_own(&head, &ledger.processes[mine.slot], sizeof head);
  if (a == Read::kFault || b == Read::kFault) return MembershipCheck::kUnreadable;
  if (a == Read::kUnavailable || b == Read::kUnavailable) return MembershipCheck::kIntact;
  if ((mine.magic_ok && magic != kLedgerMagic) ||
      head.state != static_cast<uint32_t>(SlotState::kLive) || head.pid != mine.pid ||
      head.start_time != mine.start_time)
    return MembershipCheck::kSlotLost;
  return MembershipCheck::kIntact;
}

Membership membership_of(const TenantLedger& ledger, uint32_t slot, uint32_t incarnation) {
  Membership m;
  m.slot = slot;
  m.incarnation = incarnation;
  m.magic_ok = ledger.magic == kLedgerMagic;
  if (slot < kMaxProcesses) {
    m.pid = ledger.processes[slot].pid.load(std::memory_order_acquire);
    m.start_time = ledger.processes[slot].start_time.load(std::memory_order_acquire);
  }
  return m;
}

}  // namespace fracgpu
