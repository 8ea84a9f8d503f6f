// MPS mode end to end (broker --mps, docs/design.md "MPS mode"): the real broker and CLI,
// the simulated GPU's MPS control daemon (fakecuda-mps-control, fakecuda/src/mps_state.h)
// and tenants' processes (fracgpu-spin-client) with the shim preloaded.
//   * the broker starts the daemon in <run>/mps/pipe, restarts it after a kill -9, says
//     so in `fracgpu status --json` ("sharing"), quits it at shutdown; a daemon that
//     cannot start leaves the broker time-slicing, and status says why;
//   * the tenants' processes become clients of that server with their class's priority
//     (high 0, normal 1), even when their own environment names another pipe directory;
//   * a high tenant's requests next to a batch tenant of 0.2 ms kernels: p99 in MPS mode
//     below time-slice mode's and within a bound from the model; the batch keeps most of
//     its solo GPU time;
//   * weights 70/30 between two normal tenants still hold.
// Figures come from the simulated device (`fakecuda-ctl status`, busy time per process)
// and from the clients' own request timings; every test logs them ("[ mps      ]").
// Timing-sensitive: RUN_SERIAL, each test well under 20 s.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "broker_fixture.h"

namespace fracgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Alive and not a zombie (a daemon that exited waits for its reaper a while).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const std::size_t close = text.rfind(')');
  return pid > 0 && close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

std::string command_of(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string argv0;
  std::getline(file, argv0, '\0');
  return argv0;
}

class MpsMode : public BrokerFixture {
 protected:
  void SetUp() override {
    extra_broker_args_ = mps_args();
    BrokerFixture::SetUp();
  }
  void TearDown() override {
    processes_.clear();  // SIGKILLs the tenants' processes still running
    stop_broker();
    stop_leftover_daemon();
    BrokerFixture::TearDown();
  }

  static std::vector<std::string> mps_args() {
    return {"--mps", "--mps-control", FRACGPU_MPS_CONTROL};
  }
  std::string pipe_dir() const { return run_dir() + "/mps/pipe"; }
  pid_t daemon_pid() const {
    std::ifstream file(pipe_dir() + "/nvidia-cuda-mps-control.pid");
    pid_t pid = 0;
    file >> pid;
    return pid;
  }
  // SIGTERM: the broker's own shutdown (which quits the daemon when no tenant runs).
  void stop_broker() {
    if (!broker_.running()) return;
    broker_.signal(SIGTERM);
    if (!broker_.wait(std::chrono::seconds(8))) broker_.kill();
  }
  // Only the daemon this test's broker started (its pid file, its command).
  void stop_leftover_daemon() {
    const pid_t pid = daemon_pid();
    if (running(pid) && command_of(pid).find("fakecuda-mps-control") != std::string::npos)
      ::kill(pid, SIGKILL);
  }
  nlohmann::json sharing() {
    ProcessResult r = cli({"status", "--json"});
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    if (doc.is_discarded() || !doc.contains("gpus") || doc["gpus"].empty())
      return nlohmann::json::object();
    return doc["gpus"][0].value("sharing", nlohmann::json::object());
  }
  nlohmann::json device_status() {
    ProcessResult r = run_process({FRACGPU_FAKECUDA_CTL, "status"}, base_env_);
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  // The simulated device's record of a process (empty if not listed).
  nlohmann::json process_record(pid_t pid) {
    const auto doc = device_status();
    if (doc.is_discarded() || !doc.contains("devices")) return nlohmann::json::object();
    for (const auto& p : doc["devices"][0]["processes"])
      if (p.value("pid", 0) == pid) return p;
    return nlohmann::json::object();
  }
  uint64_t busy_us(pid_t pid) { return process_record(pid).value("busy_us", uint64_t{0}); }

  void create(const std::string& name, uint32_t weight, const std::string& priority = "normal") {
    ProcessResult r = cli({"tenant", "create", name, "--memory", "512MiB", "--gpu", "0",
                           "--compute", std::to_string(weight), "--priority", priority});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  // A spin client of tenant `name` with kernels of the whole simulated device (132 blocks).
  BackgroundProcess& spin(const std::string& name, std::vector<std::string> args,
                          Environment extra = {}) {
    std::vector<std::string> argv = {FRACGPU_SPIN_CLIENT, "--blocks", "132"};
    argv.insert(argv.end(), args.begin(), args.end());
    Environment env = tenant_env(name);
    for (const auto& [k, v] : extra) env[k] = v;
    processes_.push_back(std::make_unique<BackgroundProcess>(
        argv, env, dir_.path() + "/" + name + "-" + std::to_string(processes_.size())));
    return *processes_.back();
  }
  // Waits until `pid` ran work on the device.
  bool wait_running(pid_t pid) {
    return wait_until([&] { return busy_us(pid) > 0; }, milliseconds(10000)) < milliseconds(10000);
  }
  void log(const std::string& key, const std::string& line) {
    std::cout << "[ mps      ] " << key << ": " << line << std::endl;
    RecordProperty(key, line);
  }

  std::vector<std::unique_ptr<BackgroundProcess>> processes_;
};

// (a) The daemon's life under the broker: started, restarted after kill -9, quit at shutdown.
TEST_F(MpsMode, TheBrokerRunsRestartsAndQuitsTheDaemon) {
  nlohmann::json s = sharing();
  ASSERT_EQ(s.value("mode", ""), "mps") << s.dump();
  EXPECT_EQ(s.value("state", ""), "running") << s.dump();
  const pid_t first = daemon_pid();
  ASSERT_TRUE(running(first)) << "no daemon behind " << pipe_dir();
  EXPECT_EQ(s.value("pid", 0), first);
  EXPECT_EQ(s.value("pipe_dir", ""), pipe_dir());

  ASSERT_EQ(::kill(first, SIGKILL), 0);  // the daemon this test's broker started
  pid_t second = 0;
  const auto took = wait_until(
      [&] {
        second = daemon_pid();
        return second != first && running(second) && sharing().value("state", "") == "running";
      },
      milliseconds(5000));
  ASSERT_LT(took, milliseconds(5000)) << "not restarted: " << sharing().dump();
  s = sharing();
  EXPECT_EQ(s.value("pid", 0), second);
  EXPECT_EQ(s.value("restarts", 0), 1);
  log("restart", "daemon " + std::to_string(first) + " killed, " + std::to_string(second) +
                     " serving after " + std::to_string(took.count()) + " ms");
  // The restarted daemon serves: a tenant's process becomes its client.
  create("after", 100);
  BackgroundProcess& p = spin("after", {"--kernel-us", "200", "--seconds", "20"});
  ASSERT_TRUE(wait_running(p.pid())) << p.err();
  EXPECT_EQ(process_record(p.pid()).value("mps_server_pid", 0), second);
  processes_.clear();

  stop_broker();
  EXPECT_FALSE(running(second)) << "the daemon outlived the broker's shutdown";
  EXPECT_FALSE(std::filesystem::exists(pipe_dir() + "/nvidia-cuda-mps-control.pid"));
  const std::string log_text = read_text(dir_.path() + "/broker-1.log");
  EXPECT_NE(log_text.find("exited; restarting"), std::string::npos) << log_text;
  EXPECT_NE(log_text.find("quit"), std::string::npos) << log_text;
}

// A daemon that cannot start: the broker serves anyway, time-sliced, and says why.
TEST_F(MpsMode, ADaemonThatCannotStartLeavesTheBrokerTimeSlicing) {
  stop_broker();
  extra_broker_args_ = {"--mps", "--mps-control", dir_.path() + "/no-such-mps-control"};
  start_broker();
  ASSERT_FALSE(HasFatalFailure());
  const nlohmann::json s = sharing();
  EXPECT_EQ(s.value("mode", ""), "mps") << s.dump();
  EXPECT_EQ(s.value("state", ""), "failed") << s.dump();
  EXPECT_NE(s.value("error", "").find("no-such-mps-control"), std::string::npos) << s.dump();
  create("plain", 100);
  BackgroundProcess& p = spin("plain", {"--kernel-us", "200", "--seconds", "20"});
  ASSERT_TRUE(wait_running(p.pid())) << p.err();
  EXPECT_FALSE(process_record(p.pid()).contains("mps_server_pid"));
  EXPECT_TRUE(broker_.running());
}

// (b) Tenants' processes are clients of the broker's server with their class's priority.
TEST_F(MpsMode, TenantProcessesAreMpsClientsWithTheirClassPriority) {
  create("serve", 100, "high");
  create("batch", 100);
  // The batch's own environment names another MPS server: the shim overrides it.
  BackgroundProcess& batch = spin(
      "batch", {"--kernel-us", "200", "--seconds", "20"},
      {{"CUDA_MPS_PIPE_DIRECTORY", dir_.path() + "/elsewhere"}, {"CUDA_MPS_CLIENT_PRIORITY", "0"}});
  BackgroundProcess& serve = spin("serve", {"--kernel-us", "100", "--seconds", "20",
                                            "--stream-sync-every", "1", "--think-us", "2000"});
  ASSERT_TRUE(wait_running(batch.pid())) << batch.err();
  ASSERT_TRUE(wait_running(serve.pid())) << serve.err();
  const pid_t server = daemon_pid();
  const nlohmann::json b = process_record(batch.pid()), h = process_record(serve.pid());
  log("clients", "batch " + b.dump() + " | serve " + h.dump());
  EXPECT_EQ(b.value("mps_server_pid", 0), server) << b.dump();
  EXPECT_EQ(b.value("mps_priority", -1), 1) << b.dump();
  EXPECT_EQ(h.value("mps_server_pid", 0), server) << h.dump();
  EXPECT_EQ(h.value("mps_priority", -1), 0) << h.dump();
  const std::string warning = batch.err();
  EXPECT_NE(warning.find("CUDA_MPS_PIPE_DIRECTORY=" + dir_.path() + "/elsewhere is overridden"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("CUDA_MPS_CLIENT_PRIORITY=0 is overridden with 1"), std::string::npos)
      << warning;
}

struct LatencyRun {
  nlohmann::json report;  // the serving client's
  double batch_busy = 0;  // fraction of the window the batch's kernels held the device
  std::string summary;
};

// (c) A high tenant's requests (one 100 us kernel of the whole device, a sync, 2 ms of
// think time) next to a batch tenant of 0.2 ms kernels, first in MPS mode, then with the
// same broker restarted without --mps (time-sliced).
// The model (mps_state.h: no context switch; a request waits for the batch kernel running
// when it comes, never for the batch's queue) bounds a request's extra wait by one batch
// kernel: p90 <= the request's p90 alone + 0.2 ms + 0.3 ms for wake-ups. The bound is
// checked at p90 because on a loaded 2-core machine the p99 is the host's: stalls of
// 1-3 ms of any of the five processes involved (the p99 alone varied from 0.28 to 2.7 ms
// between two runs). Time-sliced, a request the burst guard does not shield waits for the
// engine's 2 ms timeslice: its p90 (1.6-1.9 ms measured) and p99 (1.9-4.5 ms) are above MPS
// mode's (0.3-0.4 ms, 0.4-3.1 ms), which is asserted for both.
// The batch keeps >= 0.75 of its solo GPU time: the requests take ~5 % of the device and
// MPS mode holds nothing else back (measured 0.89-1.1 of solo); the solo and the shared
// windows are seconds apart on a loaded 2-core machine, where a client's busy fraction
// moves by +-10 % from one second to the next, hence the margin.
TEST_F(MpsMode, AHighTenantWaitsLessBesideShortKernelsThanTimeSliced) {
  create("serve", 100, "high");
  create("batch", 100);
  const std::vector<std::string> serve_args = {"--kernel-us", "100",  "--stream-sync-every", "1",
                                               "--think-us",  "2000", "--warmup-ms",         "300"};
  auto serve = [&](const std::string& seconds, const std::string& tag) {
    const std::string report = dir_.path() + "/serve-" + tag + ".json";
    std::vector<std::string> argv = {FRACGPU_SPIN_CLIENT, "--blocks", "132", "--seconds", seconds,
                                     "--report",          report};
    argv.insert(argv.end(), serve_args.begin(), serve_args.end());
    ProcessResult r = run_process(argv, tenant_env("serve"), std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto doc = nlohmann::json::parse(read_text(report), nullptr, false);
    return doc.is_discarded() ? nlohmann::json{{"requests", 0}, {"latency_us", {{"p99", 0}}}} : doc;
  };
  auto with_batch = [&](const std::string& tag) {
    LatencyRun run;
    BackgroundProcess& batch = spin("batch", {"--kernel-us", "200", "--seconds", "30"});
    EXPECT_TRUE(wait_running(batch.pid())) << batch.err();
    std::this_thread::sleep_for(milliseconds(300));
    const uint64_t b0 = busy_us(batch.pid());
    const auto t0 = Clock::now();
    run.report = serve("3.3", tag);
    const double wall_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    run.batch_busy = static_cast<double>(busy_us(batch.pid()) - b0) / wall_us;
    processes_.clear();
    const auto& l = run.report["latency_us"];
    std::ostringstream s;
    s << run.report["requests"] << " requests p50 " << l["p50"] << " p90 " << l["p90"] << " p99 "
      << l["p99"] << " max " << l["max"] << " us; batch busy " << std::fixed << std::setprecision(3)
      << run.batch_busy;
    run.summary = s.str();
    return run;
  };

  // The batch alone, then the request loop alone, then both (MPS mode).
  BackgroundProcess& solo = spin("batch", {"--kernel-us", "200", "--seconds", "30"});
  ASSERT_TRUE(wait_running(solo.pid())) << solo.err();
  std::this_thread::sleep_for(milliseconds(300));
  const uint64_t s0 = busy_us(solo.pid());
  const auto st = Clock::now();
  std::this_thread::sleep_for(milliseconds(2000));
  const double solo_busy = static_cast<double>(busy_us(solo.pid()) - s0) /
                           std::chrono::duration<double, std::micro>(Clock::now() - st).count();
  processes_.clear();
  const nlohmann::json alone = serve("1.8", "alone");
  const LatencyRun mps = with_batch("mps");

  // The same tenants time-sliced: the broker restarted without --mps.
  stop_broker();
  stop_leftover_daemon();
  extra_broker_args_.clear();
  start_broker();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(sharing().value("mode", ""), "time-slice");
  const LatencyRun ts = with_batch("ts");

  const auto pct = [](const nlohmann::json& report, const char* p) {
    return report["latency_us"].value(p, uint64_t{0});
  };
  std::ostringstream s;
  s << "alone p90 " << pct(alone, "p90") << " p99 " << pct(alone, "p99") << " us; batch solo busy "
    << std::fixed << std::setprecision(3) << solo_busy << " | MPS: " << mps.summary
    << " | time-sliced: " << ts.summary;
  log("latency", s.str());
  ASSERT_GT(alone["requests"].get<uint64_t>(), 300u) << s.str();
  ASSERT_GT(mps.report["requests"].get<uint64_t>(), 800u) << s.str();
  ASSERT_GT(ts.report["requests"].get<uint64_t>(), 300u) << s.str();
  EXPECT_LT(pct(mps.report, "p99"), pct(ts.report, "p99")) << s.str();
  EXPECT_LT(pct(mps.report, "p90"), pct(ts.report, "p90")) << s.str();
  EXPECT_LE(pct(mps.report, "p90"), pct(alone, "p90") + 200 + 300) << s.str();
  EXPECT_GE(mps.batch_busy, 0.75 * solo_busy) << s.str();
}

// (d) Weights between normal tenants hold in MPS mode: 70/30 within 3 points, and the
// device stays >= 80 % busy (an MPS client's kernel costs the simulated device's threads
// a few more wake-ups than a time-sliced one: 0.83-0.95 measured on the loaded 2-core
// machine, where time slicing reaches 0.95).
TEST_F(MpsMode, Weights70And30StillSplitTheDevice) {
  create("seventy", 70);
  create("thirty", 30);
  BackgroundProcess& a = spin("seventy", {"--kernel-us", "1000", "--seconds", "30"});
  BackgroundProcess& b = spin("thirty", {"--kernel-us", "1000", "--seconds", "30"});
  ASSERT_TRUE(wait_running(a.pid())) << a.err();
  ASSERT_TRUE(wait_running(b.pid())) << b.err();
  EXPECT_EQ(process_record(a.pid()).value("mps_server_pid", 0), daemon_pid());
  std::this_thread::sleep_for(milliseconds(500));
  const uint64_t a0 = busy_us(a.pid()), b0 = busy_us(b.pid());
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(milliseconds(4000));
  const double da = static_cast<double>(busy_us(a.pid()) - a0);
  const double db = static_cast<double>(busy_us(b.pid()) - b0);
  const double wall = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  std::ostringstream s;
  s << std::fixed << std::setprecision(3) << "seventy " << da / (da + db) << ", thirty "
    << db / (da + db) << ", device busy " << (da + db) / wall;
  log("weights", s.str());
  EXPECT_NEAR(da / (da + db), 0.70, 0.03) << s.str();
  EXPECT_GE((da + db) / wall, 0.80) << s.str();
  EXPECT_EQ(device_status()["devices"][0].value("overlap_violations", 1), 0);
}

}  // namespace
}  // namespace fracgpu::testing
