// The shared-memory contract between the broker and a tenant's processes (layout 1.7).
//
// Each tenant has two files in its run directory, mapped with Boost.Interprocess:
//   quota  — TenantQuota: written only by the broker; tenant processes map it READ-ONLY,
//            so no process can raise its own cap or grant.
//   ledger — TenantLedger: the tenant's usage counters, mapped read-write by the broker
//            and by every process of the tenant; the allocation fast path is a
//            compare-and-swap here, with no syscall and no socket round trip.
// A tenant maps only its own files, never another tenant's.
//
// Rules that make the counters exact (see docs/design.md, "The memory ledger"):
//  * reserve n on device d: ProcessSlot.used[d] += n first, then CAS
//    DeviceUsage.used from u to u+n only while u+n <= DeviceQuota.memory_grant;
//    on failure undo the slot add. Release: DeviceUsage.used -= n, then slot -= n.
//    So a slot never under-states what its process holds in DeviceUsage.used.
//  * every reserve/release is bracketed by ProcessSlot.op_seq increments (odd while
//    the process is inside an operation, even between operations).
//  * when a process dies the broker marks its slot dead. If its op_seq is even, the
//    slot's used[] is exactly its share of DeviceUsage.used and the broker subtracts
//    it (a fetch_sub: exact whatever other processes do meanwhile). If it died inside
//    an operation (odd), the broker recomputes DeviceUsage.used = sum of live slots
//    from a consistent snapshot: collect every live slot's op_seq (all even), read
//    used, sum, collect again; identical collects mean no operation ran between them,
//    so the used read there and the sum agree, and a CAS from that used installs the
//    sum (else retry). A bare CAS of the sum is NOT enough: an allocation and a free
//    of equal size during the summation leave used unchanged (ABA) while the sum
//    missed one of them. Nor is reading used before the first collect: an operation
//    completing before the collect and an opposite one after the second would let
//    the CAS succeed with a sum that is off by their difference.
//  * the broker raises memory_grant (burst, up to memory_limit) on request and lowers
//    it only down to max(memory_request, used): it stores the lower grant, re-reads
//    used and raises the grant back over it. So after a successful CAS the process
//    re-reads memory_grant and undoes the reservation if u+n no longer fits (all
//    seq_cst): either the broker sees the new used or the process sees the new grant.
//  * DeviceUsage.oom_events is counted by the processes, burst_requests by the broker.
//
// Compute scheduling (minor 2; docs/design.md "Compute scheduling"):
//  * DeviceQuota.grant_word (broker-written, a futex word): bit 0 = the tenant may
//    launch on this GPU, bit 1 = ring the doorbell on the first launch of this epoch
//    (the broker believes the tenant idle), bits 2..31 = epoch, bumped by the broker
//    on every change. A launch reads it once; while it equals what the process saw
//    last, nothing else happens. Waiters FUTEX_WAIT on it; the broker FUTEX_WAKEs.
//  * SlotSchedule.launched_epoch: the process stores the epoch before its first launch
//    in an epoch and then re-reads grant_word (seq_cst): either the broker, reading the
//    slots after publishing a revoke, sees the store, or the process sees the revoke.
//  * SlotSchedule.drained_epoch: after a revoke the process synchronises the contexts
//    it launched into and stores the revoke's epoch; the broker hands the GPU on when
//    every live slot that launched during the grant has drained (or died).
//  * SlotSchedule.waiting counts the process's threads blocked at the gate; the broker
//    sums live slots only, so waiters of a process that died vanish with its slot.
//    DeviceUsage.waiting is that sum as of the broker's latest scheduling pass, for
//    monitoring; only the broker writes it (since minor 4; older shims' increments are
//    overwritten at the next pass).
//  * Burst guard: a high tenant's process stores the CLOCK_MONOTONIC time of the first
//    launch after a pause (DeviceUsage.burst_start_ns) and rings the doorbell. When
//    those bursts come at a regular period, the broker publishes the predicted next
//    one (guard_next_ns, guard_period_ns, guard_lead_ns) to the GPU's other tenants,
//    whose processes then do not start work that would still run when it arrives, and
//    once it has arrived wait until its launches are in (guard_hold_ns, from the spans
//    of earlier bursts, DeviceUsage.burst_span_ns).
// Swap to host (minor 3; docs/design.md "Overcommit and swap"):
//  * DeviceUsage.used counts device-RESIDENT bytes only (what the grant bounds);
//    DeviceUsage.swapped counts the tenant's bytes moved to host memory. The hard cap
//    bounds used + swapped: a reservation checks used + swapped + n <= memory_limit.
//  * Swap-out of n bytes by a process: SlotSchedule.swapped_pages += n/kSwapPage first,
//    then DeviceUsage.swapped += n, then the normal release of n from used. Swap-in:
//    reserve n against the grant only (the bytes are already inside the cap), then
//    DeviceUsage.swapped -= n, then the slot's pages. In between a byte is counted twice,
//    never zero times, so the cap can only err on the safe side.
//  * The broker asks for memory back through DeviceQuota.resident_target (the tenant's
//    used should come down to it; kNoResidentTarget = no demand) and bumps swap_word (a
//    futex word its processes' swap threads wait on). swap_policy says whether the
//    tenant's allocations may be backed so that they can move (kSwapAllow) at all.
//  * ProcessSlot.last_active_ns: written by the process's swap thread (at most every 200 ms)
//    when it saw device-memory calls since its last look; the broker moves a tenant whose
//    processes all stayed idle for --swap-idle-after entirely to host.
//  * A dead process's swapped pages are subtracted from DeviceUsage.swapped by the
//    broker like its used bytes (its host copies die with it).
// Liveness (minor 4; docs/design.md "Failing open"):
//  * TenantQuota.broker_heartbeat: a lease the broker renews (fetch_add) on every
//    scheduling pass, which runs at least every 250 ms while any thread of any tenant
//    waits at a gate. A waiting thread that sees it unchanged for GrantGate::kBrokerHungNs
//    of its own time (a stopped or hung broker, or a segment no broker serves any more)
//    launches without a grant. 0 = never renewed (a broker of minor < 4): not a lease.
//    A counter, not a time: the broker's and a pod's clocks need not agree.
//  * a broker that died is seen sooner, without the lease: its doorbell socket refuses
//    (ECONNREFUSED/ENOENT), which a waiting thread probes on every wait slice.
//  * ProcessSlot.gate_progress: bumped (relaxed) by the process's gate threads every
//    time they wake while waiting. A tenant granted the GPU that neither acknowledges
//    the grant nor drains is held unresponsive by the broker (stopped, frozen) and not
//    granted again until the sum of its live slots' gate_progress moves.
// A ledger lost under live processes (minor 5; docs/design.md "The memory ledger"):
//  * TenantQuota.ledger_incarnation: each time the broker had to rebuild or re-create the
//    tenant's ledger (its header invalid: zeroed, truncated, garbage; or the file missing),
//    it stores there a value never used before and never 0 — after the ledger's header is
//    stamped, before the tenant's socket serves — and FUTEX_WAKEs it. A process reads it
//    BEFORE it sends a registration (so a rebuild racing with the registration is seen on
//    its next look, never missed) and waits on it from a background thread (at most
//    500 ms, to also look at its slot).
//  * A process re-registers when that value changed, or when its slot no longer carries the
//    pid and start time the broker wrote there at its registration, or the ledger's magic
//    is gone. First it stops its own reservations and releases (those in flight complete:
//    a process-local gate), so its books cannot move while they are re-charged; it sends
//    the slot it had ("slot") and what it holds per device ("holdings": what it reserved
//    minus what it released, kept in process memory beside the slot); it maps the ledger
//    descriptor of the reply over its old mapping when it is another file (same address:
//    nothing that points into the ledger moves), resumes on the reply's slot, and only then
//    opens the gate. The broker honours "slot" when it is free (a slot is never taken from
//    a process that may still write it).
//  * The broker re-charges into the slot max(what it books, the claim bounded by the
//    device's per-process usage when NVML reports it, else by the tenant's cap and the
//    GPU's memory): ProcessSlot.used first, then DeviceUsage.used by fetch_add (exact
//    against other processes' reservations), inside an op_seq bracket; swapped pages the
//    same way (SlotSchedule.swapped_pages, then DeviceUsage.swapped). A claim never lowers
//    what a slot books.
//  * Until every process that maps the tenant's quota and had no live slot at the rebuild
//    has re-registered or exited (at most LedgerRebuilds::kDeadline), the broker holds
//    the tenant's grant as of the rebuild in a placeholder slot: state Live, pid 0,
//    start_time 0 (no process; a later broker reclaims it as dead). DeviceUsage.used
//    counts it, so neither the tenant's own allocations nor another tenant's burst can use
//    the room its unregistered processes may hold. A re-charge moves bytes from the
//    placeholder into the process's slot (the slot's charge first, then the placeholder's
//    release: used may over-state for a moment, never under-state). When the last process
//    is in, the placeholder is released and freed and DeviceUsage.used recomputed from the
//    live slots by the consistent-snapshot rule (which drops whatever a not yet
//    re-registered process added to the counter without a live slot).
// The swap reserve (minor 6; docs/design.md "Overcommit and swap"):
//  * DeviceQuota.host_reserve: broker-written. Bytes of host memory the tenant's processes
//    may keep pinned and empty, ready for a swap-out of their memory on this GPU: a swap-out
//    into it copies at the host link's speed, where one that pins as it goes is bound by
//    pinning (a few GB/s). The broker sets it, each maintenance tick, to at most what the
//    tenant borrows there (resident bytes above its request), for tenants with kSwapAllow
//    only, in reclaim order (the first asked to move memory gets its reserve first), within
//    the node's host budget less what is on host or being moved there; 0 otherwise.
//  * TenantLedger.host_reserved[slot]: written by the process (a store of its absolute
//    value, by its swap thread at least every 200 ms while it holds or wants a reserve, and
//    again after a re-registration). The bytes of pinned, empty host memory it holds for
//    the reserve now. It raises the field BEFORE it pins more and lowers it AFTER it
//    unpinned, so the broker never sees less than what is pinned. A process holds at most
//    the sum over its GPUs of host_reserve less what the tenant's other live slots hold
//    (two processes growing at once may overshoot by one step each; the broker counts what
//    they hold, and each trims back on its next look), and at most its own swappable
//    resident bytes. A swap-out that fills reserved memory adds to
//    SlotSchedule.swapped_pages and DeviceUsage.swapped first, then lowers host_reserved
//    (a byte counted twice, never zero times); a swap-in that returns the memory to the
//    reserve raises host_reserved first, then releases the swapped counts.
//  * Reserves are given only out of the host budget less what is on host (DeviceUsage.swapped)
//    and less what open demands will still move there, so together with those they stay
//    within the budget. A move is never refused for another tenant's reserve (that tenant's
//    target shrinks in the same tick, and its processes trim within their next look); a
//    move may fill its own tenant's live reserve beyond what is left of the budget. The
//    broker zeroes a slot's host_reserved when it gives the slot to a process and when it
//    reaps a dead one (the pinned memory died with it).
//  * Valid only where TenantLedger.size covers host_reserved (a broker of minor >= 6); a
//    process of an older ledger keeps no reserve.
// The broker's swap books (minor 7; docs/security.md "What a tenant writes or claims"):
//  * DeviceQuota.host_allowance: broker-written, the most bytes of the tenant on this GPU the
//    broker lets count as on host. DeviceUsage.swapped and the slots' swapped_pages are the
//    tenant's own words: every figure that decides for other tenants (the host budget, a
//    re-registration's re-charge) takes min(swapped, host_allowance), and the books check
//    cuts a ledger that says more (a violation of kind "swap"). The broker raises it to the
//    tenant's cap there BEFORE it publishes a resident_target (a move of whole allocations
//    may take more than was asked, never more than the cap: used + swapped <= memory_limit);
//    it stays there while the demand is open and for SwapBooks::kMoveHold after (a move in
//    flight when the demand is withdrawn still lands), then follows what the ledger says on
//    host down, never up. It lives in the quota, not in the broker's memory, so that a
//    broker restarted (even after SIGKILL) keeps it; a quota re-initialised under a ledger
//    that says bytes are on host starts it at min(swapped, cap), once (a quota's loss is
//    nothing a tenant can cause: it is read-only to tenants).
//  * Processes do not read it: a shim of any minor ignores it.
//  * TenantLedger.host_reserved counts, for the broker's decisions, at most the reserve it
//    gives now (sum of DeviceQuota.host_reserve); a word past the tenant's caps is cut.
// Every field shared across processes is a lock-free, address-free std::atomic.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fracgpu {

inline constexpr uint64_t kQuotaMagic = 0x41544f5155504746ull;   // "FGPUQUOTA" (LE, truncated)
inline constexpr uint64_t kLedgerMagic = 0x5247444c55504746ull;  // "FGPULDGR"
inline constexpr uint16_t kSegmentMajor = 1;                     // incompatible layout change
inline constexpr uint16_t kSegmentMinor =
    7;  // compatible addition; 1: op_seq, 2: compute grants, 3: swap, 4: liveness,
        // 5: incarnation, 6: swap reserve, 7: host allowance
inline constexpr std::size_t kMaxDevices = 16;
inline constexpr std::size_t kMaxProcesses = 512;
inline constexpr std::size_t kUuidSize = 48;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx\0"
inline constexpr std::size_t kTenantNameSize = 64;  // [a-z0-9][a-z0-9._-]{0,62}

enum class PriorityClass : uint32_t { kLow = 0, kNormal = 1, kHigh = 2 };

enum class SlotState : uint32_t { kFree = 0, kLive = 1, kDead = 2 };

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);

// Per-GPU quota of one tenant. Broker-written; read-only for tenants.
struct alignas(64) DeviceQuota {
  char uuid[kUuidSize];                       // the GPU's UUID as the driver reports it
  uint32_t present;                           // 1: the tenant may use this GPU
  uint32_t host_index;                        // the GPU's index on the node
  std::atomic<uint64_t> memory_limit;         // hard cap, bytes
  std::atomic<uint64_t> memory_request;       // guaranteed bytes (always obtainable)
  std::atomic<uint64_t> memory_grant;         // usable without asking: request <= grant <= limit
  std::atomic<uint64_t> context_footprint;    // bytes charged per CUDA context
  std::atomic<uint32_t> compute_weight;       // relative share under contention (1..10000)
  std::atomic<uint32_t> compute_ceiling_pct;  // 0 = no ceiling, else 1..100
  std::atomic<uint32_t> priority;             // PriorityClass
  std::atomic<uint32_t> grant_word;           // minor 2: see "Compute scheduling" above
  std::atomic<uint32_t>
      inflight_limit_us;                // minor 2: GPU time a process may keep queued; 0 = no bound
  std::atomic<uint32_t> guard_lead_ns;  // minor 2: see "burst guard" below
  std::atomic<uint64_t> guard_next_ns;  // minor 2: predicted start of a high tenant's next burst
  std::atomic<uint64_t> guard_period_ns;  // minor 2: 0 = no guard
  std::atomic<uint64_t> guard_late_ns;  // minor 2: stop holding back this long after guard_next_ns
  std::atomic<uint64_t>
      guard_hold_ns;  // minor 2: after a burst is seen, hold back this long past its start
  std::atomic<uint64_t> resident_target;  // minor 3: swap down to this many bytes (see above)
  std::atomic<uint32_t> swap_word;        // minor 3: bumped when resident_target changes
  std::atomic<uint32_t> swap_policy;      // minor 3: kSwapNever / kSwapAllow
  std::atomic<uint64_t> host_reserve;     // minor 6: pinned host bytes to hold ready (above)
  std::atomic<uint64_t> host_allowance;   // minor 7: the most the broker counts on host (above)
  uint64_t reserved[2];                   // room for compatible additions (minor version)
};

inline constexpr uint64_t kNoResidentTarget = ~0ull;
inline constexpr uint32_t kSwapNever = 0;
inline constexpr uint32_t kSwapAllow = 1;
inline constexpr uint64_t kSwapPage = 2ull << 20;  // unit of SlotSchedule.swapped_pages

inline constexpr uint32_t kGrantGranted = 1u;  // grant_word bit 0
inline constexpr uint32_t kGrantNotify = 2u;   // grant_word bit 1
inline constexpr uint32_t kGrantEpochShift = 2;
inline constexpr uint32_t grant_epoch(uint32_t word) {
  return word >> kGrantEpochShift;
}
inline constexpr uint32_t make_grant_word(uint32_t epoch, bool granted, bool notify) {
  return (epoch << kGrantEpochShift) | (granted ? kGrantGranted : 0u) |
         (notify ? kGrantNotify : 0u);
}

struct TenantQuota {
  uint64_t magic;  // kQuotaMagic
  uint16_t major;
  uint16_t minor;
  uint32_t size;  // sizeof(TenantQuota)
  char tenant[kTenantNameSize];
  std::atomic<uint64_t> generation;          // bumped by the broker after every change
  uint32_t device_count;                     // entries of devices[] in use
  std::atomic<uint32_t> ledger_incarnation;  // minor 5: see "A ledger lost" above
  std::atomic<uint64_t> broker_heartbeat;    // minor 4: the broker's lease (see "Liveness")
  uint64_t reserved[5];
  DeviceQuota devices[kMaxDevices];
};

// Usage of one GPU by the whole tenant. Shared read-write.
struct alignas(64) DeviceUsage {
  std::atomic<uint64_t> used;            // bytes reserved by all live processes
  std::atomic<uint64_t> peak;            // high-water mark of used
  std::atomic<uint64_t> oom_events;      // allocations refused at the cap
  std::atomic<uint64_t> burst_requests;  // slow-path requests sent to the broker
  std::atomic<uint32_t> waiting;         // minor 2: threads blocked at the launch gate
  uint32_t reserved32;
  std::atomic<uint64_t> burst_start_ns;  // minor 2: a high tenant's latest burst (see above)
  std::atomic<uint64_t> burst_span_ns;   // minor 2: first to last launch of its previous burst
  std::atomic<uint64_t> swapped;         // minor 3: bytes of the tenant moved to host memory
};

// One registered process. pid/start_time/state are written by the broker (pid from
// SO_PEERCRED); used[] and op_seq by the process itself.
struct alignas(64) ProcessSlot {
  std::atomic<uint32_t> state;       // SlotState
  std::atomic<int32_t> pid;          // host pid
  std::atomic<uint64_t> start_time;  // field 22 of /proc/<pid>/stat: defeats pid reuse
  std::atomic<uint64_t> used[kMaxDevices];
  std::atomic<uint64_t> op_seq;  // odd while a reserve/release is in progress (minor 1)
  // Minor 3: CLOCK_MONOTONIC time at which the process's swap thread last saw it touch device
  // memory (0: it has no swappable memory); the broker swaps idle tenants out by it.
  std::atomic<uint64_t> last_active_ns;
  // Minor 4: counts wake-ups of the process's threads waiting at a launch gate (see "Liveness").
  std::atomic<uint64_t> gate_progress;
};

// Minor 2: one process's scheduling handshake on one GPU (written by the process).
struct SlotSchedule {
  std::atomic<uint32_t> launched_epoch;  // last grant epoch in which it launched
  std::atomic<uint32_t> drained_epoch;   // last revoke epoch it has drained for
  std::atomic<uint32_t> waiting;         // its threads blocked at the launch gate
  std::atomic<uint32_t> swapped_pages;   // minor 3: its bytes on host, in kSwapPage units
};

struct TenantLedger {
  uint64_t magic;  // kLedgerMagic
  uint16_t major;
  uint16_t minor;
  uint32_t size;  // sizeof(TenantLedger)
  uint64_t reserved[5];
  DeviceUsage devices[kMaxDevices];
  ProcessSlot processes[kMaxProcesses];
  SlotSchedule schedule[kMaxProcesses][kMaxDevices];   // minor 2 (appended)
  std::atomic<uint64_t> host_reserved[kMaxProcesses];  // minor 6 (appended): see above
};

static_assert(sizeof(DeviceQuota) == 192);
static_assert(offsetof(DeviceQuota, memory_limit) == 56);
static_assert(offsetof(TenantQuota, generation) == 80);
static_assert(offsetof(TenantQuota, devices) == 192);
static_assert(sizeof(TenantQuota) == 192 + kMaxDevices * 192);
static_assert(sizeof(DeviceUsage) == 64);
static_assert(sizeof(ProcessSlot) == 192);
static_assert(offsetof(ProcessSlot, op_seq) == 144);
static_assert(offsetof(ProcessSlot, last_active_ns) == 152);
static_assert(offsetof(ProcessSlot, gate_progress) == 160);
static_assert(offsetof(TenantQuota, broker_heartbeat) == 96);
static_assert(offsetof(TenantQuota, ledger_incarnation) == 92);  // a futex word: 4-byte aligned
static_assert(offsetof(TenantLedger, devices) == 64);
static_assert(offsetof(TenantLedger, processes) == 64 + kMaxDevices * 64);
static_assert(offsetof(DeviceQuota, grant_word) == 100);
static_assert(offsetof(DeviceQuota, inflight_limit_us) == 104);
static_assert(offsetof(DeviceUsage, waiting) == 32);
static_assert(offsetof(DeviceUsage, burst_start_ns) == 40);
static_assert(offsetof(DeviceQuota, guard_next_ns) == 112);
static_assert(offsetof(DeviceQuota, guard_period_ns) == 120);  // same cache line as grant_word
static_assert(sizeof(SlotSchedule) == 16);
static_assert(offsetof(DeviceQuota, resident_target) == 144);
static_assert(offsetof(DeviceQuota, swap_word) == 152);
static_assert(offsetof(DeviceUsage, swapped) == 56);
static_assert(offsetof(TenantLedger, schedule) == 64 + kMaxDevices * 64 + kMaxProcesses * 192);
static_assert(offsetof(DeviceQuota, host_reserve) == 160);
static_assert(offsetof(DeviceQuota, host_allowance) == 168);
static_assert(offsetof(TenantLedger, host_reserved) ==
              64 + kMaxDevices * 64 + kMaxProcesses * 192 + kMaxProcesses * kMaxDevices * 16);
static_assert(sizeof(TenantLedger) == 64 + kMaxDevices * 64 + kMaxProcesses * 192 +
                                          kMaxProcesses * kMaxDevices * 16 + kMaxProcesses * 8);

// Whether a ledger mapping of `size` bytes (TenantLedger.size) carries host_reserved.
inline constexpr bool ledger_has_host_reserved(uint32_t size) {
  return size >= offsetof(TenantLedger, host_reserved) + sizeof(TenantLedger::host_reserved);
}

// A mapping is usable when magic and major match and it is at least as large as we expect.
inline bool quota_layout_ok(const TenantQuota& q, std::size_t mapped) {
  return mapped >= sizeof(TenantQuota) && q.magic == kQuotaMagic && q.major == kSegmentMajor &&
         q.size >= sizeof(TenantQuota) && q.device_count <= kMaxDevices;
}
// The smallest ledger a process accepts: a broker of minor 5 made it without host_reserved.
inline constexpr std::size_t kLedgerMinSize = offsetof(TenantLedger, host_reserved);
inline bool ledger_layout_ok(const TenantLedger& l, std::size_t mapped) {
  return mapped >= kLedgerMinSize && l.magic == kLedgerMagic && l.major == kSegmentMajor &&
         l.size >= kLedgerMinSize && l.size <= mapped;
}

}  // namespace fracgpu
