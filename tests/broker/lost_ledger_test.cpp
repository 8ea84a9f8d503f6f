// The broker's side of a ledger lost under live processes (tenant_segment.h, "A ledger
// lost"): the bounds of a re-charge (recharge_policy.h) against a fake usage port — a
// process claiming more than the device shows it holds, or less, or more than its cap —
// and, on real segment files, a restore over a zeroed ledger that changes the incarnation
// and holds the tenant's grant for the processes that map its quota (a fake scan), the
// re-registrations through the tenant socket's handler that move it into their slots,
// and the end of the hold (everyone in, or the deadline) with books equal to the slots.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "core/event_loop.h"
#include "core/ledger_ops.h"
#include "core/ledger_reconciler.h"
#include "core/memory_arbiter.h"
#include "core/process_tracker.h"
#include "core/recharge_policy.h"
#include "core/tenant_registry.h"
#include "core/tenant_socket_server.h"
#include "temp_dir.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using nlohmann::json;
using testing::kGiB;
using testing::kMiB;
using testing::TempDir;

constexpr const char* kUuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
constexpr uint64_t kFootprint = 300 * kMiB;

class FakeUsagePort : public GpuUsagePort {
 public:
  std::vector<GpuUsageSample> sample() override {
    ++samples;
    GpuUsageSample s;
    s.uuid = kUuid;
    s.ok = readable;
    for (const auto& [pid, bytes] : holds) s.processes.push_back({pid, bytes, true});
    return {s};
  }
  std::map<pid_t, uint64_t> holds;
  bool readable = true;
  int samples = 0;
};

// --- The decision, pure ---

RechargeFacts facts(uint64_t limit = 8 * kGiB) {
  RechargeFacts f;
  f.limit = limit;
  f.device_memory = 16 * kGiB;
  f.footprint = kFootprint;
  return f;
}

TEST(RechargePolicy, WithoutADeviceFigureAClaimIsKeptUnderTheCapCountingTheOthers) {
  RechargeFacts f = facts();
  f.others = 5 * kGiB;
  RechargeDecision d = decide_recharge({2 * kGiB, 0}, f);
  EXPECT_EQ(d.used, 2 * kGiB);
  EXPECT_EQ(d.basis, RechargeBasis::kClaimed);
  d = decide_recharge({6 * kGiB, 0}, f);  // 5 + 6 > 8: the books would pass the cap
  EXPECT_EQ(d.used, 3 * kGiB);
  EXPECT_EQ(d.basis, RechargeBasis::kCap);
  f.others = 0;
  f.limit = 64 * kGiB;  // a cap above the GPU: the GPU bounds it
  d = decide_recharge({40 * kGiB, 0}, f);
  EXPECT_EQ(d.used, 16 * kGiB);
  EXPECT_EQ(d.basis, RechargeBasis::kCap);
}

TEST(RechargePolicy, AClaimNeverLowersWhatTheSlotBooks) {
  RechargeFacts f = facts();
  f.booked_used = kGiB;
  RechargeDecision d = decide_recharge({100 * kMiB, 0}, f);
  EXPECT_EQ(d.used, kGiB);
  EXPECT_EQ(d.basis, RechargeBasis::kBooked);
}

TEST(RechargePolicy, TheDevicesFigureBoundsAClaimOfMoreOrOfLess) {
  RechargeFacts f = facts();
  f.device_shows = 2 * kGiB;
  const uint64_t slack = kFootprint + recharge_tolerance(8 * kGiB);
  EXPECT_EQ(recharge_tolerance(8 * kGiB), 8 * kGiB / 100 * 2);  // 2 % beats 64 MiB here
  // More than it holds: cut to what the device shows plus what the shim cannot see.
  RechargeDecision d = decide_recharge({7 * kGiB, 0}, f);
  EXPECT_EQ(d.used, 2 * kGiB + slack);
  EXPECT_EQ(d.basis, RechargeBasis::kDevice);
  // Less (to free room for itself): raised to what the device shows, less the slack.
  d = decide_recharge({0, 0}, f);
  EXPECT_EQ(d.used, 2 * kGiB - slack);
  EXPECT_EQ(d.basis, RechargeBasis::kDevice);
  // Within the slack: the claim stands.
  d = decide_recharge({2 * kGiB + 100 * kMiB, 0}, f);
  EXPECT_EQ(d.used, 2 * kGiB + 100 * kMiB);
  EXPECT_EQ(d.basis, RechargeBasis::kClaimed);
  // The device's figure may exceed the cap (the audit reports that); the claim then is not
  // cut to the cap but to the device.
  f.device_shows = 9 * kGiB;
  d = decide_recharge({9 * kGiB, 0}, f);
  EXPECT_EQ(d.used, 9 * kGiB);
}

TEST(RechargePolicy, BytesOnHostAreWholePagesWithinWhatTheCapLeaves) {
  RechargeFacts f = facts(kGiB);
  f.host_allowance = kGiB;  // the broker had let it move up to its cap (swap_books.h)
  RechargeDecision d = decide_recharge({512 * kMiB, 5 * kSwapPage + 1}, f);
  EXPECT_EQ(d.swapped, 5 * kSwapPage);
  d = decide_recharge({768 * kMiB, kGiB}, f);  // the cap leaves 256 MiB beside 768
  EXPECT_EQ(d.swapped, 256 * kMiB);
}

TEST(RechargePolicy, TheUsagePortsFigureForOnePidOnOneGpu) {
  FakeUsagePort port;
  port.holds = {{100, 3 * kGiB}, {200, kGiB}};
  const auto samples = port.sample();
  EXPECT_EQ(device_usage_of(samples, 100, kUuid), 3 * kGiB);
  EXPECT_EQ(device_usage_of(samples, 300, kUuid), 0u);  // no context there: holds nothing
  EXPECT_EQ(device_usage_of(samples, 100, "GPU-other"), std::nullopt);
  port.readable = false;
  EXPECT_EQ(device_usage_of(port.sample(), 100, kUuid), std::nullopt);
}

// --- A lost ledger, end to end inside the broker's objects ---

GpuInventory one_gpu() {
  GpuInventory inv;
  inv.gpus.push_back({0, kUuid, "sim", 16 * kGiB, kFootprint});
  return inv;
}

// A child that only waits: "a live process of the tenant" with a pid of its own.
struct Sleeper {
  pid_t pid = -1;
  Sleeper() {
    pid = ::fork();
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  void stop() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~Sleeper() { stop(); }
};

class LostLedgerBooks : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(config.state_dir);
    {
      auto r = make_registry();
      auto t = r->create(
          json{{"name", "a"},
               {"devices", {{{"gpu", 0}, {"memory_limit", 8 * kGiB}, {"memory_request", kGiB}}}}});
      ASSERT_TRUE(t.ok()) << t.error();
      (*t)->quota().devices[0].memory_grant = 4 * kGiB;  // it had borrowed
      incarnation_before = (*t)->quota().ledger_incarnation.load();
    }
    // The wipe: every byte of the ledger, slots included, while "the broker is stopped".
    const auto path = config.run_dir / "ledgers" / "a";
    const int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const std::vector<char> zeros(sizeof(TenantLedger), 0);
    ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), 0), static_cast<ssize_t>(zeros.size()));
    ::close(fd);
    registry = make_registry();
    ASSERT_TRUE(registry->restore(RestoreOptions{.keep_going = false}).ok());
    tenant = registry->find("a");
    ASSERT_NE(tenant, nullptr);
    reconciler = std::make_unique<LedgerReconciler>(
        *registry, [this](const std::vector<FileIdentity>& files) {
          std::map<FileIdentity, std::vector<MappingProcess>> out;
          for (const FileIdentity& f : files) out[f] = mappers;
          ++scans;
          return out;
        });
    tracker = std::make_unique<ProcessTracker>(
        loop, [this](const std::string& name, uint32_t slot, pid_t) {
          if (Tenant* t = registry->find(name)) reconciler->process_died(*t, slot);
        });
    server = std::make_unique<TenantSocketServer>(
        loop, TenantServices{*registry, *tracker, *reconciler, arbiter, nullptr, nullptr, usage},
        "a");
  }

  std::unique_ptr<TenantRegistry> make_registry() {
    auto r = std::make_unique<TenantRegistry>(config, gpus);
    EXPECT_TRUE(r->prepare().ok());
    return r;
  }
  MappingProcess process(pid_t pid) { return {pid, *process_start_time(pid)}; }
  json call(pid_t pid, const json& request) {
    Peer peer;
    peer.cred.pid = pid;
    peer.cred.uid = ::geteuid();
    json reply = server->handle(peer, request);
    if (peer.pending_fd >= 0) ::close(peer.pending_fd);  // LineServer would send it
    return reply;
  }
  TenantLedger& ledger() { return tenant->ledger(); }
  uint64_t used() { return ledger().devices[0].used.load(); }

  TempDir dir;
  GpuInventory gpus = one_gpu();
  RegistryConfig config{dir.path() / "run", dir.path() / "state", 0};
  uint32_t incarnation_before = 0;
  std::unique_ptr<TenantRegistry> registry;
  Tenant* tenant = nullptr;
  std::vector<MappingProcess> mappers;
  int scans = 0;
  EventLoop loop;  // never run: the tracker's pidfds are registered, not polled
  MemoryArbiter arbiter{{16 * kGiB}};
  GpuUsagePort* usage = nullptr;
  std::unique_ptr<LedgerReconciler> reconciler;
  std::unique_ptr<ProcessTracker> tracker;
  std::unique_ptr<TenantSocketServer> server;
};

TEST_F(LostLedgerBooks,
       TheRebuildChangesTheIncarnationAndHoldsTheGrantForTheProcessesThatMapTheQuota) {
  EXPECT_TRUE(tenant->segments->ledger_rebuilt());
  EXPECT_NE(tenant->quota().ledger_incarnation.load(), incarnation_before);
  EXPECT_NE(tenant->quota().ledger_incarnation.load(), 0u);
  EXPECT_EQ(used(), 0u);  // the wipe: nothing counted
  Sleeper other;
  mappers = {process(::getpid()), process(other.pid)};
  reconciler->reconcile(*tenant);  // what the broker's start does for each tenant
  EXPECT_EQ(scans, 1);
  EXPECT_TRUE(reconciler->pending("a"));
  auto view = reconciler->rebuilds().view("a");
  ASSERT_TRUE(view);
  ASSERT_TRUE(view->placeholder);
  EXPECT_EQ(*view->placeholder, kMaxProcesses - 1);  // from the top: old slots stay free
  EXPECT_EQ(view->held[0], 4 * kGiB);
  EXPECT_EQ(view->waiting, 2u);
  EXPECT_EQ(used(), 4 * kGiB);  // the grant stays counted: no room freed for anyone
  const auto& p = ledger().processes[*view->placeholder];
  EXPECT_EQ(p.pid.load(), 0);
  EXPECT_EQ(p.used[0].load(), 4 * kGiB);
  reconciler->reconcile(*tenant);  // later reconciles do not scan again
  EXPECT_EQ(scans, 1);
}

TEST_F(LostLedgerBooks, ReRegistrationsMoveTheHoldIntoTheirSlotsAndTheLastOneEndsIt) {
  Sleeper other;
  mappers = {process(::getpid()), process(other.pid)};
  reconciler->reconcile(*tenant);
  // This process comes back to its old slot 2 with 3 GiB (no device figure: the claim
  // stands, it is under the cap).
  json reply = call(::getpid(), {{"op", "register"},
                                 {"protocol", 2},
                                 {"slot", 2},
                                 {"holdings", {{{"device", 0}, {"used", 3 * kGiB}}}}});
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(reply["slot"], 2);
  EXPECT_EQ(reply["recharged"][0]["used"], 3 * kGiB);
  EXPECT_EQ(reply["recharged"][0]["basis"], "claimed");
  EXPECT_EQ(ledger().processes[2].used[0].load(), 3 * kGiB);
  auto view = reconciler->rebuilds().view("a");
  ASSERT_TRUE(view);
  EXPECT_EQ(view->held[0], kGiB);  // 4 GiB held, 3 of them now in slot 2
  EXPECT_EQ(used(), 4 * kGiB);
  // A new process registering meanwhile takes a slot from the top, not an old one.
  Sleeper newcomer;
  reply = call(newcomer.pid, {{"op", "register"}, {"protocol", 2}});
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(reply["slot"], kMaxProcesses - 2);
  EXPECT_FALSE(reply.contains("recharged"));
  // The other process comes back with 512 MiB: the hold is over, the books are its slots.
  reply = call(other.pid, {{"op", "register"},
                           {"protocol", 2},
                           {"slot", 0},
                           {"holdings", {{{"device", 0}, {"used", 512 * kMiB}}}}});
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(reply["slot"], 0);
  EXPECT_FALSE(reconciler->pending("a"));
  EXPECT_EQ(used(), 3 * kGiB + 512 * kMiB);
  EXPECT_EQ(ledger::live_process_count(ledger()), 3u);  // no placeholder left
  EXPECT_EQ(ledger().processes[kMaxProcesses - 1].state.load(),
            static_cast<uint32_t>(SlotState::kFree));
}

TEST_F(LostLedgerBooks, AProcessThatExitsOrNeverComesBackEndsTheHoldToo) {
  Sleeper gone, silent;
  mappers = {process(gone.pid), process(silent.pid)};
  reconciler->reconcile(*tenant);
  ASSERT_EQ(used(), 4 * kGiB);
  gone.stop();
  reconciler->tick();
  auto view = reconciler->rebuilds().view("a");
  ASSERT_TRUE(view);
  EXPECT_EQ(view->waiting, 1u);  // the one that exited is not waited for
  EXPECT_EQ(used(), 4 * kGiB);
  // `silent` never re-registers (a shim older than the incarnation): released at the deadline.
  reconciler->rebuilds().tick(*registry, LedgerRebuilds::Clock::now() + LedgerRebuilds::kDeadline);
  EXPECT_FALSE(reconciler->pending("a"));
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(ledger::live_process_count(ledger()), 0u);
}

TEST_F(LostLedgerBooks, NoProcessMappingTheQuotaMeansNothingToHold) {
  mappers = {};
  reconciler->reconcile(*tenant);
  EXPECT_EQ(scans, 1);
  EXPECT_FALSE(reconciler->pending("a"));
  EXPECT_EQ(used(), 0u);
}

// Zeroed under the running broker: found by the once-a-second header check, rebuilt with
// a new incarnation every time, but held at most once a minute (whoever zeroes it may be
// the tenant, and a hold keeps the books check off its ledger).
TEST_F(LostLedgerBooks, AHeaderZeroedWhileRunningIsRebuiltEachTimeAndHeldOnceAMinute) {
  mappers = {};
  reconciler->reconcile(*tenant);  // the start: nothing to hold
  Sleeper other;
  mappers = {process(other.pid)};
  auto zero_header_and_look = [&] {
    std::memset(static_cast<void*>(&ledger()), 0, offsetof(TenantLedger, devices));
    for (unsigned i = 0; i < LedgerReconciler::kHeaderCheckEvery; ++i) reconciler->tick();
    return tenant->quota().ledger_incarnation.load();
  };
  const uint32_t first = tenant->quota().ledger_incarnation.load();
  const uint32_t second = zero_header_and_look();
  EXPECT_NE(second, first);
  EXPECT_TRUE(ledger_layout_ok(ledger(), sizeof(TenantLedger)));
  EXPECT_TRUE(reconciler->pending("a"));
  EXPECT_EQ(used(), 4 * kGiB);
  reconciler->rebuilds().tick(*registry, LedgerRebuilds::Clock::now() + LedgerRebuilds::kDeadline);
  ASSERT_FALSE(reconciler->pending("a"));
  const uint32_t third = zero_header_and_look();
  EXPECT_NE(third, second);
  EXPECT_TRUE(ledger_layout_ok(ledger(), sizeof(TenantLedger)));
  EXPECT_FALSE(reconciler->pending("a"));
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(scans, 2);
}

class LostLedgerBooksWithNvml : public LostLedgerBooks {
 protected:
  void SetUp() override {
    usage = &port;
    LostLedgerBooks::SetUp();
  }
  FakeUsagePort port;
};

TEST_F(LostLedgerBooksWithNvml, ALyingProcessIsChargedWhatTheDeviceShowsItHolds) {
  Sleeper liar_low;
  mappers = {process(::getpid()), process(liar_low.pid)};
  reconciler->reconcile(*tenant);
  const uint64_t slack = kFootprint + recharge_tolerance(8 * kGiB);
  port.holds = {{::getpid(), kGiB}, {liar_low.pid, 2 * kGiB}};
  // Claims 6 GiB (to take room from others): charged the device's 1 GiB + slack.
  json reply = call(::getpid(), {{"op", "register"},
                                 {"protocol", 2},
                                 {"slot", 1},
                                 {"holdings", {{{"device", 0}, {"used", 6 * kGiB}}}}});
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(reply["recharged"][0]["basis"], "device");
  EXPECT_EQ(ledger().processes[1].used[0].load(), kGiB + slack);
  EXPECT_EQ(port.samples, 1);  // one sample per re-registration
  // Claims nothing (to free room for itself): charged 2 GiB - slack.
  reply = call(liar_low.pid, {{"op", "register"},
                              {"protocol", 2},
                              {"slot", 4},
                              {"holdings", {{{"device", 0}, {"used", 0}}}}});
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(reply["recharged"][0]["basis"], "device");
  EXPECT_EQ(ledger().processes[4].used[0].load(), 2 * kGiB - slack);
  EXPECT_FALSE(reconciler->pending("a"));
  EXPECT_EQ(used(), kGiB + slack + 2 * kGiB - slack);
}

// Issue 27, row 2: a claim of bytes on host the broker never let the tenant move books
// nothing on host; one within what it let move (DeviceQuota.host_allowance, kept in the quota
// across the ledger's loss) is booked, less what the tenant's other processes book there.
TEST_F(LostLedgerBooks, AClaimOfBytesOnHostIsBoundedByWhatTheBrokerLetTheTenantMove) {
  ASSERT_EQ(tenant->quota().devices[0].host_allowance.load(), 0u);
  json reply =
      call(::getpid(), {{"op", "register"},
                        {"protocol", 2},
                        {"slot", 1},
                        {"holdings", {{{"device", 0}, {"used", 0}, {"swapped", 896 * kMiB}}}}});
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(reply["recharged"][0]["swapped"], 0u);
  EXPECT_EQ(ledger().devices[0].swapped.load(), 0u) << "no host memory booked for it";
  EXPECT_EQ(ledger().schedule[1][0].swapped_pages.load(), 0u);
  // The broker had let the tenant move 512 MiB; this process's 384 MiB are booked, and a
  // second process claiming 896 MiB more gets what is left of the 512: 128 MiB.
  tenant->quota().devices[0].host_allowance = 512 * kMiB;
  reply = call(::getpid(), {{"op", "register"},
                            {"protocol", 2},
                            {"slot", 1},
                            {"holdings", {{{"device", 0}, {"used", 0}, {"swapped", 384 * kMiB}}}}});
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(reply["recharged"][0]["swapped"], 384 * kMiB);
  Sleeper other;
  reply = call(other.pid, {{"op", "register"},
                           {"protocol", 2},
                           {"holdings", {{{"device", 0}, {"used", 0}, {"swapped", 896 * kMiB}}}}});
  ASSERT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(reply["recharged"][0]["swapped"], 128 * kMiB);
  EXPECT_EQ(ledger().devices[0].swapped.load(), 512 * kMiB);
}

TEST_F(LostLedgerBooks, MalformedHoldingsAreRefusedWithASentenceAndClaimNothing) {
  for (const json& holdings : {json("x"), json{{{"device", 5}, {"used", 1}}}, json{{{"device", 0}}},
                               json{{{"device", 0}, {"used", -4}}},
                               json{{{"device", 0}, {"used", 1}}, {{"device", 0}, {"used", 2}}}}) {
    json reply = call(::getpid(), {{"op", "register"}, {"protocol", 2}, {"holdings", holdings}});
    EXPECT_FALSE(reply["ok"].get<bool>()) << holdings.dump();
    EXPECT_NE(reply.value("error", "").find("holdings"), std::string::npos) << reply.dump();
  }
  json reply = call(::getpid(), {{"op", "register"}, {"protocol", 2}, {"slot", 9999}});
  EXPECT_FALSE(reply["ok"].get<bool>());
  EXPECT_EQ(ledger::live_process_count(ledger()), 0u);
}

}  // namespace
}  // namespace fracgpu::broker
