// Tenant processes against a real broker: registration by SO_PEERCRED pid, reclaim of
// a SIGKILLed process's memory within one second (also when killed mid-allocation, 100
// times over), bursts through the socket, and processes that outlive a broker SIGKILL.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "broker_harness.h"
#include "core/process_tracker.h"

namespace fracgpu::test {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FRACGPU_REQUIRE_FAKE_DRIVER();
    ASSERT_TRUE(broker.start()) << broker.log();
    ASSERT_TRUE(broker.create_tenant("t", 8 * kGiB, 4 * kGiB)) << broker.log();
  }
  BrokerProcess broker;
};

TEST_F(ProcessTest, RegisterRecordsTheRealPid) {
  TenantProcess child(broker.tenant_dir("t"), 0);
  ASSERT_TRUE(child.ok()) << (child.reply() ? child.reply()->dump() : "no reply") << broker.log();
  const json& reply = *child.reply();
  EXPECT_EQ(reply["protocol"], 2);
  EXPECT_EQ(reply["tenant"], "t");
  EXPECT_EQ(reply["quota"], "quota");
  EXPECT_EQ(reply["ledger_fd"], true);  // the child mapped the descriptor (ok() says so)
  EXPECT_FALSE(reply.contains("ledger"));
  LedgerView ledger(broker.tenant_dir("t"));
  ASSERT_TRUE(ledger.valid());
  const ProcessSlot& slot = ledger->processes[child.slot()];
  EXPECT_EQ(slot.pid.load(), child.pid());
  EXPECT_EQ(slot.state.load(), static_cast<uint32_t>(SlotState::kLive));
  EXPECT_GT(slot.start_time.load(), 0u);
  auto status = broker.tenant_status("t");
  ASSERT_TRUE(status);
  ASSERT_EQ((*status)["processes"].size(), 1u);
  EXPECT_EQ((*status)["processes"][0]["pid"], child.pid());
}

TEST_F(ProcessTest, SigkillReclaimsWithinOneSecond) {
  TenantProcess child(broker.tenant_dir("t"), 3 * kGiB);
  ASSERT_TRUE(child.ok()) << broker.log();
  LedgerView ledger(broker.tenant_dir("t"));
  ASSERT_EQ(ledger->devices[0].used.load(), 3 * kGiB);
  const uint32_t slot = child.slot();
  child.kill9();
  EXPECT_TRUE(wait_until([&] { return ledger->devices[0].used.load() == 0; }, milliseconds(1000)))
      << broker.log();
  EXPECT_EQ(ledger->processes[slot].state.load(), static_cast<uint32_t>(SlotState::kFree));
  EXPECT_EQ(ledger->processes[slot].used[0].load(), 0u);
}

TEST_F(ProcessTest, KilledMidAllocationHundredTimes) {
  TenantProcess holder(broker.tenant_dir("t"), 1 * kGiB);  // an idle survivor: exact truth
  ASSERT_TRUE(holder.ok()) << broker.log();
  LedgerView ledger(broker.tenant_dir("t"));
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) {
    TenantProcess victim(broker.tenant_dir("t"), 0, /*churn=*/true);
    ASSERT_TRUE(victim.ok()) << "iteration " << i << ": " << broker.log();
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    victim.kill9();
    ASSERT_TRUE(
        wait_until([&] { return ledger->devices[0].used.load() == kGiB; }, milliseconds(1000)))
        << "iteration " << i << ": used " << ledger->devices[0].used.load();
  }
  EXPECT_EQ(ledger->processes[holder.slot()].pid.load(), holder.pid());
}

TEST_F(ProcessTest, BurstRaisesGrantUpToTheLimit) {
  LineClient client(broker.tenant_dir("t") / "broker.sock");
  auto reply = client.request({{"op", "burst"}, {"device", 0}, {"bytes", 5 * kGiB}});
  ASSERT_TRUE(reply);
  ASSERT_EQ((*reply)["ok"], true) << reply->dump();
  EXPECT_EQ((*reply)["grant"], 5 * kGiB + 256 * kMiB);
  auto over = client.request({{"op", "burst"}, {"device", 0}, {"bytes", 9 * kGiB}});
  ASSERT_TRUE(over);
  EXPECT_EQ((*over)["ok"], false);
  EXPECT_NE((*over)["error"].get<std::string>().find("memory limit"), std::string::npos);
  // The idle burst is reclaimed back to the request within a couple of seconds.
  EXPECT_TRUE(wait_until(
      [&] {
        auto s = broker.tenant_status("t");
        return s && (*s)["devices"][0]["memory_grant"] == 4 * kGiB;
      },
      milliseconds(3000)));
}

TEST_F(ProcessTest, ProcessOutlivesBrokerSigkill) {
  TenantProcess child(broker.tenant_dir("t"), 2 * kGiB);
  ASSERT_TRUE(child.ok()) << broker.log();
  broker.kill9();
  ASSERT_TRUE(broker.start()) << broker.log();
  auto status = broker.tenant_status("t");
  ASSERT_TRUE(status) << broker.log();
  EXPECT_EQ((*status)["devices"][0]["memory_limit"], 8 * kGiB);
  EXPECT_EQ((*status)["devices"][0]["memory_used"], 2 * kGiB);  // counters intact
  ASSERT_EQ((*status)["processes"].size(), 1u);
  EXPECT_EQ((*status)["processes"][0]["pid"], child.pid());  // re-attached
  LedgerView ledger(broker.tenant_dir("t"));
  child.kill9();  // still watched by the new broker
  EXPECT_TRUE(wait_until([&] { return ledger->devices[0].used.load() == 0; }, milliseconds(1000)))
      << broker.log();
  EXPECT_TRUE(wait_until(
      [&] {
        auto s = broker.tenant_status("t");
        return s && (*s)["processes"].empty();
      },
      milliseconds(1000)));
}

// Issue 27 (a slot's pid and start time are the tenant's to write): while no broker runs,
// tenant t writes a Live slot naming tenant v's process, with its true start time, and books
// 2 GiB in it. The restarted broker does not re-attach that slot (the process does not hold
// t's ledger, file_mappers.h): t's books drop the forgery, the process stays v's alone.
// Against the old adoption (pid and start time only) t listed v's process as its own.
TEST_F(ProcessTest, AForgedSlotNamingAnotherTenantsProcessIsNotReattachedAfterARestart) {
  ASSERT_TRUE(broker.create_tenant("v", 8 * kGiB, 4 * kGiB)) << broker.log();
  TenantProcess victim(broker.tenant_dir("v"), 1 * kGiB);
  ASSERT_TRUE(victim.ok()) << broker.log();
  TenantProcess own(broker.tenant_dir("t"), 1 * kGiB);  // t's honest process: re-attached
  ASSERT_TRUE(own.ok()) << broker.log();
  broker.kill9();

  const std::string path = broker.ledger_path("t").string();
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  void* map = ::mmap(nullptr, sizeof(TenantLedger), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(map, MAP_FAILED);
  auto* forged = static_cast<TenantLedger*>(map);
  uint32_t slot = 0;
  while (slot < kMaxProcesses && forged->processes[slot].state.load() != 0) ++slot;
  ASSERT_LT(slot, kMaxProcesses);
  const auto start = broker::process_start_time(victim.pid());
  ASSERT_TRUE(start);
  ProcessSlot& s = forged->processes[slot];
  s.pid = victim.pid();
  s.start_time = *start;
  s.used[0] = 2 * kGiB;
  forged->devices[0].used.fetch_add(2 * kGiB);  // consistent: the books check agrees
  s.state = static_cast<uint32_t>(SlotState::kLive);

  ASSERT_TRUE(broker.start()) << broker.log();
  EXPECT_NE(broker.log().find("which does not hold this tenant's ledger"), std::string::npos)
      << broker.log();
  auto t = broker.tenant_status("t");
  ASSERT_TRUE(t) << broker.log();
  ASSERT_EQ((*t)["processes"].size(), 1u) << t->dump();
  EXPECT_EQ((*t)["processes"][0]["pid"], own.pid()) << "only its own process";
  EXPECT_EQ((*t)["devices"][0]["memory_used"], 1 * kGiB) << "the forged 2 GiB are gone";
  EXPECT_EQ(s.state.load(), static_cast<uint32_t>(SlotState::kFree));
  auto v = broker.tenant_status("v");
  ASSERT_TRUE(v);
  ASSERT_EQ((*v)["processes"].size(), 1u);
  EXPECT_EQ((*v)["processes"][0]["pid"], victim.pid());
  ::munmap(map, sizeof(TenantLedger));
}

TEST_F(ProcessTest, DeathWhileBrokerIsDownIsReclaimedAtStart) {
  TenantProcess child(broker.tenant_dir("t"), 2 * kGiB);
  ASSERT_TRUE(child.ok()) << broker.log();
  broker.kill9();
  child.kill9();
  ASSERT_TRUE(broker.start()) << broker.log();
  LedgerView ledger(broker.tenant_dir("t"));
  EXPECT_EQ(ledger->devices[0].used.load(), 0u);
  auto status = broker.tenant_status("t");
  ASSERT_TRUE(status);
  EXPECT_TRUE((*status)["processes"].empty());
}

TEST_F(ProcessTest, ReRegisterAfterRestartReusesTheSlot) {
  TenantProcess child(broker.tenant_dir("t"), 0);
  ASSERT_TRUE(child.ok());
  // A second registration from the same process (what a shim does after a broker
  // restart) gets the same slot: simulated here from the test process itself.
  LineClient first(broker.tenant_dir("t") / "broker.sock");
  auto a = first.request({{"op", "register"}, {"protocol", 2}});
  broker.kill9();
  ASSERT_TRUE(broker.start()) << broker.log();
  LineClient second(broker.tenant_dir("t") / "broker.sock");
  auto b = second.request({{"op", "register"}, {"protocol", 2}});
  ASSERT_TRUE(a && b);
  ASSERT_EQ((*a)["ok"], true);
  ASSERT_EQ((*b)["ok"], true);
  EXPECT_EQ((*a)["slot"], (*b)["slot"]);
  EXPECT_NE((*a)["slot"], child.slot());
}

}  // namespace
}  // namespace fracgpu::test
