// Memory quotas end to end: the real broker and CLI, processes with the shim preloaded
// over the simulated GPU. Caps that cannot be exceeded (by racing processes, by any
// allocation route), the cap seen as the device, reclaim after SIGKILL, broker restarts
// and overcommit.
#include <sys/socket.h>
#include <sys/un.h>

#include <random>

#include "broker_fixture.h"

namespace fracgpu::testing {
namespace {

nlohmann::json device_status(const Environment& env) {
  ProcessResult r = run_process({FRACGPU_FAKECUDA_CTL, "status"}, env);
  auto doc = nlohmann::json::parse(r.out, nullptr, false);
  return doc.is_discarded() ? nlohmann::json() : doc["devices"][0];
}

using MemoryQuota = BrokerFixture;

TEST_F(MemoryQuota, TheCapIsTheDeviceAndAllocationStopsThere) {
  create_tenant("capped", "1GiB");
  ProcessResult r = run_process(
      {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(16 * kMiB)}, tenant_env("capped"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto result = last_json_line(r.out);
  const uint64_t footprint = 64 * kMiB;  // the primary context, charged to the tenant
  EXPECT_EQ(result["refused_with"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(result["allocated"].get<uint64_t>(), kGiB - footprint);
  EXPECT_EQ(result["info_total"].get<uint64_t>(), kGiB);
  EXPECT_EQ(result["info_free"].get<uint64_t>(), 0u);  // measured while full
  EXPECT_TRUE(result["again"].get<bool>()) << "freeing must make room again";
  EXPECT_NE(r.err.find("memory cap of 1.00 GiB"), std::string::npos) << r.err;
  const TenantLedger* l = ledger("capped");
  ASSERT_NE(l, nullptr);
  wait_until([&] { return l->devices[0].used.load() == 0; }, std::chrono::seconds(2));
  EXPECT_EQ(l->devices[0].used.load(), 0u)
      << "the context's footprint comes back when the process is gone";
  EXPECT_LE(l->devices[0].peak.load(), kGiB);
}

TEST_F(MemoryQuota, InfoReportsTheCapAndTheTenantsUsage) {
  create_tenant("info", "2GiB");
  ProcessResult r = run_process({FRACGPU_ALLOC_CLIENT, "info"}, tenant_env("info"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto result = last_json_line(r.out);
  EXPECT_EQ(result["total"].get<uint64_t>(), 2 * kGiB);
  EXPECT_EQ(result["device_total"].get<uint64_t>(), 2 * kGiB);
  EXPECT_EQ(result["free"].get<uint64_t>(), 2 * kGiB - 64 * kMiB);
}

// Eight processes of one tenant allocate and free at random, each holding what fits.
// The simulated device's own high-water mark proves the cap was never passed.
TEST_F(MemoryQuota, EightRacingProcessesNeverOvershootByOneByte) {
  const uint64_t cap = 1536 * kMiB;
  create_tenant("racers", "1536MiB");
  run_process({FRACGPU_FAKECUDA_CTL, "reset-peak"}, base_env_);
  std::vector<std::unique_ptr<BackgroundProcess>> racers;
  const std::string go = dir_.path() + "/go";
  for (int i = 0; i < 8; ++i) {
    racers.push_back(std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "storm", "--chunk",
                                 std::to_string(7 * kMiB + 4093), "--ms", "2500", "--go", go},
        tenant_env("racers"), dir_.path() + "/racer" + std::to_string(i)));
  }
  // Start the storm only once all eight have their context (8 x 64 MiB of the cap).
  const TenantLedger* racing = ledger("racers");
  wait_until([&] { return racing->devices[0].used.load() == 8 * 64 * kMiB; },
             std::chrono::seconds(20));
  ASSERT_EQ(racing->devices[0].used.load(), 8 * 64 * kMiB);
  ASSERT_EQ(std::system(("touch " + go).c_str()), 0);
  uint64_t refusals = 0;
  for (auto& p : racers) {
    ASSERT_EQ(p->wait(std::chrono::seconds(60)), 0) << p->out() << p->err();
    refusals += last_json_line(p->out())["refusals"].get<uint64_t>();
  }
  EXPECT_GT(refusals, 0u) << "the racers never reached the cap; the test proves nothing";
  auto device = device_status(base_env_);
  EXPECT_LE(device["peak_used_bytes"].get<uint64_t>(), cap) << device.dump();
  EXPECT_LE(racing->devices[0].peak.load(), cap);
  wait_until([&] { return racing->devices[0].used.load() == 0; }, std::chrono::seconds(2));
  EXPECT_EQ(racing->devices[0].used.load(), 0u);
}

TEST_F(MemoryQuota, EveryAllocationRouteIsChargedAndReleased) {
  create_tenant("routes", "2GiB");
  const uint64_t bytes = 64 * kMiB;
  ProcessResult r = run_process({FRACGPU_ALLOC_CLIENT, "routes", "--bytes", std::to_string(bytes)},
                                tenant_env("routes"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto result = last_json_line(r.out);
  ASSERT_FALSE(result.is_discarded()) << r.out;
  for (auto& [route, pair] : result.items()) {
    SCOPED_TRACE(route);
    const uint64_t expected = route == "cuCtxCreate" ? 64 * kMiB : bytes;
    EXPECT_GE(pair[0].get<int64_t>(), static_cast<int64_t>(expected * 95 / 100))
        << "charged while held";
    EXPECT_EQ(pair[1].get<int64_t>(), 0) << "released afterwards";
  }
  EXPECT_EQ(result.size(), 9u);
}

// Memory that outlives the call that "frees" it stays charged until it is really gone.
TEST_F(MemoryQuota, ChargesFollowTheMemorysRealLifetime) {
  create_tenant("lifetimes", "2GiB");
  ProcessResult r =
      run_process({FRACGPU_ALLOC_CLIENT, "lifetimes", "--bytes", std::to_string(64 * kMiB)},
                  tenant_env("lifetimes"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto result = last_json_line(r.out);
  EXPECT_EQ(result["vmm_released_while_mapped"].get<int64_t>(), static_cast<int64_t>(64 * kMiB));
  EXPECT_EQ(result["vmm_unmapped"].get<int64_t>(), 0);
  EXPECT_EQ(result["pool_destroyed_live"].get<int64_t>(), static_cast<int64_t>(64 * kMiB));
  EXPECT_EQ(result["pool_freed"].get<int64_t>(), 0);
}

// A process killed at a random moment of an allocation storm has its memory back in the
// tenant's books within a second — 100 times over.
TEST_F(MemoryQuota, SigkilledProcessesAreReclaimedWithinOneSecond) {
  create_tenant("victims", "2GiB");
  const TenantLedger* l = ledger("victims");
  ASSERT_NE(l, nullptr);
  std::mt19937 rng(7);
  std::chrono::milliseconds worst{0};
  for (int i = 0; i < 100; ++i) {
    BackgroundProcess victim(
        {FRACGPU_ALLOC_CLIENT, "storm", "--chunk", std::to_string(3 * kMiB), "--ms", "5000"},
        tenant_env("victims"), dir_.path() + "/victim");
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 60));
    victim.kill_now(SIGKILL);  // timed from the kill: the broker sees the exit through a pidfd
    auto took = wait_until([&] { return l->devices[0].used.load() == 0; }, std::chrono::seconds(2));
    victim.wait(std::chrono::seconds(5));
    ASSERT_EQ(l->devices[0].used.load(), 0u) << "iteration " << i << " not reclaimed";
    worst = std::max(worst, took);
  }
  EXPECT_LT(worst.count(), 1000) << "slowest reclaim " << worst.count() << " ms";
  std::printf("slowest reclaim after SIGKILL: %lld ms\n", static_cast<long long>(worst.count()));
}

TEST_F(MemoryQuota, BrokerRestartKeepsEveryCapAndKeepsWatching) {
  create_tenant("durable", "1GiB");
  BackgroundProcess holder({FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(512 * kMiB)},
                           tenant_env("durable"), dir_.path() + "/holder");
  const TenantLedger* l = ledger("durable");
  wait_until([&] { return l->devices[0].used.load() >= 512 * kMiB; }, std::chrono::seconds(10));
  ASSERT_EQ(l->devices[0].used.load(), 512 * kMiB + 64 * kMiB);

  kill_broker();
  // Without a broker the cap still holds: the counters live in the tenant's files.
  ProcessResult during =
      run_process({FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(16 * kMiB)},
                  tenant_env("durable"), std::chrono::seconds(30));
  EXPECT_NE(during.exit_code, 0) << "a new process cannot register while the broker is down";

  start_broker();
  ProcessResult after = run_process(
      {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(16 * kMiB)}, tenant_env("durable"));
  ASSERT_EQ(after.exit_code, 0) << after.out << after.err;
  EXPECT_EQ(last_json_line(after.out)["allocated"].get<uint64_t>(),
            kGiB - 512 * kMiB - 2 * 64 * kMiB);

  holder.kill_now(SIGKILL);
  holder.wait(std::chrono::seconds(5));
  auto took = wait_until([&] { return l->devices[0].used.load() == 0; }, std::chrono::seconds(2));
  EXPECT_EQ(l->devices[0].used.load(), 0u) << "the restarted broker must still watch the holder";
  EXPECT_LT(took.count(), 1000);
}

// 4 GiB simulated GPU. A: limit 3 GiB, request 2 GiB. B: limit 3 GiB, request 1 GiB.
// Unguaranteed memory: 4 - 3 = 1 GiB, lent to whoever asks first; guarantees always hold.
TEST_F(MemoryQuota, OvercommitLendsOnlyUnguaranteedMemory) {
  create_tenant("a", "3GiB", "2GiB");
  create_tenant("b", "3GiB", "1GiB");
  BackgroundProcess a_holds({FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(2816 * kMiB)},
                            tenant_env("a"),
                            dir_.path() + "/a");  // 2.75 GiB + context: burst of 0.8 GiB
  const TenantLedger* la = ledger("a");
  wait_until([&] { return la->devices[0].used.load() > 2 * kGiB; }, std::chrono::seconds(10));
  ASSERT_EQ(la->devices[0].used.load(), 2816 * kMiB + 64 * kMiB) << a_holds.out() << a_holds.err();

  // B still gets its full guarantee, but no burst: A holds most of the unguaranteed GiB.
  ProcessResult b = run_process(
      {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(16 * kMiB)}, tenant_env("b"));
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  const uint64_t b_got = last_json_line(b.out)["allocated"].get<uint64_t>() + 64 * kMiB;
  EXPECT_GE(b_got, 1 * kGiB);
  EXPECT_LE(b_got, 1 * kGiB + (4 * kGiB - 3 * kGiB) - (2816 * kMiB + 64 * kMiB - 2 * kGiB));

  // Once A lets go, B can burst to its limit's share of the unguaranteed memory.
  a_holds.kill_now(SIGKILL);
  a_holds.wait(std::chrono::seconds(5));
  wait_until([&] { return la->devices[0].used.load() == 0; }, std::chrono::seconds(2));
  std::this_thread::sleep_for(
      std::chrono::milliseconds(1500));  // the broker reclaims A's burst grant
  b = run_process({FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(16 * kMiB)},
                  tenant_env("b"));
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_EQ(last_json_line(b.out)["allocated"].get<uint64_t>() + 64 * kMiB, 2 * kGiB);
}

TEST_F(MemoryQuota, UnreachableConfiguredBrokerFailsClosed) {
  Environment env = shim_env();
  env["FRACGPU_SOCKET"] = dir_.path() + "/no-such-broker.sock";
  auto start = std::chrono::steady_clock::now();
  ProcessResult r = run_process({FRACGPU_ALLOC_CLIENT, "info"}, env, std::chrono::seconds(60));
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot register with the fracgpu broker"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST_F(MemoryQuota, FracgpuRunEnforcesTheCapWithAPrivateBroker) {
  Environment env = shim_env();
  env["FRACGPU_REAL_DRIVER"] = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
  env["FRACGPU_RUN_DIR"] = dir_.path() + "/no-node-broker";
  ProcessResult r =
      run_process({FRACGPU_CLI, "run", "--memory", "768MiB", "--", FRACGPU_ALLOC_CLIENT, "fill",
                   "--chunk", std::to_string(16 * kMiB)},
                  env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto result = last_json_line(r.out);
  EXPECT_EQ(result["info_total"].get<uint64_t>(), 768 * kMiB);
  EXPECT_EQ(result["allocated"].get<uint64_t>(), 768 * kMiB - 64 * kMiB);
}

// `fracgpu run` without --memory on the 4 GiB simulated GPU: through the node broker,
// next to a tenant guaranteed 1.5 GiB, the program sees (and can fill) a 2.5 GiB GPU;
// through a private broker, where no one else is guaranteed anything, the whole 4 GiB.
TEST_F(MemoryQuota, FracgpuRunWithoutMemoryGetsWhatOthersAreNotGuaranteed) {
  create_tenant("guaranteed", "3GiB", "1536MiB");
  Environment env = shim_env();
  env["FRACGPU_REAL_DRIVER"] = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
  env["FRACGPU_RUN_DIR"] = run_dir();
  const std::vector<std::string> fill = {"--", FRACGPU_ALLOC_CLIENT, "fill", "--chunk",
                                         std::to_string(16 * kMiB)};
  std::vector<std::string> argv = {FRACGPU_CLI, "run", "--compute", "50"};
  argv.insert(argv.end(), fill.begin(), fill.end());
  ProcessResult r = run_process(argv, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto result = last_json_line(r.out);
  EXPECT_EQ(result["info_total"].get<uint64_t>(), 4 * kGiB - 1536 * kMiB);
  EXPECT_EQ(result["allocated"].get<uint64_t>(), 4 * kGiB - 1536 * kMiB - 64 * kMiB);

  env["FRACGPU_RUN_DIR"] = dir_.path() + "/no-node-broker";
  r = run_process(argv, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  result = last_json_line(r.out);
  EXPECT_EQ(result["info_total"].get<uint64_t>(), 4 * kGiB);
}

}  // namespace
}  // namespace fracgpu::testing

namespace fracgpu::testing {
namespace {

// The README's fallback on machines without a GPU: the demo must run and show the
// caps, the guarantees and the loan coming back.
TEST(FracgpuDemo, ShowsCapsGuaranteesAndLending) {
  Environment env = clean_environment();
  ProcessResult r = run_process({FRACGPU_CLI, "demo"}, env, std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* line :
       {"training   sees a 10 GiB GPU", "training   holds 10.0 GiB", "inference  holds 4.0 GiB",
        "notebook   got   2.0 GiB", "notebook   got   4.0 GiB"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

}  // namespace
}  // namespace fracgpu::testing

namespace fracgpu::testing {
namespace {

// A "broker" that answers registration with garbage: the shim must refuse CUDA (fail
// closed) with one clear line, and never crash or hang the application.
class GarbageBroker {
 public:
  GarbageBroker(const std::string& path, std::string reply)
      : path_(path), reply_(std::move(reply)) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    thread_ = std::thread([this] {
      for (;;) {
        int client = accept(fd_, nullptr, nullptr);
        if (client < 0) return;
        char buffer[256];
        (void)!read(client, buffer, sizeof(buffer));
        // MSG_NOSIGNAL: the shim may close first (it refuses what it reads); a plain
        // write() would then kill the whole test binary with SIGPIPE.
        (void)!::send(client, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        close(client);
      }
    });
  }
  ~GarbageBroker() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
    unlink(path_.c_str());
  }

 private:
  std::string path_, reply_;
  int fd_ = -1;
  std::thread thread_;
};

class MalformedBroker : public ShimFixture, public ::testing::WithParamInterface<std::string> {};

TEST_P(MalformedBroker, ShimFailsClosedWithoutCrashing) {
  TempDir dir("garbage");
  const std::string socket_path = dir.path() + "/broker.sock";
  GarbageBroker broker(socket_path, GetParam());
  Environment env = shim_env();
  env["FRACGPU_SOCKET"] = socket_path;
  ProcessResult r = run_process({FRACGPU_ALLOC_CLIENT, "info"}, env, std::chrono::seconds(30));
  EXPECT_EQ(r.signal, 0) << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("cannot register with the fracgpu broker"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Replies, MalformedBroker,
    ::testing::Values(
        std::string("not json at all\n"), std::string("{\"ok\":true}\n"),
        std::string(
            "{\"ok\":true,\"slot\":99999,\"tenant\":\"x\",\"quota\":\"q\",\"ledger\":\"l\"}\n"),
        std::string("{\"ok\":true,\"slot\":1,\"tenant\":\"x\",\"quota\":\"../../etc/"
                    "passwd\",\"ledger\":\"l\"}\n"),
        std::string("{\"ok\":true,\"slot\":1,\"tenant\":\"x\",\"quota\":\"quota\",\"ledger\":"
                    "\"ledger\"}\n"),
        // Protocol 2 promises the ledger as a descriptor; a reply without one is refused.
        std::string("{\"ok\":true,\"protocol\":2,\"slot\":1,\"tenant\":\"x\",\"quota\":"
                    "\"quota\",\"ledger_fd\":true}\n"),
        std::string("{\"ok\":false,\"error\":\"go away\"}\n"), std::string(""),
        std::string(70000, 'x')),
    [](const auto& param_info) { return "reply" + std::to_string(param_info.index); });

}  // namespace
}  // namespace fracgpu::testing

namespace fracgpu::testing {
namespace {

// NVML inside a tenant (nvidia-smi's view), through both routes a program can take:
// linked against libnvidia-ml.so.1, and dlopen+dlsym as nvidia-smi does.
TEST_F(MemoryQuota, NvmlInsideATenantReportsTheCapAndTheTenantsUsage) {
  create_tenant("smi", "2GiB");
  BackgroundProcess holder({FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(512 * kMiB)},
                           tenant_env("smi"), dir_.path() + "/smi-holder");
  const TenantLedger* l = ledger("smi");
  wait_until([&] { return l->devices[0].used.load() == 576 * kMiB; }, std::chrono::seconds(10));
  ASSERT_EQ(l->devices[0].used.load(), 576 * kMiB);
  for (const char* route : {"linked", "dlopen"}) {
    SCOPED_TRACE(route);
    Environment env = tenant_env("smi");
    env["LD_LIBRARY_PATH"] = FRACGPU_FAKENVML_DIR;
    ProcessResult r = run_process({FRACGPU_NVML_CLIENT, route}, env);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto doc = last_json_line(r.out);
    for (const char* version : {"v1", "v2"}) {
      EXPECT_EQ(doc[version]["total"].get<uint64_t>(), 2 * kGiB);
      EXPECT_EQ(doc[version]["used"].get<uint64_t>(), 576 * kMiB);
      EXPECT_EQ(doc[version]["free"].get<uint64_t>(), 2 * kGiB - 576 * kMiB);
    }
    EXPECT_EQ(doc["v2"]["reserved"].get<uint64_t>(), 0u);
  }
  // Outside any tenant NVML's own figures (the simulated 4 GiB device) pass through untouched.
  Environment outside = shim_env();
  outside["LD_LIBRARY_PATH"] = FRACGPU_FAKENVML_DIR;
  ProcessResult r = run_process({FRACGPU_NVML_CLIENT, "dlopen"}, outside);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(last_json_line(r.out)["v1"]["total"].get<uint64_t>(), 4 * kGiB);
  EXPECT_EQ(last_json_line(r.out)["v1"]["used"].get<uint64_t>(), 576 * kMiB)
      << "the holder's context and allocation, as the simulated device counts them";
  EXPECT_EQ(last_json_line(r.out)["v2"]["reserved"].get<uint64_t>(), 256 * kMiB);
}

}  // namespace
}  // namespace fracgpu::testing
