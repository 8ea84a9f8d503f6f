// The application's own VMM memory under a guarantee, end to end on the simulated 4 GiB GPU
// (core/app_vmm.h): a best-effort tenant that may swap holds its memory the way PyTorch's
// expandable segments do (fracgpu-expandable-client: one reserved range, 20 MiB handles
// mapped at increasing offsets, one cuMemSetAccess); a tenant guaranteed 2 GiB is admitted
// and gets all of it within the bound of the cuMemAlloc test (overcommit_test.cpp), the
// borrower's handles moving to host; it unmaps and releases a third of them before touching
// the GPU again (on host or not), and the rest, their properties and a retained handle's value come
// back intact at its next copy; it then unmaps and releases its handles, maps new ones and its
// books end exact. A handle the application exported stays on the GPU and is what the broker
// reports pinned.
#include <chrono>
#include <cstdio>
#include <regex>

#include "overcommit_fixture.h"

namespace fracgpu::testing {
namespace {

constexpr uint64_t kHandle = 20 * kMiB;  // PyTorch's segment size for large allocations

// The first JSON line of `out` that has `key`.
nlohmann::json json_line_with(const std::string& out, const std::string& key) {
  const std::size_t at = out.find("\"" + key + "\"");
  if (at == std::string::npos) return {};
  const std::size_t start = out.rfind('\n', at);
  const std::size_t end = out.find('\n', at);
  const std::size_t from = start == std::string::npos ? 0 : start + 1;
  return nlohmann::json::parse(out.substr(from, end == std::string::npos ? end : end - from),
                               nullptr, false);
}

class OvercommitAppVmm : public OvercommitFixture {
 protected:
  std::unique_ptr<BackgroundProcess> start_segments(const std::string& name, uint64_t handles,
                                                    bool export_first = false,
                                                    uint64_t drop_first = 0, uint64_t remap = 0) {
    std::vector<std::string> argv = {FRACGPU_EXPANDABLE_CLIENT,
                                     "--handles",
                                     std::to_string(handles),
                                     "--handle-bytes",
                                     std::to_string(kHandle),
                                     "--go",
                                     file("go"),
                                     "--done",
                                     file("done"),
                                     "--export",
                                     export_first ? "1" : "0",
                                     "--drop-first",
                                     std::to_string(drop_first),
                                     "--remap",
                                     std::to_string(remap)};
    Environment env = tenant_env(name);
    env["FRACGPU_LOG_LEVEL"] = "info";
    auto p = std::make_unique<BackgroundProcess>(argv, env, file(name));
    const std::string why = p->wait_until_ready(
        [&] { return p->out().find("\"ready\"") != std::string::npos; }, std::chrono::seconds(30));
    EXPECT_EQ(why, "") << p->out() << p->err();
    return p;
  }
  void wait_for_line(BackgroundProcess& p, const std::string& key) {
    wait_until([&] { return p.out().find("\"" + key + "\"") != std::string::npos; },
               std::chrono::seconds(20));
  }
};

TEST_F(OvercommitAppVmm, AGuaranteeGetsAllOfAnExpandableSegmentsBorrowersMemory) {
  borrower_tenant("borrower");
  constexpr uint64_t kHandles = 150;  // 3000 MiB
  // At its next turn it first unmaps and releases a third of its handles, before it touches
  // the GPU: those on host by then lose their copies, nothing real is released for them
  // (tests/unit/app_vmm_test.cpp checks that path alone).
  constexpr uint64_t kRemapped = 10;  // then maps new ones: 200 MiB
  auto borrower = start_segments("borrower", kHandles, false, kHandles / 3, kRemapped);
  const TenantLedger* lb = ledger("borrower");
  ASSERT_NE(lb, nullptr);
  ASSERT_EQ(lb->devices[0].used.load(), kContext + kHandles * kHandle);

  create_tenant("guaranteed", "2GiB", "2GiB");
  double took_s = 0;
  auto holder = hold_guarantee("guaranteed", 1984 * kMiB, *borrower, &took_s);
  ASSERT_NE(holder, nullptr);
  EXPECT_LT(took_s, 8.0);  // as overcommit_test.cpp: 1 s plus the copy, on a loaded host
  const uint64_t swapped = lb->devices[0].swapped.load();
  EXPECT_GE(swapped, 1016 * kMiB) << "the borrower's handles moved to host";
  EXPECT_EQ(swapped % kHandle, 0u) << "whole handles move";
  wait_until([&] { return lb->devices[0].used.load() + 2 * kGiB <= 4 * kGiB; },
             std::chrono::seconds(2));
  EXPECT_LE(lb->devices[0].used.load() + 2 * kGiB, 4 * kGiB) << broker_log() << borrower->err();
  EXPECT_EQ(lb->devices[0].used.load() + swapped, kContext + kHandles * kHandle)
      << "every byte is resident or on host, once";

  // The guarantee goes; the borrower touches the GPU again and finds everything.
  holder->kill_and_reap();
  ProcessResult del = cli({"tenant", "delete", "guaranteed"});
  ASSERT_EQ(del.exit_code, 0) << del.out << del.err;
  touch("go");
  wait_for_line(*borrower, "intact");
  const nlohmann::json read = json_line_with(borrower->out(), "intact");
  EXPECT_EQ(read["intact"], true) << borrower->out() << borrower->err();
  EXPECT_EQ(read["handles_answer"], true) << borrower->out() << borrower->err();
  // Its handles unmapped and released (on host or not) and new ones mapped.
  wait_for_line(*borrower, "remapped");
  EXPECT_EQ(last_json_line(borrower->out())["remapped"], true)
      << borrower->out() << borrower->err();
  EXPECT_EQ(lb->devices[0].swapped.load(), 0u);
  expect_books({{"borrower", kContext + kRemapped * kHandle}});
  touch("done");
  EXPECT_EQ(borrower->wait(std::chrono::seconds(20)), 0) << borrower->out() << borrower->err();
  wait_until([&] { return lb->devices[0].used.load() == 0; }, std::chrono::seconds(3));
  EXPECT_EQ(lb->devices[0].used.load(), 0u);
  EXPECT_EQ(lb->devices[0].swapped.load(), 0u);
}

// tenant -> the pinned bytes the broker reported for it on GPU 0 (as overcommit_routes_test).
uint64_t pinned_report(const std::string& log, const std::string& tenant) {
  static const std::regex line(
      R"(tenant (\S+) borrows .* on GPU 0 that a guaranteed tenant needs, and did not move it to host memory in time: .*\((\d+) bytes\) of its memory there is pinned)");
  uint64_t out = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it)
    if ((*it)[1] == tenant) out = std::stoull((*it)[2]);
  return out;
}

TEST_F(OvercommitAppVmm, AnExportedHandleStaysResidentAndIsReportedPinned) {
  // The sharer must outlive its report (--reclaim report, the default before issue 27).
  kill_broker();
  extra_broker_args_ = {"--reclaim", "report"};
  start_broker();
  borrower_tenant("sharer");
  constexpr uint64_t kHandles = 8;
  auto sharer = start_segments("sharer", kHandles, true);
  const TenantLedger* l = ledger("sharer");
  ASSERT_NE(l, nullptr);
  const uint64_t used = l->devices[0].used.load();
  ASSERT_EQ(used, kContext + kHandles * kHandle);

  // The whole GPU guaranteed: every borrowed byte is owed, only what cannot move stays.
  const nlohmann::json doc = status();
  uint64_t capacity = 4 * kGiB;
  if (doc.contains("gpus") && !doc["gpus"].empty())
    capacity = doc["gpus"][0].value("memory_capacity", capacity);
  tenant("guaranteed", std::to_string(capacity), std::to_string(capacity));
  uint64_t pinned = 0;
  wait_until(
      [&] {
        pinned = pinned_report(broker_log(), "sharer");
        return pinned != 0;
      },
      std::chrono::seconds(8));
  ASSERT_NE(pinned, 0u) << "not reported\n" << broker_log();
  EXPECT_EQ(pinned, kContext + kHandle) << "the context and the exported handle";
  EXPECT_EQ(l->devices[0].used.load(), pinned);
  EXPECT_EQ(l->devices[0].swapped.load(), (kHandles - 1) * kHandle) << "the rest moved";

  ProcessResult del = cli({"tenant", "delete", "guaranteed"});
  ASSERT_EQ(del.exit_code, 0) << del.err;
  touch("go");
  wait_for_line(*sharer, "remapped");
  const nlohmann::json read = json_line_with(sharer->out(), "intact");
  EXPECT_EQ(read["intact"], true) << sharer->out() << sharer->err();
  EXPECT_EQ(read["handles_answer"], true) << sharer->out() << sharer->err();
  EXPECT_EQ(last_json_line(sharer->out())["remapped"], true) << sharer->out();
  expect_books({{"sharer", used}});
  touch("done");
  EXPECT_EQ(sharer->wait(std::chrono::seconds(20)), 0) << sharer->out() << sharer->err();
}

}  // namespace
}  // namespace fracgpu::testing
