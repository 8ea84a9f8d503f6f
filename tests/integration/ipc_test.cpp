// Legacy CUDA IPC keeps working for a tenant whose memory may move to host (--swap allow),
// end to end on the simulated GPU: the producer's cuMemAlloc is backed by the shim (VMM), on
// which the driver's own cuIpcGetMemHandle fails; the shim hands out its own handle, the
// consumer (spawned, or forked) opens it through the producer's IPC server and sees the
// producer's data, the producer sees the consumer's write. The consumer is charged nothing;
// the shared allocation is pinned: when the tenant goes idle its unshared memory moves to
// host and the shared allocation stays. A tenant that may not swap keeps the driver's IPC.
#include <fstream>
#include <thread>

#include "broker_fixture.h"

namespace fracgpu::testing {
namespace {

constexpr uint64_t kShared = 64 * kMiB;  // 32 granules: backed by the shim under --swap allow
constexpr uint64_t kContext = 64 * kMiB;

class Ipc : public BrokerFixture {
 protected:
  void create_swappable(const std::string& name) {
    ProcessResult r = cli({"tenant", "create", name, "--memory", "2GiB", "--memory-request", "0",
                           "--gpu", "0", "--swap", "allow"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  ProcessResult share(const std::string& tenant, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {FRACGPU_IPC_CLIENT, "share", "--bytes",
                                     std::to_string(kShared)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, tenant_env(tenant), std::chrono::seconds(60));
  }
  // `backed`: the allocation is the shim's VMM memory (the driver's own IPC refuses it).
  void expect_shared(const ProcessResult& r, bool backed) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json done = last_json_line(r.out);
    EXPECT_EQ(done.value("stage", ""), "done") << r.out << r.err;
    EXPECT_EQ(done.value("child_exit", -1), 0) << r.out << r.err;
    EXPECT_EQ(done.value("mismatches", uint64_t{1}), 0u) << "the consumer's write reached us";
    EXPECT_EQ(done.value("free", ""), "CUDA_SUCCESS");
    EXPECT_EQ(done.value("legacy_ipc_capable", -1), backed ? 0 : 1) << r.out;
  }
};

TEST_F(Ipc, ASwappableTenantsSpawnedProcessOpensItsHandle) {
  create_swappable("producer");
  const std::string hold = dir_.path() + "/consumer";
  BackgroundProcess producer(
      {FRACGPU_IPC_CLIENT, "share", "--bytes", std::to_string(kShared), "--hold", hold},
      tenant_env("producer"), dir_.path() + "/producer");
  ASSERT_EQ(producer.wait_until_ready([&] { return std::ifstream(hold + ".opened").good(); },
                                      std::chrono::seconds(20)),
            "")
      << producer.out() << producer.err();
  // The consumer maps the producer's 64 MiB: only the producer is charged for them.
  const TenantLedger* ledger_p = ledger("producer");
  ASSERT_NE(ledger_p, nullptr);
  EXPECT_EQ(ledger_p->devices[0].used.load(), kShared + 2 * kContext);
  std::ofstream(hold) << "go\n";
  ASSERT_EQ(producer.wait(std::chrono::seconds(30)), 0) << producer.out() << producer.err();
  const nlohmann::json done = last_json_line(producer.out());
  EXPECT_EQ(done.value("child_exit", -1), 0) << producer.out() << producer.err();
  EXPECT_EQ(done.value("mismatches", uint64_t{1}), 0u) << producer.out();
  EXPECT_EQ(done.value("legacy_ipc_capable", -1), 0) << "the shim's VMM memory";
  wait_until([&] { return ledger_p->devices[0].used.load() == 0; }, std::chrono::seconds(3));
  EXPECT_EQ(ledger_p->devices[0].used.load(), 0u);
}

TEST_F(Ipc, AForkedChildOpensItsParentsHandle) {
  create_swappable("producer");
  expect_shared(share("producer", {"--fork"}), true);
}

TEST_F(Ipc, ASharedAllocationStaysOnTheGpuWhenTheTenantGoesIdle) {
  kill_broker();
  extra_broker_args_ = {"--swap-idle-after", "1"};
  start_broker();
  create_swappable("producer");
  BackgroundProcess producer({FRACGPU_IPC_CLIENT, "share", "--bytes", std::to_string(kShared),
                              "--other", std::to_string(kShared), "--keep-ms", "5000"},
                             tenant_env("producer"), dir_.path() + "/producer");
  const TenantLedger* ledger_p = nullptr;
  ASSERT_EQ(producer.wait_until_ready(
                [&] { return producer.out().find("\"shared\"") != std::string::npos; },
                std::chrono::seconds(20)),
            "")
      << producer.out() << producer.err();
  ledger_p = ledger("producer");
  ASSERT_NE(ledger_p, nullptr);
  // Idle for 1 s: what can move, moves; the shared allocation cannot.
  wait_until([&] { return ledger_p->devices[0].swapped.load() >= kShared; },
             std::chrono::seconds(4));
  EXPECT_EQ(ledger_p->devices[0].swapped.load(), kShared) << "only the unshared allocation";
  EXPECT_EQ(ledger_p->devices[0].used.load(), kShared + kContext)
      << "the shared one and the context";
  ASSERT_EQ(producer.wait(std::chrono::seconds(30)), 0) << producer.out() << producer.err();
  const nlohmann::json done = last_json_line(producer.out());
  EXPECT_EQ(done.value("mismatches_later", uint64_t{1}), 0u) << producer.out();
  EXPECT_EQ(done.value("other_mismatches", uint64_t{1}), 0u) << "the unshared one came back intact";
}

TEST_F(Ipc, ATenantThatMayNotSwapKeepsTheDriversOwnIpc) {
  create_tenant("native", "2GiB");
  const ProcessResult r = share("native");
  expect_shared(r, false);
  EXPECT_GE(hook_count("cuIpcGetMemHandle"), 1u) << "the hook saw it and passed it on";
}

}  // namespace
}  // namespace fracgpu::testing
