// A tenant's ledger lost under processes that keep running and holding device memory
// (tenant_segment.h, "A ledger lost"), end to end: the real broker and CLI, holders with
// the shim preloaded over the simulated GPU (64 MiB per context), a tenant capped at
// 2 GiB. The broker is stopped, the ledger file zeroed (slots and all), truncated, or
// deleted, and the broker started again; the holders make no CUDA call after their one
// allocation. Afterwards the books (`fracgpu status` through the admin socket, and the
// ledger file itself) show what they hold, and a new process of the tenant can allocate
// only what the cap leaves beside it — not the whole cap, as when the broker forgot it.
// Also a ledger zeroed under the running broker. Timing: the recount within 1 s of the
// broker's start is `timing` (state.cmake); the other tests bound only hangs.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "broker_fixture.h"
#include "client/admin_client.h"

namespace fracgpu::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint64_t kFootprint = 64 * kMiB;  // FAKECUDA_CONTEXT_FOOTPRINT, charged per context
constexpr uint64_t kLimit = 2 * kGiB;

class LostLedger : public BrokerFixture {
 protected:
  void SetUp() override {
    BrokerFixture::SetUp();
    create_tenant("lost", "2GiB", "512MiB");
  }

  json tenant(const std::string& name) {
    auto client = client::AdminClient::connect(run_dir(), std::chrono::seconds(5));
    if (!client) return json();
    auto reply = client->call({{"op", "list"}});
    if (!reply) return json();
    for (const auto& t : reply->value("tenants", json::array()))
      if (t.value("name", "") == name) return t;
    return json();
  }
  uint64_t used() {
    const json t = tenant("lost");
    if (!t.contains("devices") || t["devices"].empty()) return 0;
    return t["devices"][0].value("memory_used", uint64_t{0});
  }
  // What `fracgpu status` lists for `pid` on GPU 0 (0 when it is not listed).
  uint64_t listed(pid_t pid) {
    const json t = tenant("lost");
    if (!t.is_object()) return 0;
    for (const auto& p : t.value("processes", json::array()))
      if (p.value("pid", 0) == pid) return p["memory_used"][0].get<uint64_t>();
    return 0;
  }
  std::string ledger_file() const { return run_dir() + "/ledgers/lost"; }

  // A holder of `bytes` (plus its context's footprint), counted before it returns.
  std::unique_ptr<BackgroundProcess> hold(uint64_t bytes, uint64_t used_after) {
    auto p = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(bytes)},
        tenant_env("lost"), dir_.path() + "/holder-" + std::to_string(holders_++));
    EXPECT_EQ(p->wait_until_ready([&] { return used() == used_after; }, std::chrono::seconds(10)),
              "");
    return p;
  }

  // What a new process of the tenant can allocate in 64 MiB chunks before it is refused.
  uint64_t fill() {
    ProcessResult r = run_process(
        {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(64 * kMiB)}, tenant_env("lost"));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return last_json_line(r.out).value("allocated", uint64_t{0});
  }

  void zero_ledger() {
    const int fd = ::open(ledger_file().c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << ledger_file();
    const std::vector<char> zeros(sizeof(TenantLedger), 0);
    ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), 0), static_cast<ssize_t>(zeros.size()));
    ::close(fd);
  }

  std::string broker_log() const {
    return read_text(dir_.path() + "/broker-" + std::to_string(broker_starts_) + ".log");
  }

  int holders_ = 0;
};

// 256 MiB and 512 MiB held (+ 64 MiB of context each): 896 MiB of the 2 GiB cap.
constexpr uint64_t kHeld = 256 * kMiB + kFootprint + 512 * kMiB + kFootprint;
// What the cap leaves a new process beside them: its own context, then 64 MiB chunks.
constexpr uint64_t kRoomLeft = (kLimit - kHeld - kFootprint) / (64 * kMiB) * (64 * kMiB);
static_assert(kRoomLeft == 1088 * kMiB);

TEST_F(LostLedger, AZeroedLedgerIsRecountedWithinASecondAndTheCapCountsIt) {
  auto a = hold(256 * kMiB, 256 * kMiB + kFootprint);
  auto b = hold(512 * kMiB, kHeld);
  kill_broker();
  zero_ledger();  // every slot and counter gone; the holders run on
  const auto restart = Clock::now();
  start_broker();  // returns once the broker says it is ready
  const milliseconds took = wait_until([&] { return used() == kHeld; }, milliseconds(10000));
  std::printf(
      "[ lost ledger ] zeroed: books back to %llu MiB %lld ms after the broker was ready "
      "(%lld ms after its start)\n",
      static_cast<unsigned long long>(used() / kMiB), static_cast<long long>(took.count()),
      static_cast<long long>(
          std::chrono::duration_cast<milliseconds>(Clock::now() - restart).count()));
  ASSERT_EQ(used(), kHeld) << tenant("lost").dump();
  EXPECT_LE(took.count(), 1000);
  EXPECT_EQ(listed(a->pid()), 256 * kMiB + kFootprint);
  EXPECT_EQ(listed(b->pid()), 512 * kMiB + kFootprint);
  // The cap counts what they hold: 1088 MiB fit, not the 1984 MiB of an empty tenant.
  EXPECT_EQ(fill(), kRoomLeft);
  EXPECT_EQ(used(), kHeld);  // the filler's memory is back, the holders' still counted
  const std::string log = broker_log();
  EXPECT_NE(log.find("holding"), std::string::npos) << log;
  EXPECT_NE(log.find("rebuild settled (2 process(es) re-registered"), std::string::npos) << log;
  EXPECT_TRUE(a->running());
  EXPECT_TRUE(b->running());
}

TEST_F(LostLedger, ADeletedLedgerIsCreatedAnewAndItsProcessesCountInTheNewFile) {
  auto a = hold(256 * kMiB, 256 * kMiB + kFootprint);
  auto b = hold(512 * kMiB, kHeld);
  kill_broker();
  ASSERT_EQ(::unlink(ledger_file().c_str()), 0);  // they keep the old file mapped
  start_broker();
  ASSERT_EQ(wait_until([&] { return used() == kHeld; }, milliseconds(10000)).count() < 10000, true)
      << tenant("lost").dump() << broker_log();
  EXPECT_EQ(listed(a->pid()), 256 * kMiB + kFootprint);
  EXPECT_EQ(listed(b->pid()), 512 * kMiB + kFootprint);
  // The file at the path is the broker's new one, and it holds their slots.
  const TenantLedger* l = ledger("lost");
  ASSERT_NE(l, nullptr);
  uint64_t in_slots = 0;
  for (const ProcessSlot& s : l->processes)
    if (s.pid.load() == a->pid() || s.pid.load() == b->pid()) in_slots += s.used[0].load();
  EXPECT_EQ(in_slots, kHeld);
  EXPECT_EQ(l->devices[0].used.load(), kHeld);
  ::munmap(const_cast<TenantLedger*>(l), sizeof(TenantLedger));
  EXPECT_EQ(fill(), kRoomLeft);
  EXPECT_EQ(used(), kHeld);
}

TEST_F(LostLedger, ATruncatedLedgerIsRebuiltAndAnIdleProcessIsCountedWithoutCrashingIt) {
  auto a = hold(512 * kMiB, 512 * kMiB + kFootprint);
  kill_broker();
  ASSERT_EQ(::truncate(ledger_file().c_str(), 0), 0);
  // Longer than the shim's 500 ms look: its watch meets the truncated file (and must not
  // fault on it) before there is a broker to re-register with.
  std::this_thread::sleep_for(milliseconds(1200));
  ASSERT_TRUE(a->running()) << a->err();
  start_broker();
  wait_until([&] { return used() == 512 * kMiB + kFootprint; }, milliseconds(10000));
  EXPECT_EQ(used(), 512 * kMiB + kFootprint) << tenant("lost").dump() << broker_log();
  EXPECT_EQ(listed(a->pid()), 512 * kMiB + kFootprint);
  EXPECT_EQ(fill(), (kLimit - 512 * kMiB - 2 * kFootprint) / (64 * kMiB) * (64 * kMiB));
  EXPECT_TRUE(a->running()) << a->err();
  EXPECT_NE(a->err().find("truncated"), std::string::npos) << a->err();
}

TEST_F(LostLedger, ALedgerZeroedUnderTheRunningBrokerIsRebuiltAndRecounted) {
  auto a = hold(256 * kMiB, 256 * kMiB + kFootprint);
  auto b = hold(512 * kMiB, kHeld);
  zero_ledger();
  // The holders find their slots gone (their watch looks every 500 ms) and re-register; the
  // broker rebuilds the header at the first of them (or at its once-a-second look).
  const TenantLedger* l = ledger("lost");
  ASSERT_NE(l, nullptr);
  wait_until(
      [&] {
        return l->magic == kLedgerMagic && used() == kHeld && listed(a->pid()) > 0 &&
               listed(b->pid()) > 0;
      },
      milliseconds(10000));
  EXPECT_EQ(l->magic, kLedgerMagic);
  ::munmap(const_cast<TenantLedger*>(l), sizeof(TenantLedger));
  EXPECT_EQ(used(), kHeld) << tenant("lost").dump() << broker_log();
  EXPECT_EQ(listed(a->pid()), 256 * kMiB + kFootprint);
  EXPECT_EQ(listed(b->pid()), 512 * kMiB + kFootprint);
  // The books check saw the zeroed slots first and flagged the tenant (its bursts are
  // refused for a while): what a new process gets is bounded by the grant, never more than
  // the cap leaves beside the holders.
  EXPECT_LE(fill(), kRoomLeft);
  EXPECT_EQ(used(), kHeld);
  EXPECT_NE(broker_log().find("while the broker ran"), std::string::npos) << broker_log();
}

}  // namespace
}  // namespace fracgpu::testing
