// Multi-GPU end to end (issue 6, item 1) on a simulated machine with two devices
// (FAKECUDA_DEVICE_COUNT=2, 4 GiB each): the real broker and CLI, tenants' processes
// with the shim preloaded.
//
//   (a) a tenant with different caps per device (`--memory 0=1GiB,1=512MiB`) stops at
//       each device's own cap, and the per-device books agree: the broker's
//       `fracgpu status --json` memory_used per GPU and the simulated device's own
//       per-device, per-process `fakecuda-ctl status`;
//   (b) each device is scheduled on its own: tenants weighted 70/30 on device 0 and
//       30/70 on device 1 (`--compute 0=70,1=30`) get those shares on each device,
//       within 3 points over a 5 s window (busy_us per process per device);
//   (c) cuDeviceGetCount / cuDeviceGet / UUIDs follow CUDA_VISIBLE_DEVICES given as
//       indexes (`1`, `1,0`) and as UUIDs, and the tenant's caps follow the device the
//       process sees (the shim matches devices by UUID);
//   (d) peer-access queries and cuCtxEnablePeerAccess answer the same with and without
//       the shim.
// Timing-sensitive (b): the executable is RUN_SERIAL.
#include <signal.h>
#include <sys/wait.h>

#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "broker_fixture.h"

namespace fracgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string pct(double fraction) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << fraction * 100 << "%";
  return s.str();
}

class MultiGpu : public BrokerFixture {
 protected:
  void SetUp() override {
    ShimFixture::SetUp();
    base_env_.erase(
        "CUDA_VISIBLE_DEVICES");  // the simulated driver honours it; each test sets its own
    base_env_["FAKECUDA_DEVICE_COUNT"] = "2";
    base_env_["FAKECUDA_MEMORY"] = "4GiB";
    base_env_["FAKECUDA_CONTEXT_FOOTPRINT"] = "64MiB";
    start_broker();
  }
  void TearDown() override {
    processes_.clear();  // SIGKILLs what still runs, before the broker goes
    BrokerFixture::TearDown();
  }

  void create(const std::vector<std::string>& flags, const std::string& name) {
    std::vector<std::string> args = {"tenant", "create", name};
    args.insert(args.end(), flags.begin(), flags.end());
    ProcessResult r = cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  BackgroundProcess& start(const std::vector<std::string>& argv, const Environment& env) {
    processes_.push_back(std::make_unique<BackgroundProcess>(
        argv, env, dir_.path() + "/p" + std::to_string(processes_.size())));
    return *processes_.back();
  }

  nlohmann::json ctl_status(const Environment& env) {
    ProcessResult r = run_process({FRACGPU_FAKECUDA_CTL, "status"}, env, std::chrono::seconds(10));
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    return doc.is_discarded() ? nlohmann::json() : doc;
  }

  // Per-process figure `key` on physical device `device` (0 when not listed).
  static uint64_t process_value(const nlohmann::json& status, int device, pid_t pid,
                                const char* key) {
    if (!status.contains("devices")) return 0;
    for (const auto& p : status["devices"][device]["processes"]) {
      if (p["pid"].get<int64_t>() == pid) return p.value(key, uint64_t{0});
    }
    return 0;
  }

  // The broker's view of tenant `name`: memory_used per GPU index.
  std::map<unsigned, uint64_t> broker_memory_used(const std::string& name) {
    std::map<unsigned, uint64_t> used;
    ProcessResult r = cli({"status", "--json"});
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    if (doc.is_discarded() || !doc.contains("tenants")) return used;
    for (const auto& t : doc["tenants"]) {
      if (t["name"] != name) continue;
      for (const auto& d : t["devices"])
        used[d["gpu"].get<unsigned>()] = d["memory_used"].get<uint64_t>();
    }
    return used;
  }

  std::vector<std::string> uuids() {
    ProcessResult r = run_process({FRACGPU_ALLOC_CLIENT, "devices"}, native_env());
    auto doc = last_json_line(r.out);
    std::vector<std::string> out;
    if (doc.is_discarded() || !doc.contains("devices")) return out;
    for (const auto& d : doc["devices"]) out.push_back(d["uuid"]);
    return out;
  }

  static std::vector<std::string> fill_holding(int device) {
    return {FRACGPU_ALLOC_CLIENT,
            "fill",
            "--chunk",
            std::to_string(16 * kMiB),
            "--hold",
            "1",
            "--device",
            std::to_string(device)};
  }

  // Waits for a `fill --hold 1` process to print its result line.
  nlohmann::json wait_holding(BackgroundProcess& p) {
    wait_until([&] { return p.out().find("holding") != std::string::npos || !p.running(); },
               std::chrono::seconds(20));
    return last_json_line(p.out());
  }

  std::vector<std::unique_ptr<BackgroundProcess>> processes_;
};

// (a) Different caps per device; allocation stops at each; the books agree.
TEST_F(MultiGpu, PerDeviceCapsStopEachDeviceAtItsOwnCap) {
  // A map naming a GPU outside --gpu is refused before anything is created.
  ProcessResult bad = cli({"tenant", "create", "bad", "--memory", "0=1GiB,2=1GiB", "--gpu", "0,1"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--memory names GPU 2, which is not one of the tenant's GPUs (--gpu 0,1)"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(cli({"tenant", "list"}).out.find("bad"), std::string::npos);

  create({"--memory", "0=1GiB,1=512MiB", "--gpu", "0,1"}, "split");
  BackgroundProcess& on0 = start(fill_holding(0), tenant_env("split"));
  BackgroundProcess& on1 = start(fill_holding(1), tenant_env("split"));
  auto r0 = wait_holding(on0);
  auto r1 = wait_holding(on1);
  ASSERT_TRUE(r0.contains("allocated")) << on0.out() << on0.err();
  ASSERT_TRUE(r1.contains("allocated")) << on1.out() << on1.err();
  const uint64_t footprint = 64 * kMiB;
  EXPECT_EQ(r0["refused_with"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(r1["refused_with"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(r0["allocated"].get<uint64_t>(), kGiB - footprint);
  EXPECT_EQ(r1["allocated"].get<uint64_t>(), 512 * kMiB - footprint);
  EXPECT_EQ(r0["info_total"].get<uint64_t>(), kGiB);
  EXPECT_EQ(r1["info_total"].get<uint64_t>(), 512 * kMiB);

  // The broker's books, per GPU.
  auto used = broker_memory_used("split");
  EXPECT_EQ(used[0], kGiB);
  EXPECT_EQ(used[1], 512 * kMiB);
  // The simulated device's own books, per device and process.
  auto status = ctl_status(base_env_);
  ASSERT_TRUE(status.contains("devices")) << status.dump();
  ASSERT_EQ(status["devices"].size(), 2u);
  EXPECT_EQ(process_value(status, 0, on0.pid(), "used_bytes"), kGiB);
  EXPECT_EQ(process_value(status, 1, on1.pid(), "used_bytes"), 512 * kMiB);
  EXPECT_EQ(process_value(status, 1, on0.pid(), "used_bytes"), 0u);
  EXPECT_EQ(process_value(status, 0, on1.pid(), "used_bytes"), 0u);
  EXPECT_EQ(status["devices"][0]["used_bytes"].get<uint64_t>(), kGiB) << status.dump();
  EXPECT_EQ(status["devices"][1]["used_bytes"].get<uint64_t>(), 512 * kMiB) << status.dump();
  std::cout << "[ multigpu ] caps 1 GiB / 512 MiB: allocated "
            << r0["allocated"].get<uint64_t>() / kMiB << " / "
            << r1["allocated"].get<uint64_t>() / kMiB << " MiB (+64 MiB context each); broker used "
            << used[0] / kMiB << " / " << used[1] / kMiB << " MiB; device used "
            << status["devices"][0]["used_bytes"].get<uint64_t>() / kMiB << " / "
            << status["devices"][1]["used_bytes"].get<uint64_t>() / kMiB << " MiB" << std::endl;

  // Gone: both books return to 0 on both devices.
  on0.kill_now(SIGKILL);
  on1.kill_now(SIGKILL);
  on0.wait(std::chrono::seconds(5));
  on1.wait(std::chrono::seconds(5));
  wait_until(
      [&] {
        auto u = broker_memory_used("split");
        return u[0] == 0 && u[1] == 0;
      },
      std::chrono::seconds(3));
  used = broker_memory_used("split");
  EXPECT_EQ(used[0], 0u);
  EXPECT_EQ(used[1], 0u);
}

// (b) Each device scheduled on its own: 70/30 on device 0 and 30/70 on device 1.
TEST_F(MultiGpu, EachDeviceIsScheduledIndependently) {
  create({"--memory", "512MiB", "--gpu", "0,1", "--compute", "0=70,1=30"}, "east");
  create({"--memory", "512MiB", "--gpu", "0,1", "--compute", "0=30,1=70"}, "west");
  auto spin = [&](const std::string& tenant, int device) -> BackgroundProcess& {
    return start({FRACGPU_SPIN_CLIENT, "--kernel-us", "1000", "--seconds", "60",
                  "--stream-sync-every", "8", "--device", std::to_string(device)},
                 tenant_env(tenant));
  };
  BackgroundProcess& east0 = spin("east", 0);
  BackgroundProcess& west0 = spin("west", 0);
  BackgroundProcess& east1 = spin("east", 1);
  BackgroundProcess& west1 = spin("west", 1);
  struct Placement {
    BackgroundProcess* p;
    int device;
  };
  const std::vector<Placement> all = {{&east0, 0}, {&west0, 0}, {&east1, 1}, {&west1, 1}};
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  for (;;) {
    auto s = ctl_status(base_env_);
    bool running = true;
    for (const auto& pl : all) {
      ASSERT_TRUE(pl.p->running()) << pl.p->err();
      running = running && process_value(s, pl.device, pl.p->pid(), "busy_us") > 0;
    }
    if (running) break;
    ASSERT_LT(Clock::now(), deadline) << "not every client ran a kernel: " << s.dump();
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::this_thread::sleep_for(milliseconds(500));
  auto a = ctl_status(base_env_);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(milliseconds(5000));
  auto b = ctl_status(base_env_);
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const auto& pl : all) pl.p->kill_now(SIGTERM);
  for (const auto& pl : all) pl.p->wait(std::chrono::seconds(5));

  auto delta = [&](const Placement& pl) {
    return static_cast<double>(process_value(b, pl.device, pl.p->pid(), "busy_us") -
                               process_value(a, pl.device, pl.p->pid(), "busy_us")) /
           1e6;
  };
  const double e0 = delta(all[0]), w0 = delta(all[1]), e1 = delta(all[2]), w1 = delta(all[3]);
  ASSERT_GT(e0 + w0, 0);
  ASSERT_GT(e1 + w1, 0);
  const double east_share0 = e0 / (e0 + w0), east_share1 = e1 / (e1 + w1);
  std::ostringstream summary;
  summary << "device 0: east (70) " << pct(east_share0) << " west (30) " << pct(1 - east_share0)
          << ", busy " << pct((e0 + w0) / wall) << " | device 1: east (30) " << pct(east_share1)
          << " west (70) " << pct(1 - east_share1) << ", busy " << pct((e1 + w1) / wall)
          << " | window " << std::setprecision(3) << wall << " s";
  std::cout << "[ multigpu ] shares: " << summary.str() << std::endl;
  RecordProperty("shares", summary.str());
  EXPECT_NEAR(east_share0, 0.70, 0.03) << summary.str();
  EXPECT_NEAR(east_share1, 0.30, 0.03) << summary.str();
  EXPECT_EQ(b["devices"][0].value("overlap_violations", uint64_t{1}), 0u);
  EXPECT_EQ(b["devices"][1].value("overlap_violations", uint64_t{1}), 0u);
}

// (c) CUDA_VISIBLE_DEVICES as indexes and UUIDs; the caps follow the device seen.
TEST_F(MultiGpu, VisibleDevicesByIndexOrUuidAndCapsFollowTheDevice) {
  const auto uuid = uuids();
  ASSERT_EQ(uuid.size(), 2u);
  ASSERT_NE(uuid[0], uuid[1]);
  create({"--memory", "0=1GiB,1=512MiB", "--gpu", "0,1"}, "seen");

  struct Case {
    std::string visible;
    std::vector<int> physical;  // what each ordinal must be
  };
  const std::vector<Case> cases = {{"1", {1}},
                                   {"1,0", {1, 0}},
                                   {"0", {0}},
                                   {uuid[1], {1}},
                                   {uuid[1] + "," + uuid[0], {1, 0}},
                                   {"1,7,0", {1}},  // the list ends at an unknown device
                                   {"0,0", {0}}};   // ... and at a repeated one
  const uint64_t cap[2] = {kGiB, 512 * kMiB};
  for (const Case& c : cases) {
    SCOPED_TRACE("CUDA_VISIBLE_DEVICES=" + c.visible);
    for (bool with_shim : {false, true}) {
      SCOPED_TRACE(with_shim ? "with the shim" : "driver alone");
      Environment env = with_shim ? tenant_env("seen") : native_env();
      env["CUDA_VISIBLE_DEVICES"] = c.visible;
      ProcessResult r = run_process({FRACGPU_ALLOC_CLIENT, "devices"}, env);
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      auto doc = last_json_line(r.out);
      ASSERT_EQ(doc["count"].get<size_t>(), c.physical.size()) << r.out;
      EXPECT_EQ(doc["get_beyond"], "CUDA_ERROR_INVALID_DEVICE");
      for (size_t i = 0; i < c.physical.size(); ++i) {
        const auto& d = doc["devices"][i];
        const int phys = c.physical[i];
        EXPECT_EQ(d["device"].get<int>(), static_cast<int>(i))
            << "cuDeviceGet(ordinal) is the ordinal";
        EXPECT_EQ(d["ctx_device"].get<int>(), static_cast<int>(i))
            << "cuCtxGetDevice gives the ordinal";
        EXPECT_EQ(d["uuid"], uuid[static_cast<size_t>(phys)]);
        const uint64_t expected_total = with_shim ? cap[phys] : 4 * kGiB;
        EXPECT_EQ(d["device_total"].get<uint64_t>(), expected_total) << r.out;
        EXPECT_EQ(d["info_total"].get<uint64_t>(), expected_total) << r.out;
      }
    }
  }
  // No device left visible: cuInit says so, as the real driver does.
  Environment none = native_env();
  none["CUDA_VISIBLE_DEVICES"] = "5";
  ProcessResult r = run_process({FRACGPU_ALLOC_CLIENT, "devices"}, none);
  EXPECT_NE(r.out.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << r.out << r.err;

  // Allocation follows the device too: ordinal 0 of CUDA_VISIBLE_DEVICES=1 is GPU 1,
  // with GPU 1's cap, charged to GPU 1 in both books.
  Environment env = tenant_env("seen");
  env["CUDA_VISIBLE_DEVICES"] = uuid[1];
  BackgroundProcess& p = start(fill_holding(0), env);
  auto held = wait_holding(p);
  ASSERT_TRUE(held.contains("allocated")) << p.out() << p.err();
  EXPECT_EQ(held["allocated"].get<uint64_t>(), 512 * kMiB - 64 * kMiB);
  auto used = broker_memory_used("seen");
  EXPECT_EQ(used[0], 0u);
  EXPECT_EQ(used[1], 512 * kMiB);
  auto status = ctl_status(base_env_);
  EXPECT_EQ(process_value(status, 1, p.pid(), "used_bytes"), 512 * kMiB) << status.dump();
  EXPECT_EQ(process_value(status, 0, p.pid(), "used_bytes"), 0u) << status.dump();
}

// `fracgpu run --gpu 1,0 --memory 0=1GiB,1=512MiB`: the command sees the GPUs in --gpu's
// order (the CLI sets CUDA_VISIBLE_DEVICES to their UUIDs), each with its own cap.
TEST_F(MultiGpu, RunWithPerDeviceCapsSeesEachCapInGpuOrder) {
  const auto uuid = uuids();
  ASSERT_EQ(uuid.size(), 2u);
  Environment env = base_env_;
  env["FRACGPU_SHIM"] = FRACGPU_SHIM_PATH;
  env["FRACGPU_REAL_DRIVER"] = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
  ProcessResult r =
      run_process({FRACGPU_CLI, "--run-dir", run_dir(), "run", "--name", "ordered", "--gpu", "1,0",
                   "--memory", "0=1GiB,1=512MiB", "--", FRACGPU_ALLOC_CLIENT, "devices"},
                  env, std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto doc = last_json_line(r.out);
  ASSERT_EQ(doc["count"], 2) << r.out;
  EXPECT_EQ(doc["devices"][0]["uuid"], uuid[1]);
  EXPECT_EQ(doc["devices"][0]["info_total"].get<uint64_t>(), 512 * kMiB);
  EXPECT_EQ(doc["devices"][1]["uuid"], uuid[0]);
  EXPECT_EQ(doc["devices"][1]["info_total"].get<uint64_t>(), kGiB);
  // A malformed map stops `run` before anything starts.
  ProcessResult bad = run_process({FRACGPU_CLI, "--run-dir", run_dir(), "run", "--gpu", "0,1",
                                   "--memory", "0=1GiB,1=1GiB,1=2GiB", "--", "true"},
                                  env, std::chrono::seconds(30));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--memory names GPU 1 twice"), std::string::npos) << bad.err;
}

// `fracgpu set NAME --compute 1=80` changes GPU 1 only.
TEST_F(MultiGpu, SetWithAMapChangesOnlyTheNamedGpus) {
  create({"--memory", "0=1GiB,1=512MiB", "--gpu", "0,1", "--compute", "50"}, "tuned");
  ProcessResult r = cli({"set", "tuned", "--compute", "1=80", "--memory", "1=768MiB"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto doc = nlohmann::json::parse(cli({"status", "--json"}).out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  std::map<unsigned, nlohmann::json> by_gpu;
  for (const auto& t : doc["tenants"])
    if (t["name"] == "tuned")
      for (const auto& d : t["devices"]) by_gpu[d["gpu"].get<unsigned>()] = d;
  ASSERT_EQ(by_gpu.size(), 2u) << doc.dump();
  EXPECT_EQ(by_gpu[0]["compute"], 50);
  EXPECT_EQ(by_gpu[1]["compute"], 80);
  EXPECT_EQ(by_gpu[0]["memory_limit"].get<uint64_t>(), kGiB);
  EXPECT_EQ(by_gpu[1]["memory_limit"].get<uint64_t>(), 768 * kMiB);
  ProcessResult bad = cli({"set", "tuned", "--compute", "2=80"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--compute names GPU 2"), std::string::npos) << bad.err;
  ProcessResult twice = cli({"set", "tuned", "--compute", "1=80,1=70"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("--compute names GPU 1 twice"), std::string::npos) << twice.err;
}

// (d) Peer-access queries and enabling pass through the shim unchanged.
TEST_F(MultiGpu, PeerAccessQueriesPassThroughTheShim) {
  create({"--memory", "1GiB", "--gpu", "0,1"}, "peers");
  ProcessResult direct = run_process({FRACGPU_ALLOC_CLIENT, "peers"}, native_env());
  ProcessResult shimmed = run_process({FRACGPU_ALLOC_CLIENT, "peers"}, tenant_env("peers"));
  ASSERT_EQ(direct.exit_code, 0) << direct.out << direct.err;
  ASSERT_EQ(shimmed.exit_code, 0) << shimmed.out << shimmed.err;
  auto a = last_json_line(direct.out);
  auto b = last_json_line(shimmed.out);
  ASSERT_FALSE(a.is_discarded()) << direct.out;
  EXPECT_EQ(a, b) << "driver: " << a.dump() << "\nshim:   " << b.dump();
  ASSERT_EQ(a["count"], 2);
  // The simulated pair: peers of each other, not of themselves.
  const auto& pair01 = a["pairs"][1];
  EXPECT_EQ(pair01["can_access"][1], 1);
  EXPECT_EQ(pair01["enable"], "CUDA_SUCCESS");
  EXPECT_EQ(pair01["enable_again"], "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED");
  EXPECT_EQ(pair01["disable"], "CUDA_SUCCESS");
  EXPECT_EQ(pair01["disable_again"], "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED");
  EXPECT_EQ(a["pairs"][0]["can_access"][1], 0);
  EXPECT_EQ(a["out_of_range"], "CUDA_ERROR_INVALID_DEVICE");
  // Under CUDA_VISIBLE_DEVICES=1 there is no peer, with or without the shim.
  Environment one_native = native_env(), one_shim = tenant_env("peers");
  one_native["CUDA_VISIBLE_DEVICES"] = one_shim["CUDA_VISIBLE_DEVICES"] = "1";
  auto c = last_json_line(run_process({FRACGPU_ALLOC_CLIENT, "peers"}, one_native).out);
  auto d = last_json_line(run_process({FRACGPU_ALLOC_CLIENT, "peers"}, one_shim).out);
  EXPECT_EQ(c, d);
  EXPECT_EQ(c["count"], 1);
}

}  // namespace
}  // namespace fracgpu::testing
