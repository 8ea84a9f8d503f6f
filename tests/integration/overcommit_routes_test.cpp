// Every allocation route under a guarantee that needs all borrowed memory back, on the
// simulated 4 GiB GPU: nine best-effort tenants that may swap each hold 128 MiB of patterned
// data (64 MiB for small allocations) by one route, then a tenant is guaranteed the whole
// GPU. Each borrower either moves its memory to host and gets it back intact (cuMemAlloc
// of at least the VMM granularity: the shim backs those; the program's own VMM, each handle
// mapped once with access set: core/app_vmm.h; cuMemAllocAsync on the default pool: the
// shim's arena, core/async_arena.h) or keeps it on the GPU, intact, and is
// reported by the broker with the bytes that cannot move — contexts always, and every
// other route entirely: small cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged,
// cuMemAllocFromPoolAsync of a pool the program created, arrays. Registered host
// memory is charged nothing and so has nothing to move.
#include <chrono>
#include <cstdio>
#include <regex>

#include "overcommit_fixture.h"

namespace fracgpu::testing {
namespace {

struct Route {
  std::string name;  // fracgpu-alloc-client pattern --route
  uint64_t bytes;    // of data
  uint64_t chunk;    // per allocation
  bool swaps;        // moves to host
  bool charged;      // counted against the cap at all
};

const std::vector<Route> kRoutes = {
    {"alloc", 128 * kMiB, 32 * kMiB, true, true},
    {"small", 64 * kMiB, 1 * kMiB, false, true},  // cuMemAlloc below the 2 MiB granularity
    {"pitch", 128 * kMiB, 32 * kMiB, false, true},
    {"managed", 128 * kMiB, 32 * kMiB, false, true},
    {"async", 128 * kMiB, 32 * kMiB, true, true},  // the default pool: the shim's arena
    {"pool", 128 * kMiB, 32 * kMiB, false, true},
    {"vmm", 128 * kMiB, 32 * kMiB, true, true},  // the program's own: swappable too
    {"array", 128 * kMiB, 32 * kMiB, false, true},
    {"hostreg", 128 * kMiB, 32 * kMiB, false, false},
};

// tenant -> the pinned bytes the broker reported for it on GPU 0.
std::map<std::string, uint64_t> pinned_reports(const std::string& log) {
  static const std::regex line(
      R"(tenant (\S+) borrows .* on GPU 0 that a guaranteed tenant needs, and did not move it to host memory in time: .*\((\d+) bytes\) of its memory there is pinned)");
  std::map<std::string, uint64_t> out;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it)
    out[(*it)[1]] = std::stoull((*it)[2]);
  return out;
}

using OvercommitRoutes = OvercommitFixture;

TEST_F(OvercommitRoutes, EachRouteMovesWithItsDataOrIsReportedAsPinned) {
  // Issue 27 made --reclaim kill the default: this test needs the pinned borrowers alive
  // after their report (their data is read back), so it asks for the old default.
  kill_broker();
  extra_broker_args_ = {"--reclaim", "report"};
  start_broker();
  std::map<std::string, std::unique_ptr<BackgroundProcess>> holders;
  for (const Route& r : kRoutes) {
    borrower_tenant("r-" + r.name);
    const std::string route = r.name == "small" ? "alloc" : r.name;
    holders[r.name] = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "pattern", "--bytes",
                                 std::to_string(r.bytes), "--chunk", std::to_string(r.chunk),
                                 "--go", file("go"), "--done", file("done"), "--route", route},
        tenant_env("r-" + r.name), file("r-" + r.name));
  }
  std::map<std::string, uint64_t> used;
  for (const Route& r : kRoutes) {
    BackgroundProcess& p = *holders[r.name];
    ASSERT_EQ(p.wait_until_ready([&] { return p.out().find("\"ready\"") != std::string::npos; },
                                 std::chrono::seconds(30)),
              "")
        << r.name << ": " << p.out() << p.err();
    const TenantLedger* l = ledger("r-" + r.name);
    ASSERT_NE(l, nullptr);
    used[r.name] = l->devices[0].used.load();
    if (r.charged)
      EXPECT_GE(used[r.name], kContext + r.bytes) << r.name << " is charged";
    else
      EXPECT_EQ(used[r.name], kContext) << r.name << " is not device memory";
  }

  // The whole GPU guaranteed to one tenant: every borrowed byte is owed.
  const nlohmann::json doc = status();
  uint64_t capacity = 4 * kGiB;
  if (doc.contains("gpus") && !doc["gpus"].empty())
    capacity = doc["gpus"][0].value("memory_capacity", capacity);
  tenant("guaranteed", std::to_string(capacity), std::to_string(capacity));
  std::map<std::string, uint64_t> reports;
  wait_until(
      [&] {
        reports = pinned_reports(broker_log());
        return reports.size() == kRoutes.size();
      },
      std::chrono::seconds(8));
  for (const Route& r : kRoutes) {
    const std::string name = "r-" + r.name;
    const TenantLedger* l = ledger(name);
    ASSERT_EQ(reports.count(name), 1u) << name << " was not reported\n" << broker_log();
    const uint64_t swapped = l->devices[0].swapped.load();
    // What stays on the GPU is exactly what the report calls pinned.
    EXPECT_EQ(reports[name], l->devices[0].used.load()) << name;
    if (r.swaps) {
      EXPECT_EQ(swapped, r.bytes) << name << ": all of its data moved";
      EXPECT_EQ(reports[name], kContext) << name << ": only the context is pinned";
    } else {
      EXPECT_EQ(swapped, 0u) << name << " stays on the GPU";
      EXPECT_EQ(reports[name], used[r.name]) << name << ": all of it is pinned";
    }
    std::printf("%-8s charged %5llu MiB, moved %4llu MiB, reported pinned %5llu MiB\n",
                r.name.c_str(), static_cast<unsigned long long>(used[r.name] >> 20),
                static_cast<unsigned long long>(swapped >> 20),
                static_cast<unsigned long long>(reports[name] >> 20));
  }

  // The guarantee goes: every route reads its data back intact.
  ProcessResult del = cli({"tenant", "delete", "guaranteed"});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  touch("go");
  for (const Route& r : kRoutes) {
    BackgroundProcess& p = *holders[r.name];
    wait_until([&] { return p.out().find("\"intact\"") != std::string::npos; },
               std::chrono::seconds(10));
    EXPECT_EQ(last_json_line(p.out())["intact"], true) << r.name << ": " << p.out() << p.err();
  }
  std::map<std::string, uint64_t> books;
  for (const Route& r : kRoutes) books["r-" + r.name] = used[r.name];
  expect_books(books);
  touch("done");
  for (const Route& r : kRoutes) EXPECT_EQ(holders[r.name]->wait(std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace fracgpu::testing
