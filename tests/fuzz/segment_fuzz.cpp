// Fuzzer of the shared-memory segments: a tenant's quota and ledger files as a
// restarting broker finds them (damaged, zeroed, short, written by garbage, or forged by
// the tenant's processes, which map the ledger read-write). The input is
//   u16 (little-endian) Q | Q bytes: the start of the quota file | the rest: the start
//   of the ledger file (no ledger file when the rest is empty)
// and files shorter than the layout are zero-extended, as the broker does. Then, as the
// broker does: TenantSegments::open (header validation; a damaged ledger rebuilt from its
// slots, segment_recovery.h; a damaged quota re-initialised), publish of the tenant's
// spec, the start-up adoption (slot 0's process, if live, is taken as still running;
// every other live slot's process as gone: mark_dead and reclaim_dead_slots), and the
// books check with a full scan. Checked:
//  open     both headers valid; a rebuilt ledger holds only plausible live slots and
//           zeroed ones, with each counter the sum of its live slots;
//  publish  the quota says what the spec says, every grant within [request, limit];
//  reclaim  no Dead slot left;
//  books    afterwards every counter is the adopted slot's usage and every other slot
//           free, and a second check finds nothing more to repair.
// Seeds: corpus/segment/ (written by make_segment_seeds.py from the layout).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/books_check.h"
#include "core/ledger_ops.h"
#include "core/tenant_segments.h"
#include "core/tenant_spec.h"
#include "fuzz_admin_backend.h"
#include "fuzz_support.h"

namespace {

using namespace fracgpu;
using broker::TenantSegments;

constexpr int kReclaimAttempts = 8;
constexpr uint64_t kImplausible = uint64_t{1} << 50;  // segment_recovery.cpp's bound

struct Harness {
  std::filesystem::path dir = fuzz::scratch_dir() / "pods" / "t";
  std::filesystem::path ledger = fuzz::scratch_dir() / "ledgers" / "t";
  broker::GpuInventory gpus = fuzz::simulated_gpus();
  broker::TenantSpec spec;

  Harness() {
    std::filesystem::create_directories(dir);
    std::filesystem::create_directories(ledger.parent_path());
    auto parsed = broker::tenant_spec_from_json(nlohmann::json::parse(R"({"name": "t", "devices": [
      {"gpu": 0, "memory_limit": 4294967296, "memory_request": 1073741824, "swap": "allow"},
      {"gpu": 1, "memory_limit": 8589934592, "memory_request": 0, "compute": 30}]})"));
    if (!parsed) fuzz::fail("the fixed tenant does not parse: " + parsed.error());
    spec = *parsed;
    for (auto& d : spec.devices) d.uuid = gpus.find(d.gpu)->uuid;  // as admission fills in
  }
};

Harness& harness() {
  static Harness* h = new Harness();  // never destroyed: no teardown order at exit
  return *h;
}

bool slot_is_zero(const TenantLedger& ledger, uint32_t i) {
  static const unsigned char zero[sizeof(ProcessSlot)] = {};  // memcmp: one traced call
  return std::memcmp(&ledger.processes[i], zero, sizeof zero) == 0;
}

void check_rebuilt(const TenantLedger& ledger) {
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (slot_is_zero(ledger, i)) continue;
    FUZZ_CHECK(s.state.load() == static_cast<uint32_t>(SlotState::kLive) && s.pid.load() > 0,
               "slot " + std::to_string(i) + " kept by the rebuild is not a live process's");
    for (const auto& used : s.used)
      FUZZ_CHECK(used.load() <= kImplausible, "slot " + std::to_string(i) + " kept with garbage");
  }
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    const DeviceUsage& u = ledger.devices[d];
    FUZZ_CHECK(u.used.load() == broker::ledger::live_slot_sum(ledger, d),
               "device " + std::to_string(d) + ": the rebuilt counter is not its live slots' sum");
    FUZZ_CHECK(u.peak.load() >= u.used.load(), "a rebuilt peak below the counter");
  }
}

void check_published(const TenantSegments& seg, const broker::TenantSpec& spec) {
  const TenantQuota& q = seg.quota();
  FUZZ_CHECK(q.device_count == spec.devices.size(), "device_count after publish");
  for (std::size_t i = 0; i < spec.devices.size(); ++i) {
    const DeviceQuota& dq = q.devices[i];
    const broker::DeviceSpec& d = spec.devices[i];
    const std::string where = "device " + std::to_string(i) + " after publish: ";
    FUZZ_CHECK(dq.present == 1 && dq.host_index == d.gpu, where + "not present on its GPU");
    FUZZ_CHECK(
        dq.memory_limit.load() == d.memory_limit && dq.memory_request.load() == d.memory_request,
        where + "limit or request differ from the spec");
    FUZZ_CHECK(
        dq.memory_grant.load() >= d.memory_request && dq.memory_grant.load() <= d.memory_limit,
        where + "grant " + std::to_string(dq.memory_grant.load()) + " outside [request " +
            std::to_string(d.memory_request) + ", limit " + std::to_string(d.memory_limit) +
            "] (ledger used " + std::to_string(seg.ledger().devices[i].used.load()) + ")");
  }
}

// Broker::adopt_processes after a restart, with slot 0's process still running and every
// other one gone; returns the broker's record of the adopted slot.
std::vector<broker::WatchedSlot> adopt(TenantLedger& ledger) {
  std::vector<broker::WatchedSlot> watched;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (s.state.load() != static_cast<uint32_t>(SlotState::kLive)) continue;
    if (i == 0) {
      watched.push_back({0, s.pid.load(), s.start_time.load()});
    } else {
      broker::ledger::mark_dead(ledger, i);
    }
  }
  // Without live processes inside an operation the reclaim always settles.
  const bool settled = broker::ledger::reclaim_dead_slots(ledger, kReclaimAttempts);
  const bool adopted_busy = !watched.empty() && ledger.processes[0].op_seq.load() % 2 != 0;
  if (settled) {
    for (uint32_t i = 0; i < kMaxProcesses; ++i)
      FUZZ_CHECK(ledger.processes[i].state.load() != static_cast<uint32_t>(SlotState::kDead),
                 "slot " + std::to_string(i) + " still Dead after a settled reclaim");
  } else {
    FUZZ_CHECK(adopted_busy, "a reclaim with no live process inside an operation did not settle");
  }
  return watched;
}

void check_books(TenantSegments& seg, const broker::TenantSpec& spec,
                 const std::vector<broker::WatchedSlot>& watched, bool reclaim_pending) {
  Harness& h = harness();
  broker::BooksCheck books(h.gpus);
  books.note_grants(spec.name, seg.quota());  // the broker's record after its publish
  const auto now = std::chrono::steady_clock::now();
  const broker::BooksSubject subject{spec,    seg.quota(),     seg.ledger(),
                                     watched, reclaim_pending, [&] { seg.publish(spec, h.gpus); }};
  (void)books.check(subject, now);
  (void)books.check_ledger(subject, now, /*full_scan=*/true);
  const TenantLedger& ledger = seg.ledger();
  const bool busy = !watched.empty() && ledger.processes[0].op_seq.load() % 2 != 0;
  if (reclaim_pending || busy) return;  // the check waits for the reclaim / the operation
  for (uint32_t i = watched.empty() ? 0 : 1; i < kMaxProcesses; ++i)
    FUZZ_CHECK(ledger.processes[i].state.load() == static_cast<uint32_t>(SlotState::kFree),
               "slot " + std::to_string(i) + " is not the broker's and was not freed");
  for (uint32_t d = 0; d < seg.quota().device_count; ++d) {
    const uint64_t booked = watched.empty() ? 0 : ledger.processes[0].used[d].load();
    FUZZ_CHECK(ledger.devices[d].used.load() == booked,
               "device " + std::to_string(d) + ": the counter was not repaired to the booked " +
                   std::to_string(booked));
  }
  check_published(seg, spec);
  const auto again = books.check(subject, now);
  const auto again_scan = books.check_ledger(subject, now, /*full_scan=*/true);
  FUZZ_CHECK(again.empty() && again_scan.empty(),
             "repaired books still fail: " +
                 (again.empty() ? again_scan.front().detail : again.front().detail));
}

void write_or_remove(const std::filesystem::path& path, std::string_view bytes, bool present) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (present) fuzz::write_file(path, bytes);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logging();
  harness();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Harness& h = harness();
  const std::string_view input = fuzz::as_text(data, size);
  const std::size_t declared = size >= 2 ? data[0] | (std::size_t{data[1]} << 8) : 0;
  const std::string_view rest = input.substr(std::min<std::size_t>(2, size));
  const std::string_view quota = rest.substr(0, std::min(declared, sizeof(TenantQuota)));
  const std::string_view ledger = rest.substr(quota.size());
  write_or_remove(h.dir / "quota", quota, !quota.empty());
  write_or_remove(h.ledger, ledger, !ledger.empty());

  auto opened = TenantSegments::open(h.dir, h.ledger);
  FUZZ_CHECK(opened.ok(), "cannot open the tenant's own files: " + opened.error());
  TenantSegments& seg = **opened;
  FUZZ_CHECK(quota_layout_ok(seg.quota(), sizeof(TenantQuota)), "the quota header after open");
  FUZZ_CHECK(ledger_layout_ok(seg.ledger(), sizeof(TenantLedger)), "the ledger header after open");
  if (seg.ledger_rebuilt()) check_rebuilt(seg.ledger());

  seg.publish(h.spec, h.gpus);
  check_published(seg, h.spec);
  const auto watched = adopt(seg.ledger());
  bool pending = false;
  for (const ProcessSlot& s : seg.ledger().processes)
    pending = pending || s.state.load() == static_cast<uint32_t>(SlotState::kDead);
  check_books(seg, h.spec, watched, pending);
  return 0;
}
