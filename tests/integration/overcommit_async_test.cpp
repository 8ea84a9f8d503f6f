// Stream-ordered allocations of a tenant that may swap (cuMemAllocAsync on the default pool,
// what PyTorch's `backend:cudaMallocAsync` does), end to end on the simulated 4 GiB GPU: the
// shim serves them from its swappable arena (interpose/core/async_arena.h), so a guarantee
// admitted next to such a borrower gets all of it and the borrower's data comes back
// intact; stream order holds (a block freed on a busy stream is not another stream's until
// that stream has run past the free); a trim of the default pool returns the idle memory and
// the books stay exact; a tenant that may not swap still gets the driver's pool; captured
// allocations stay graph memory nodes.
#include <chrono>
#include <cstdio>

#include "overcommit_fixture.h"

namespace fracgpu::testing {
namespace {

class OvercommitAsync : public OvercommitFixture {
 protected:
  nlohmann::json run_order(const std::string& tenant_name) {
    ProcessResult r =
        run_process({FRACGPU_ASYNC_CLIENT, "order", "--bytes", std::to_string(64 * kMiB)},
                    tenant_env(tenant_name));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return last_json_line(r.out);
  }
};

TEST_F(OvercommitAsync, AGuaranteeGetsAllOfAnAsyncBorrowersMemoryAndItsDataSurvives) {
  borrower_tenant("borrower");
  auto borrower = start_pattern("borrower", 3 * kGiB, 256 * kMiB, "go", "", "async");
  const TenantLedger* lb = ledger("borrower");
  ASSERT_NE(lb, nullptr);
  EXPECT_EQ(lb->devices[0].used.load(), 3 * kGiB + kContext) << "the arena's chunks, charged once";

  tenant("guaranteed", "2GiB", "2GiB");
  double took_s = 0;
  auto holder = hold_guarantee("guaranteed", 1984 * kMiB, *borrower, &took_s);
  ASSERT_NE(holder, nullptr);
  // The same bound as Overcommit.AGuaranteeAdmittedAfterABorrowerGetsAllOfIt...: 1 s plus
  // the copy of about 1.1 GiB on a loaded machine.
  EXPECT_LT(took_s, 8.0);
  EXPECT_GE(lb->devices[0].swapped.load(), 1 * kGiB) << "the async memory moved to host";
  wait_until([&] { return lb->devices[0].used.load() + 2 * kGiB <= 4 * kGiB; },
             std::chrono::seconds(2));
  EXPECT_LE(lb->devices[0].used.load() + 2 * kGiB, 4 * kGiB) << broker_log() << borrower->err();

  // The guarantee goes; the borrower reads everything back at the same addresses.
  holder->kill_and_reap();
  ProcessResult del = cli({"tenant", "delete", "guaranteed"});
  ASSERT_EQ(del.exit_code, 0) << del.out << del.err;
  touch("go");
  ASSERT_EQ(borrower->wait(std::chrono::seconds(30)), 0) << borrower->out() << borrower->err();
  const auto result = last_json_line(borrower->out());
  EXPECT_EQ(result["intact"], true) << borrower->out();
  EXPECT_EQ(result["chunks"], 12);
  wait_until([&] { return lb->devices[0].used.load() == 0; }, std::chrono::seconds(3));
  EXPECT_EQ(lb->devices[0].used.load(), 0u);
  EXPECT_EQ(lb->devices[0].swapped.load(), 0u);
  EXPECT_EQ(slot_sum(*lb), 0u);
}

TEST_F(OvercommitAsync, StreamOrderHoldsAndTheMemoryIsTheShimsNotThePools) {
  borrower_tenant("borrower");
  const nlohmann::json r = run_order("borrower");
  EXPECT_EQ(r["same_stream_reuse"], true) << r.dump();
  EXPECT_EQ(r["busy_stream"], true) << r.dump() << ": the spin kernel ran too soon to tell";
  EXPECT_EQ(r["other_stream_while_busy_differs"], true) << r.dump();
  EXPECT_EQ(r["other_stream_after"], true) << r.dump() << ": reused once the stream ran past";
  EXPECT_EQ(r["from_default_pool"], false) << r.dump();
  EXPECT_EQ(r["pool_used"], 0) << r.dump();
  EXPECT_EQ(r["captured_alloc_nodes"], 1) << r.dump() << ": during capture the driver allocates";
  const TenantLedger* l = ledger("borrower");
  ASSERT_NE(l, nullptr);
  wait_until([&] { return l->devices[0].used.load() == 0; }, std::chrono::seconds(3));
  EXPECT_EQ(l->devices[0].used.load(), 0u) << "everything settled at exit";
}

TEST_F(OvercommitAsync, ATenantThatMayNotSwapStillGetsTheDriversPool) {
  tenant("fixed", "4GiB", "0");
  const nlohmann::json r = run_order("fixed");
  EXPECT_EQ(r["from_default_pool"], true) << r.dump();
  EXPECT_GE(r["pool_used"].get<uint64_t>(), 64 * kMiB) << r.dump();
  EXPECT_EQ(r["captured_alloc_nodes"], 1) << r.dump();
}

TEST_F(OvercommitAsync, ATrimReturnsTheIdleArenaAndTheBooksStayExact) {
  borrower_tenant("borrower");
  BackgroundProcess p({FRACGPU_ASYNC_CLIENT, "trim", "--bytes", std::to_string(512 * kMiB),
                       "--chunk", std::to_string(1 * kMiB), "--go", file("go")},
                      tenant_env("borrower"), file("trim"));
  ASSERT_EQ(p.wait_until_ready([&] { return p.out().find("allocated") != std::string::npos; },
                               std::chrono::seconds(20)),
            "")
      << p.out() << p.err();
  const TenantLedger* l = ledger("borrower");
  ASSERT_NE(l, nullptr);
  // 1 MiB blocks, two to a 2 MiB chunk: exactly the data.
  EXPECT_EQ(l->devices[0].used.load(), kContext + 512 * kMiB);
  expect_books({{"borrower", kContext + 512 * kMiB}});
  EXPECT_EQ(device_holdings()[p.pid()], kContext + 512 * kMiB)
      << "the device holds what is charged";
  touch("go");
  ASSERT_EQ(p.wait_until_ready([&] { return p.out().find("trimmed") != std::string::npos; },
                               std::chrono::seconds(20)),
            "")
      << p.out() << p.err();
  EXPECT_EQ(l->devices[0].used.load(), kContext) << "the trim returned every idle chunk";
  EXPECT_EQ(device_holdings()[p.pid()], kContext);
  touch("go.exit");
  EXPECT_EQ(p.wait(std::chrono::seconds(10)), 0);
  wait_until([&] { return l->devices[0].used.load() == 0; }, std::chrono::seconds(3));
  EXPECT_EQ(l->devices[0].used.load(), 0u);
}

// During capture the driver gets the allocation (a graph memory node), also for a tenant
// that may swap: graphs with stream-ordered allocations still capture, launch and compute.
TEST_F(OvercommitAsync, CapturedAllocationsStayGraphMemoryNodes) {
  borrower_tenant("borrower");
  // As CaptureTest's graph-memory cycles run it (tests/integration/capture_test.cpp).
  ProcessResult r = run_process({FRACGPU_CAPTURE_CLIENT, "--cycles", "8", "--kernels", "2",
                                 "--graph-alloc", std::to_string(4 * kMiB), "--report", "-"},
                                tenant_env("borrower"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json report = last_json_line(r.out);
  EXPECT_EQ(report.value("failures", -1), 0) << r.out;
  EXPECT_EQ(report.value("oom", -1), 0) << r.out;
  EXPECT_EQ(report.value("graph_launches", -1), 8) << r.out;
}

}  // namespace
}  // namespace fracgpu::testing
