// The swap reserve, end to end on the simulated GPU (4 GiB, 64 MiB contexts): a borrower
// that may swap gets host memory pinned ahead for what it borrows (DeviceQuota.host_reserve,
// TenantLedger.host_reserved; include/fracgpu/tenant_segment.h), and a guarantee admitted
// later is met by copies into it — nothing pinned while the guaranteed tenant waits (the
// shim's log line says how much of the move went into the reserve). The reserve stays
// within the node's host budget, goes when the tenant stops borrowing, and a killed
// process's reserve leaves the books.
#include <regex>
#include <thread>

#include "overcommit_fixture.h"

namespace fracgpu::testing {
namespace {

constexpr uint64_t kBorrowed = 1 * kGiB;
constexpr uint64_t kChunk = 64 * kMiB;

class OvercommitReserve : public OvercommitFixture {
 protected:
  // Without the floor on the node's available memory (its own tests are the enforcer's:
  // ReserveFloor.*): the sizes here must not depend on what else the machine runs.
  void SetUp() override {
    OvercommitFixture::SetUp();
    restart_broker({});
  }
  void restart_broker(std::vector<std::string> args) {
    kill_broker();
    args.insert(args.end(), {"--swap-reserve-floor", "0"});
    extra_broker_args_ = args;
    start_broker();
  }
  // What the tenant's live processes hold pinned ahead (`fracgpu status --json`).
  uint64_t reserved(const std::string& name) {
    const nlohmann::json doc = status();
    if (!doc.is_object()) return ~0ull;
    for (const auto& t : doc["tenants"])
      if (t["name"] == name) return t.value("host_reserved", ~0ull);
    return ~0ull;
  }
  // Waits until the tenant holds exactly `bytes` pinned ahead.
  bool wait_reserved(const std::string& name, uint64_t bytes, std::chrono::seconds limit) {
    wait_until([&] { return reserved(name) == bytes; }, limit);
    return reserved(name) == bytes;
  }
  // A borrower of 1 GiB (+ its context), waited for until its reserve covers its swappable
  // 1 GiB (a failure of the test otherwise).
  std::unique_ptr<BackgroundProcess> start_reserved_borrower() {
    borrower_tenant("borrower");
    auto borrower = start_pattern("borrower", kBorrowed, kChunk, "go");
    if (HasFailure()) return borrower;
    EXPECT_TRUE(wait_reserved("borrower", kBorrowed, std::chrono::seconds(10)))
        << reserved("borrower") << "\n"
        << broker_log() << borrower->err();
    return borrower;
  }
  // The borrower's swap-out lines: MiB moved and MiB of them copied into the reserve.
  static std::vector<std::pair<double, double>> moves(const std::string& log) {
    static const std::regex line(
        R"(moved ([\d.]+) MiB of tenant .*?MiB reused, ([\d.]+) MiB of them the swap reserve)");
    std::vector<std::pair<double, double>> out;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
         ++it)
      out.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
    return out;
  }
};

TEST_F(OvercommitReserve, AGuaranteeIsMetByCopiesIntoTheBorrowersReserve) {
  auto borrower = start_reserved_borrower();
  ASSERT_FALSE(HasFailure());
  // (What status shows is announced before it is pinned: the shim's line comes after.)
  const std::string pinned = "swap reserve of tenant 'borrower': 1024.0 MiB";
  wait_until([&] { return borrower->err().find(pinned) != std::string::npos; },
             std::chrono::seconds(5));
  EXPECT_NE(borrower->err().find(pinned), std::string::npos) << borrower->err();
  // Every slab pinned at the first try (registration needs a current context: the swap
  // thread, which pins what no worker has claimed, has none of its own).
  EXPECT_EQ(borrower->err().find("pinning more host memory failed"), std::string::npos)
      << borrower->err();

  // 3520 MiB guaranteed: 512 MiB of the borrower's must move.
  tenant("guaranteed", "3520MiB", "3520MiB");
  double took_s = 0;
  auto holder = hold_guarantee("guaranteed", 3520 * kMiB - kContext, *borrower, &took_s);
  ASSERT_NE(holder, nullptr);
  const TenantLedger* lb = ledger("borrower");
  ASSERT_NE(lb, nullptr);
  EXPECT_EQ(lb->devices[0].swapped.load(), 512 * kMiB);
  const auto moved = moves(borrower->err());
  ASSERT_FALSE(moved.empty()) << borrower->err();
  double total = 0, into_reserve = 0;
  for (const auto& [mib, reserve] : moved) {
    total += mib;
    into_reserve += reserve;
  }
  EXPECT_EQ(total, 512.0);
  EXPECT_EQ(into_reserve, 512.0) << "every byte went into memory pinned ahead\n" << borrower->err();
  // What is left pinned and empty is within what it still borrows (512 MiB resident above
  // its request of 0, plus the context, which cannot move).
  wait_until([&] { return reserved("borrower") <= 512 * kMiB; }, std::chrono::seconds(3));
  EXPECT_LE(reserved("borrower"), 512 * kMiB);

  // The guarantee goes; the borrower's data comes back intact, and its reserve with it.
  holder->kill_and_reap();
  ASSERT_EQ(cli({"tenant", "delete", "guaranteed"}).exit_code, 0);
  touch("go");
  ASSERT_EQ(borrower->wait(std::chrono::seconds(30)), 0) << borrower->out() << borrower->err();
  EXPECT_EQ(last_json_line(borrower->out())["intact"], true) << borrower->out();
  wait_until([&] { return lb->devices[0].used.load() == 0; }, std::chrono::seconds(3));
  EXPECT_EQ(lb->devices[0].swapped.load(), 0u);
  EXPECT_EQ(reserved("borrower"), 0u) << "an exited process holds nothing";
}

TEST_F(OvercommitReserve, TheReserveStaysWithinTheHostBudgetAndGoesWhenBorrowingEnds) {
  restart_broker({"--swap-host-budget", "256MiB"});
  borrower_tenant("borrower");
  auto borrower = start_pattern("borrower", kBorrowed, kChunk, "go");
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_reserved("borrower", 256 * kMiB, std::chrono::seconds(10)))
      << reserved("borrower") << "\n"
      << broker_log();
  // It stays there: never above the budget.
  uint64_t highest = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
  while (std::chrono::steady_clock::now() < end) {
    highest = std::max(highest, reserved("borrower"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(highest, 256 * kMiB);
  // Its request now covers what it holds: it borrows nothing, and unpins its reserve.
  set_request("borrower", "2GiB");
  EXPECT_TRUE(wait_reserved("borrower", 0, std::chrono::seconds(5))) << reserved("borrower");
  EXPECT_TRUE(borrower->running());
  touch("go");
  ASSERT_EQ(borrower->wait(std::chrono::seconds(30)), 0) << borrower->out() << borrower->err();
  EXPECT_EQ(last_json_line(borrower->out())["intact"], true) << borrower->out();
}

TEST_F(OvercommitReserve, AKilledBorrowersReserveLeavesTheBooks) {
  auto borrower = start_reserved_borrower();
  ASSERT_FALSE(HasFailure());
  borrower->kill_now(SIGKILL);
  borrower->wait(std::chrono::seconds(5));
  EXPECT_TRUE(wait_reserved("borrower", 0, std::chrono::seconds(5))) << reserved("borrower");
  const TenantLedger* lb = ledger("borrower");
  ASSERT_NE(lb, nullptr);
  uint64_t words = 0;
  for (const auto& w : lb->host_reserved) words += w.load();
  EXPECT_EQ(words, 0u) << "the dead slot's word is zeroed";
}

}  // namespace
}  // namespace fracgpu::testing
