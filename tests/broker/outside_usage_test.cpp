// Memory outside every tenant in the books (issue 27, row 10; core/outside_usage.h): the
// figures of one NVML sample (processes in no tenant, driver memory beyond every listed
// process), `outside` episodes reported once and only with --fracgpu-only, the admission of
// a new or raised guarantee beside it, and the arbiter and enforcer lending only what is
// left: on a 16 GiB GPU, 4 GiB held outside shrink the unguaranteed pool by 4 GiB.
#include "core/outside_usage.h"

#include <gtest/gtest.h>

#include "core/guarantee_enforcer.h"
#include "core/memory_arbiter.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kGiB;
using testing::kMiB;
using testing::MemoryTenant;

const auto kNow = std::chrono::system_clock::time_point{};

TEST(OutsideBooks, SumsTheProcessesInNoTenantAndTheDriversMemoryBeyondEveryProcess) {
  OutsideBooks books;
  EXPECT_EQ(books.gpu(0), nullptr);
  EXPECT_EQ(books.bytes(0), 0u);
  EXPECT_EQ(books.gpu_json(0).value("known", true), false);
  // Listed: two outside processes (1 GiB, 3 GiB) and tenants' 2 GiB; the device says 6.5.
  books.update(0, "GPU-x", {{11, 1 * kGiB, true}, {12, 3 * kGiB, true}}, 6 * kGiB,
               6 * kGiB + 512 * kMiB, kNow);
  const OutsideGpu* g = books.gpu(0);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->process_bytes, 4 * kGiB);
  EXPECT_EQ(g->driver_bytes, 512 * kMiB);
  EXPECT_EQ(books.bytes(0), 4 * kGiB + 512 * kMiB);
  EXPECT_EQ(g->processes.front().pid, 12) << "largest first";
  EXPECT_EQ(books.describe(0),
            "4.5 GiB held outside every tenant (pid 12 3 GiB, pid 11 1 GiB, driver 512 MiB)");
  const nlohmann::json j = books.gpu_json(0);
  EXPECT_EQ(j["bytes"], 4 * kGiB + 512 * kMiB);
  EXPECT_EQ(j["processes"].size(), 2u);
  EXPECT_EQ(j["violations"]["reported"], false);
  // No device figure: the processes alone. A device figure below the list: no driver part.
  books.update(0, "GPU-x", {{11, 1 * kGiB, true}}, 3 * kGiB, std::nullopt, kNow);
  EXPECT_EQ(books.bytes(0), 1 * kGiB);
  books.update(0, "GPU-x", {}, 3 * kGiB, 1 * kGiB, kNow);
  EXPECT_EQ(books.bytes(0), 0u);
  EXPECT_EQ(books.describe(0), "");
  EXPECT_EQ(books.violations(0), 0u) << "not reported without --fracgpu-only";
}

TEST(OutsideBooks, OnAFracgpuOnlyNodeEachProcessIsReportedOncePerEpisode) {
  OutsideBooks books(true);
  auto v = books.update(0, "GPU-x", {{11, 1 * kGiB, true}}, 1 * kGiB, std::nullopt, kNow);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].pid, 11);
  EXPECT_EQ(v[0].bytes, 1 * kGiB);
  EXPECT_NE(v[0].detail.find("pid 11 holds 1 GiB on GPU 0 in no tenant"), std::string::npos)
      << v[0].detail;
  // Still there: the same episode.
  EXPECT_TRUE(
      books.update(0, "GPU-x", {{11, 2 * kGiB, true}}, 2 * kGiB, std::nullopt, kNow).empty());
  // Another GPU's sample does not end it.
  EXPECT_TRUE(books.update(1, "GPU-y", {}, 0, std::nullopt, kNow).empty());
  EXPECT_TRUE(
      books.update(0, "GPU-x", {{11, 2 * kGiB, true}}, 2 * kGiB, std::nullopt, kNow).empty());
  // Gone, then back: a new episode.
  EXPECT_TRUE(books.update(0, "GPU-x", {}, 0, std::nullopt, kNow).empty());
  EXPECT_EQ(books.update(0, "GPU-x", {{11, 1 * kGiB, true}}, 1 * kGiB, std::nullopt, kNow).size(),
            1u);
  EXPECT_EQ(books.violations(0), 2u);
  EXPECT_EQ(books.violations(1), 0u);
  const nlohmann::json j = books.gpu_json(0)["violations"];
  EXPECT_EQ(j["reported"], true);
  EXPECT_EQ(j["total"], 2u);
  ASSERT_EQ(j["recent"].size(), 2u);
  EXPECT_EQ(j["recent"][0]["kind"], "outside");
  EXPECT_EQ(j["recent"][0]["action"], "logged");
}

class OutsideAdmission : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus.gpus.push_back({0, "GPU-x", "sim", 16 * kGiB, 64 * kMiB});
    other.devices.push_back(device(8 * kGiB));
    others.push_back(&other);
    books.update(0, "GPU-x", {{4242, 4 * kGiB, true}}, 4 * kGiB, std::nullopt, kNow);
  }
  static DeviceSpec device(uint64_t request) {
    DeviceSpec d;
    d.memory_limit = 8 * kGiB;
    d.memory_request = request;
    return d;
  }
  TenantSpec spec(uint64_t request) {
    TenantSpec t;
    t.name = "new";
    t.devices.push_back(device(request));
    return t;
  }
  GpuInventory gpus;
  TenantSpec other;
  std::vector<const TenantSpec*> others;
  OutsideBooks books;
};

TEST_F(OutsideAdmission, ANewGuaranteeMustFitBesideIt) {
  // 16 - 8 guaranteed - 4 outside: 4 GiB may still be guaranteed.
  EXPECT_TRUE(admit_beside_outside(spec(4 * kGiB), nullptr, gpus, 0, others, books).ok());
  const Status refused = admit_beside_outside(spec(5 * kGiB), nullptr, gpus, 0, others, books);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error(),
            "memory request 5 GiB does not fit on GPU 0: of its 16 GiB, 8 GiB are guaranteed to "
            "other tenants and 4 GiB held outside every tenant (pid 4242 4 GiB), memory no "
            "tenant can have until those processes free it (lower the request, or stop the "
            "processes outside fracgpu)");
  // The reserve counts too.
  EXPECT_FALSE(admit_beside_outside(spec(4 * kGiB), nullptr, gpus, 1, others, books).ok());
}

TEST_F(OutsideAdmission, AGuaranteeThatDoesNotGrowIsNeverRefusedForIt) {
  const TenantSpec before = spec(6 * kGiB);  // admitted before the outside memory came
  EXPECT_TRUE(admit_beside_outside(spec(6 * kGiB), &before, gpus, 0, others, books).ok());
  EXPECT_TRUE(admit_beside_outside(spec(2 * kGiB), &before, gpus, 0, others, books).ok());
  EXPECT_FALSE(admit_beside_outside(spec(7 * kGiB), &before, gpus, 0, others, books).ok());
  EXPECT_TRUE(admit_beside_outside(spec(0), nullptr, gpus, 0, others, books).ok())
      << "a tenant without a guarantee is lent only what is left";
}

TEST(OutsideLending, TheArbiterLendsOnlyWhatIsLeftAndSaysWhy) {
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  MemoryTenant borrower{"borrower", 0, 16 * kGiB, 0};
  MemoryArbiter arbiter{{16 * kGiB}};
  EXPECT_FALSE(arbiter.set_outside(0, 0));
  EXPECT_TRUE(arbiter.set_outside(0, 4 * kGiB));
  EXPECT_EQ(arbiter.capacity(0), 12 * kGiB);
  const std::vector<ArbiterMember> all = {guaranteed.member(), borrower.member()};
  auto refused = arbiter.burst(all, borrower.member(), 0, 5 * kGiB);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("(4 GiB more is held by processes outside every tenant)"),
            std::string::npos)
      << refused.error();
  auto fits = arbiter.burst(all, borrower.member(), 0, 4 * kGiB);
  ASSERT_TRUE(fits.ok()) << fits.error();
  EXPECT_EQ(*fits, 4 * kGiB);
  EXPECT_FALSE(arbiter.set_outside(0, 1 * kGiB)) << "shrinking is no news for the enforcer";
  EXPECT_EQ(arbiter.set_outside(0, 1ull << 62), true);
  EXPECT_EQ(arbiter.capacity(0), 0u) << "saturates";
}

// Outside memory that grows after a borrower borrowed: the pool shrank under what is
// borrowed, and the enforcer takes it back like for a guarantee admitted later — here from
// a borrower that may not swap, stopped under reclaim = kill.
TEST(OutsideLending, OutsideMemoryThatGrowsMakesTheEnforcerTakeBorrowedMemoryBack) {
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  MemoryTenant borrower{"borrower", 0, 16 * kGiB, 0};
  MemoryArbiter arbiter{{16 * kGiB}};
  const std::vector<ArbiterMember> all = {guaranteed.member(), borrower.member()};
  ASSERT_TRUE(arbiter.burst(all, borrower.member(), 0, 6 * kGiB).ok());
  ASSERT_TRUE(borrower.reserve(6 * kGiB));
  std::vector<std::string> killed;
  GuaranteeEnforcer enforcer{EnforcerConfig{.host_budget = 0, .kill_unswappable = true},
                             [&](const std::string& t) {
                               killed.push_back(t);
                               return 1;
                             }};
  enforcer.tick(all, arbiter, 0);
  EXPECT_TRUE(killed.empty()) << "6 of the 8 GiB pool: nothing owed";
  ASSERT_TRUE(arbiter.set_outside(0, 4 * kGiB));  // the pool is 4 GiB now, 6 are borrowed
  enforcer.tick(all, arbiter, 100'000'000);
  ASSERT_EQ(killed.size(), 1u);
  EXPECT_EQ(killed[0], "borrower");
}

}  // namespace
}  // namespace fracgpu::broker
