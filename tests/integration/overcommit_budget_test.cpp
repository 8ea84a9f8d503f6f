// The node's host budget for swapped memory, end to end (`fracgpu broker
// --swap-host-budget 256MiB` over the simulated 4 GiB GPU): a guarantee that needs 512 MiB
// of a borrower's memory moved does not get it moved at all (nothing beyond the budget ever
// reaches host memory) and the borrower is reported; one that needs 192 MiB gets them; a
// further 128 MiB would take the host to 320 MiB and is refused and reported again. The
// borrower's data is intact throughout and all of it comes back.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "overcommit_fixture.h"

namespace fracgpu::testing {
namespace {

constexpr uint64_t kBudget = 256 * kMiB;
constexpr uint64_t kBorrowed = 1 * kGiB;
constexpr uint64_t kChunk = 64 * kMiB;

class OvercommitBudget : public OvercommitFixture {
 protected:
  void SetUp() override {
    OvercommitFixture::SetUp();
    kill_broker();
    // --reclaim report (the default before issue 27): a borrower refused for the budget is
    // only reported here, so that the later, smaller demands can be watched.
    extra_broker_args_ = {"--swap-host-budget", "256MiB", "--reclaim", "report"};
    start_broker();
  }
  std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  // The forger: tenant "forger" (`memory`, `request`) with one process holding 2 MiB beside
  // its context, ready when it returns (or the test has failed).
  std::unique_ptr<BackgroundProcess> start_forger(const std::string& memory,
                                                  const std::string& request) {
    tenant("forger", memory, request);
    auto writer = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(2 * kMiB)},
        tenant_env("forger"), file("forger-hold"));
    EXPECT_EQ(writer->wait_until_ready(
                  [&] { return writer->out().find("\"holding\"") != std::string::npos; },
                  std::chrono::seconds(15)),
              "");
    return writer;
  }
  // The Live slot of `pid` (kMaxProcesses: none).
  static uint32_t slot_of(const TenantLedger& l, int pid) {
    for (uint32_t i = 0; i < kMaxProcesses; ++i)
      if (l.processes[i].state.load() == static_cast<uint32_t>(SlotState::kLive) &&
          l.processes[i].pid.load() == pid)
        return i;
    return kMaxProcesses;
  }
  // Polls for `limit`: the borrower's bytes on host never exceed `most`.
  void expect_on_host_at_most(const TenantLedger& l, uint64_t most,
                              std::chrono::milliseconds limit) {
    uint64_t highest = 0;
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      highest = std::max<uint64_t>(highest, l.devices[0].swapped.load());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_LE(highest, most);
  }
};

TEST_F(OvercommitBudget, ADemandBeyondTheHostBudgetMovesNothingAndIsReported) {
  borrower_tenant("borrower");
  auto borrower = start_pattern("borrower", kBorrowed, kChunk, "go", "done");
  ASSERT_FALSE(HasFailure());
  const TenantLedger* lb = ledger("borrower");
  ASSERT_NE(lb, nullptr);
  const uint64_t holds = kBorrowed + kContext;  // 1088 MiB
  ASSERT_EQ(lb->devices[0].used.load(), holds);

  // 3520 MiB guaranteed: 576 may be borrowed, 512 must move; the budget is 256.
  const std::string spent = "the node's host-memory budget for swapped memory is spent";
  tenant("guaranteed", "3520MiB", "3520MiB");
  wait_until([&] { return broker_log().find(spent) != std::string::npos; },
             std::chrono::seconds(5));
  EXPECT_NE(broker_log().find("tenant borrower borrows 512 MiB on GPU 0 that a guaranteed tenant "
                              "needs, and " +
                              spent),
            std::string::npos)
      << broker_log();
  expect_on_host_at_most(*lb, 0, std::chrono::milliseconds(1000));
  EXPECT_EQ(lb->devices[0].used.load(), holds) << "nothing moved";
  EXPECT_TRUE(borrower->running());

  // 192 MiB fit: they move, and the host holds 192 MiB <= 256.
  set_request("guaranteed", "3200MiB");
  wait_until([&] { return lb->devices[0].swapped.load() == 3 * kChunk; }, std::chrono::seconds(5));
  EXPECT_EQ(lb->devices[0].swapped.load(), 3 * kChunk) << broker_log();
  EXPECT_EQ(lb->devices[0].used.load(), holds - 3 * kChunk);
  EXPECT_EQ(status_devices()["borrower"].value("memory_swapped", 0ull), 3 * kChunk);

  // 128 MiB more would take the host to 320 MiB: refused, reported again, nothing moves.
  const std::size_t reports = count(broker_log(), spent);
  set_request("guaranteed", "3328MiB");
  wait_until([&] { return count(broker_log(), spent) > reports; }, std::chrono::seconds(5));
  EXPECT_GT(count(broker_log(), spent), reports) << broker_log();
  expect_on_host_at_most(*lb, 3 * kChunk, std::chrono::milliseconds(600));
  EXPECT_EQ(lb->devices[0].swapped.load(), 3 * kChunk);
  std::printf(
      "host budget 256 MiB: 0 MiB moved for a 512 MiB demand, 192 MiB for a 192 MiB "
      "one, none of a further 128 MiB\n");

  // Nothing is lost: the guarantee goes, every byte comes back intact.
  ProcessResult del = cli({"tenant", "delete", "guaranteed"});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  touch("go");
  wait_until([&] { return borrower->out().find("\"intact\"") != std::string::npos; },
             std::chrono::seconds(10));
  EXPECT_EQ(last_json_line(borrower->out())["intact"], true) << borrower->out() << borrower->err();
  expect_books({{"borrower", holds}});
  touch("done");
  EXPECT_EQ(borrower->wait(std::chrono::seconds(10)), 0);
}

// A tenant process's forgery, kept up: every millisecond its ledger's counter says `counter`
// bytes on host and its slot as many pages as the word holds (what a hostile process of the
// tenant can write: the ledger is mapped read-write in each of them).
class Forgery {
 public:
  Forgery(TenantLedger* ledger, uint32_t slot) : ledger_(ledger), slot_(slot) {}
  ~Forgery() { stop(); }
  void start(uint64_t counter) {
    stop();
    counter_ = counter;
    running_ = true;
    thread_ = std::thread([this] {
      while (running_.load()) {
        write_once();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  void write_once() {
    ledger_->schedule[slot_][0].swapped_pages.store(UINT32_MAX);
    ledger_->devices[0].swapped.store(counter_);
  }
  void stop() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
  }

 private:
  TenantLedger* ledger_;
  uint32_t slot_;
  uint64_t counter_ = 0;
  std::atomic<bool> running_{false};
  std::thread thread_;
};

TEST_F(OvercommitBudget, AForgedSwappedCounterMovesNoOtherTenantNorSurvivesExitOrRestart) {
  borrower_tenant("borrower");
  auto borrower = start_pattern("borrower", kBorrowed, kChunk, "go", "done");
  ASSERT_FALSE(HasFailure());
  const TenantLedger* lb = ledger("borrower");
  ASSERT_NE(lb, nullptr);
  const uint64_t holds = kBorrowed + kContext;  // 1088 MiB
  // The forger: 128 MiB guaranteed (so that it borrows nothing), one process holding 2 MiB
  // beside its context, never asked to move anything.
  auto writer = start_forger("128MiB", "128MiB");
  ASSERT_FALSE(HasFailure());
  TenantLedger* lf = writable_ledger("forger");
  ASSERT_NE(lf, nullptr);
  const uint32_t slot = slot_of(*lf, writer->pid());
  ASSERT_LT(slot, kMaxProcesses);
  Forgery forgery(lf, slot);

  // 2^64 - 256 MiB, kept up: a guarantee that needs 192 MiB of the borrower's still gets them
  // (the old sum took the forgery as true: "budget spent (0 B)").
  forgery.start(0 - 256 * kMiB);
  tenant("guaranteed", "3264MiB", "3072MiB");  // 4096 - 3072 - 128 = 896: 192 must move
  wait_until([&] { return lb->devices[0].swapped.load() == 3 * kChunk; }, std::chrono::seconds(5));
  EXPECT_EQ(lb->devices[0].swapped.load(), 3 * kChunk) << broker_log();
  const nlohmann::json doc = status();
  const nlohmann::json forger = [&] {
    for (const auto& t : doc["tenants"])
      if (t["name"] == "forger") return t;
    return nlohmann::json::object();
  }();
  EXPECT_GE(forger["violations"]["by_kind"].value("swap", 0), 1) << forger.dump();
  EXPECT_EQ(forger["devices"][0].value("memory_swapped", 1ull), 0u) << "what the broker counts";
  EXPECT_NE(broker_log().find("tenant forger: swap violation"), std::string::npos) << broker_log();

  // The wrap: with the borrower's 192 MiB on host, 2^64 - 192 MiB made the old sum exactly
  // 2^64 = 0, and a further 192 MiB moved (384 MiB on host, 256 budgeted). Refused now.
  forgery.start(0 - 192 * kMiB);
  const std::string spent = "the node's host-memory budget for swapped memory is spent (64 MiB";
  set_request("guaranteed", "3264MiB");
  wait_until([&] { return broker_log().find(spent) != std::string::npos; },
             std::chrono::seconds(5));
  EXPECT_NE(broker_log().find(spent), std::string::npos) << broker_log();
  expect_on_host_at_most(*lb, 3 * kChunk, std::chrono::milliseconds(600));

  // The writer exits: nothing of the forgery is left in the forger's books.
  forgery.stop();
  writer.reset();  // SIGKILL and reap
  wait_until([&] { return live_slots(*lf) == 0 && lf->devices[0].swapped.load() == 0; },
             std::chrono::seconds(3));
  EXPECT_EQ(lf->devices[0].swapped.load(), 0u);

  // A broker restart with the forgery written while no broker ran: corrected at its first
  // look, and the budget left is what is really on host (64 MiB), not 0 and not wrapped.
  kill_broker();
  forgery.write_once();
  lf->devices[0].swapped.store(0 - 256 * kMiB);
  start_broker();
  wait_until([&] { return broker_log().find(spent) != std::string::npos; },
             std::chrono::seconds(5));
  EXPECT_NE(broker_log().find(spent), std::string::npos) << broker_log();
  EXPECT_EQ(lf->devices[0].swapped.load(), 0u);
  expect_on_host_at_most(*lb, 3 * kChunk, std::chrono::milliseconds(300));

  // Books exact to the byte: the guarantee goes, the borrower's data comes back intact.
  ProcessResult del = cli({"tenant", "delete", "guaranteed"});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  touch("go");
  wait_until([&] { return borrower->out().find("\"intact\"") != std::string::npos; },
             std::chrono::seconds(10));
  EXPECT_EQ(last_json_line(borrower->out())["intact"], true) << borrower->out() << borrower->err();
  expect_books({{"borrower", holds}, {"forger", 0}});
  touch("done");
  EXPECT_EQ(borrower->wait(std::chrono::seconds(10)), 0);
  ::munmap(lf, sizeof(TenantLedger));
}

// Issue 27: `used` and the slots' `used[]` are the tenant's to write. A forger (128 MiB
// guaranteed, 2 GiB cap, one process holding 2 MiB beside its context) raises its slot's
// `used[0]` and its `used` together by 1 GiB: the books agree, so the books check has nothing
// to say. The enforcer covers a `used` above the grant only as far as NVML shows the
// tenant's processes holding (AuditService::device_bytes): the forger's grant stays 128 MiB,
// and the borrower beside it, which fits the pool left by a 2560 MiB guarantee, is asked to
// move nothing. (The old cover raised the forger's grant to 1 GiB: 896 MiB more borrowed,
// and the borrower was asked to move 576 MiB to host.)
TEST_F(OvercommitBudget, AConsistentlyForgedUsedCounterRaisesNoGrantAndMovesNoOtherTenant) {
  kill_broker();
  extra_broker_args_ = {"--swap-host-budget",
                        "2GiB",
                        "--reclaim",
                        "report",
                        "--nvml",
                        FRACGPU_FAKENVML_DIR "/libnvidia-ml.so.1",
                        "--audit-interval",
                        "200"};
  start_broker();
  borrower_tenant("borrower");
  auto borrower = start_pattern("borrower", kBorrowed, kChunk, "go", "done");
  ASSERT_FALSE(HasFailure());
  const TenantLedger* lb = ledger("borrower");
  ASSERT_NE(lb, nullptr);
  auto writer = start_forger("2GiB", "128MiB");
  ASSERT_FALSE(HasFailure());
  TenantLedger* lf = writable_ledger("forger");
  ASSERT_NE(lf, nullptr);
  const uint32_t slot = slot_of(*lf, writer->pid());
  ASSERT_LT(slot, kMaxProcesses);
  tenant("guaranteed", "2560MiB", "2560MiB");  // pool 4096 - 2688 = 1408 MiB: the borrower fits
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_EQ(lb->devices[0].swapped.load(), 0u) << broker_log();

  lf->processes[slot].used[0].fetch_add(1 * kGiB);
  lf->devices[0].used.fetch_add(1 * kGiB);
  expect_on_host_at_most(*lb, 0, std::chrono::milliseconds(2000));  // 10 NVML samples
  EXPECT_EQ(status_devices()["forger"].value("memory_grant", 0ull), 128 * kMiB)
      << "the device shows 66 MiB: nothing above the grant is confirmed";
  EXPECT_EQ(broker_log().find("tenant borrower: asked to move"), std::string::npos) << broker_log();

  // The forgery undone; the borrower's data was never touched.
  lf->processes[slot].used[0].fetch_sub(1 * kGiB);
  lf->devices[0].used.fetch_sub(1 * kGiB);
  writer.reset();
  touch("go");
  wait_until([&] { return borrower->out().find("\"intact\"") != std::string::npos; },
             std::chrono::seconds(10));
  EXPECT_EQ(last_json_line(borrower->out())["intact"], true) << borrower->out() << borrower->err();
  touch("done");
  EXPECT_EQ(borrower->wait(std::chrono::seconds(10)), 0);
  ::munmap(lf, sizeof(TenantLedger));
}

}  // namespace
}  // namespace fracgpu::testing
