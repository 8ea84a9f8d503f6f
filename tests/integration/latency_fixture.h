// The integration fixture of the latency-isolation tests (latency_isolation_test.cpp): a
// broker of our own, time-sliced or --mps over the simulated MPS daemon, with a `serve`
// tenant (the request loop, fracgpu-spin-client in latency mode) and a `batch` tenant
// (back-to-back kernels of the whole device); the batch can also run without the shim on
// a private simulated device, to load the host alike while leaving the test's device
// alone. HostProbe measures how late the host wakes a sleeping thread meanwhile.
#pragma once

#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "broker_fixture.h"

namespace fracgpu::testing::latency {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The request loop: one 100 us kernel of the whole device + a synchronize per request.
inline constexpr uint32_t kRequestKernelUs = 100;
inline constexpr uint32_t kThinkUs = 1000;       // regular think time, Poisson mean
inline constexpr uint32_t kBurstSize = 5;        // requests back to back ...
inline constexpr uint32_t kBurstPauseUs = 4000;  // ... then this pause

enum class Mode { kTimeSlice, kMps };

// Alive and not a zombie.
inline bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const std::size_t close = text.rfind(')');
  return pid > 0 && close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

inline std::string command_of(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string argv0;
  std::getline(file, argv0, '\0');
  return argv0;
}

inline std::vector<std::string> words_of(const char* text) {
  std::vector<std::string> out;
  std::istringstream in(text == nullptr ? "" : text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : v;
}

// The 1-minute load average.
inline double load_average() {
  return std::strtod(read_text("/proc/loadavg").c_str(), nullptr);
}

// Microseconds: a request loop's latencies (the client's report; zeros when it failed)
// or HostProbe's lateness.
struct Percentiles {
  uint64_t count = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  std::string text() const {
    std::ostringstream s;
    s << count << " req p50 " << p50 << " p90 " << p90 << " p99 " << p99 << " max " << max;
    return s.str();
  }
  std::string brief() const {
    return std::to_string(p50) + "/" + std::to_string(p90) + "/" + std::to_string(p99);
  }
};

// The host's own scheduling delay while a run goes on: a thread of the test that sleeps
// 1 ms over and over and records how late it wakes. The simulated device needs host CPU
// to switch contexts (its executors are threads), so when the host wakes threads
// milliseconds late, a sub-millisecond wait cannot be measured at all.
class HostProbe {
 public:
  HostProbe() : thread_([this] { run(); }) {}
  ~HostProbe() { stop(); }
  // Stops the probe; nearest-rank percentiles of the lateness in microseconds.
  Percentiles stop() {
    if (thread_.joinable()) {
      stop_.store(true);
      thread_.join();
    }
    std::sort(late_us_.begin(), late_us_.end());
    Percentiles r;
    r.count = late_us_.size();
    auto pct = [&](double p) -> uint64_t {
      if (late_us_.empty()) return 0;
      const auto rank = static_cast<std::size_t>(p * static_cast<double>(late_us_.size()) + 0.999);
      return late_us_[std::clamp<std::size_t>(rank, 1, late_us_.size()) - 1];
    };
    r.p50 = pct(0.5), r.p90 = pct(0.9), r.p99 = pct(0.99), r.max = pct(1.0);
    return r;
  }

 private:
  void run() {
    while (!stop_.load()) {
      const auto due = Clock::now() + milliseconds(1);
      std::this_thread::sleep_until(due);
      const auto late = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - due);
      late_us_.push_back(static_cast<uint64_t>(std::max<int64_t>(0, late.count())));
    }
  }

  std::atomic<bool> stop_{false};
  std::vector<uint64_t> late_us_;
  std::thread thread_;  // last: starts once the rest is built
};

class LatencyFixture : public BrokerFixture {
 protected:
  void SetUp() override {}  // start(mode) brings the broker up in the mode the test wants
  void start(Mode mode) {
    mode_ = mode;
    extra_broker_args_ = words_of(std::getenv("FRACGPU_LATENCY_BROKER_ARGS"));
    if (mode == Mode::kMps)
      extra_broker_args_.insert(extra_broker_args_.begin(),
                                {"--mps", "--mps-control", FRACGPU_MPS_CONTROL});
    BrokerFixture::SetUp();
  }
  void TearDown() override {
    processes_.clear();  // SIGKILLs the tenants' processes still running
    if (broker_.running()) {
      broker_.signal(SIGTERM);  // the broker quits its MPS daemon when no tenant runs
      if (!broker_.wait(std::chrono::seconds(8))) broker_.kill();
    }
    stop_leftover_daemon();
    shm_unlink(elsewhere_shm_.c_str());
    BrokerFixture::TearDown();
  }
  // Only the daemon this test's broker started (its pid file, its command).
  void stop_leftover_daemon() {
    std::ifstream file(run_dir() + "/mps/pipe/nvidia-cuda-mps-control.pid");
    pid_t pid = 0;
    file >> pid;
    if (running(pid) && command_of(pid).find("fakecuda-mps-control") != std::string::npos)
      ::kill(pid, SIGKILL);
  }

  void create(const std::string& name, const std::string& priority) {
    ProcessResult r = cli({"tenant", "create", name, "--memory", "512MiB", "--gpu", "0",
                           "--compute", "100", "--priority", priority});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  void create_tenants(const std::string& batch_priority) {
    create("serve", env_or("FRACGPU_LATENCY_SERVE_PRIORITY", "high"));
    create("batch", batch_priority);
    if (mode_ == Mode::kMps) {
      ProcessResult r = cli({"status", "--json"});
      auto doc = nlohmann::json::parse(r.out, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << r.out << r.err;
      ASSERT_EQ(doc["gpus"][0]["sharing"].value("state", ""), "running") << r.out;
    }
  }

  // The batch: back-to-back kernels of the whole device, a sync every ~10 ms of work
  // (a framework's step), so its queue stays as deep as the in-flight bound lets it.
  // kBeside: tenant "batch" on the test's device; kElsewhere: without the shim on a
  // private simulated device, which loads the host alike but leaves the test's device alone.
  enum class Place { kBeside, kElsewhere };
  Environment device_env(Place place) const {
    if (place == Place::kBeside) return base_env_;
    Environment env = native_env();
    env["FAKECUDA_SHM_NAME"] = elsewhere_shm_;
    return env;
  }
  BackgroundProcess& start_batch(uint32_t kernel_us, Place place) {
    const uint32_t sync_every = std::max<uint32_t>(4, 10'000 / kernel_us);
    const std::vector<std::string> argv = {FRACGPU_SPIN_CLIENT,
                                           "--blocks",
                                           "132",
                                           "--kernel-us",
                                           std::to_string(kernel_us),
                                           "--stream-sync-every",
                                           std::to_string(sync_every),
                                           "--seconds",
                                           "60"};
    processes_.push_back(std::make_unique<BackgroundProcess>(
        argv, place == Place::kBeside ? tenant_env("batch") : device_env(place),
        dir_.path() + "/batch-" + std::to_string(processes_.size())));
    return *processes_.back();
  }

  // A process's busy time on a simulated device (0 if not listed).
  uint64_t busy_us(pid_t pid, Place place) {
    ProcessResult r = run_process({FRACGPU_FAKECUDA_CTL, "status"}, device_env(place));
    const auto doc = nlohmann::json::parse(r.out, nullptr, false);
    if (doc.is_discarded() || !doc.contains("devices")) return 0;
    for (const auto& p : doc["devices"][0]["processes"])
      if (p.value("pid", 0) == pid) return p.value("busy_us", uint64_t{0});
    return 0;
  }

  // Runs `during` while a batch runs at `place` (from 200 ms after its first kernel);
  // returns the batch's busy fraction of its device meanwhile.
  template <typename During>
  double with_batch(uint32_t kernel_us, Place place, During during) {
    BackgroundProcess& batch = start_batch(kernel_us, place);
    const auto ran = [&] { return busy_us(batch.pid(), place) > 0; };
    EXPECT_LT(wait_until(ran, milliseconds(10000)), milliseconds(10000)) << batch.err();
    std::this_thread::sleep_for(milliseconds(200));
    const uint64_t b0 = busy_us(batch.pid(), place);
    const auto t0 = Clock::now();
    during();
    const double wall_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    const double busy = static_cast<double>(busy_us(batch.pid(), place) - b0) / wall_us;
    EXPECT_TRUE(batch.running()) << "the batch exited early: " << batch.err();
    processes_.clear();
    return busy;
  }

  // The request loop for `seconds` (the first 200 ms not counted), as tenant "serve".
  Percentiles serve(const std::string& arrivals, double seconds, const std::string& tag) {
    const std::string report = dir_.path() + "/serve-" + tag + ".json";
    const bool burst = arrivals == "burst";
    std::ostringstream secs;
    secs << seconds;
    ProcessResult r = run_process({FRACGPU_SPIN_CLIENT,
                                   "--blocks",
                                   "132",
                                   "--kernel-us",
                                   std::to_string(kRequestKernelUs),
                                   "--stream-sync-every",
                                   "1",
                                   "--think-us",
                                   std::to_string(burst ? kBurstPauseUs : kThinkUs),
                                   "--arrivals",
                                   arrivals,
                                   "--burst-size",
                                   std::to_string(kBurstSize),
                                   "--seed",
                                   "7",
                                   "--warmup-ms",
                                   "200",
                                   "--seconds",
                                   secs.str(),
                                   "--report",
                                   report},
                                  tenant_env("serve"), std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto doc = nlohmann::json::parse(read_text(report), nullptr, false);
    Percentiles q;
    if (doc.is_discarded() || !doc.contains("latency_us")) return q;
    EXPECT_EQ(doc.value("arrivals", ""), arrivals);
    const auto& l = doc["latency_us"];
    q.count = doc.value("requests", uint64_t{0});
    q.p50 = l.value("p50", uint64_t{0});
    q.p90 = l.value("p90", uint64_t{0});
    q.p99 = l.value("p99", uint64_t{0});
    q.max = l.value("max", uint64_t{0});
    return q;
  }

  void log(const std::string& key, const std::string& line) {
    std::cout << "[ latency  ] " << key << ": " << line << std::endl;
    RecordProperty(key, line);
  }

  Mode mode_ = Mode::kTimeSlice;
  std::string elsewhere_shm_ = "/" + unique_name("elsewhere");
  std::vector<std::unique_ptr<BackgroundProcess>> processes_;
};

}  // namespace fracgpu::testing::latency
