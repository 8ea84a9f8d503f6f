// Compute scheduling end to end (issue "Compute quotas", item 4): the real broker and CLI,
// tenants' processes (fracgpu-spin-client, 1 ms kernels) with the shim preloaded over the
// simulated GPU. Every figure is measured on the simulated device, independently of the
// broker: `fakecuda-ctl status` gives each process's busy time (`busy_us`), read at the
// start and the end of a window; a tenant's share is its busy delta over the sum of the
// tenants' deltas, and the device's utilisation is that sum over the window's wall time.
//
//   * weights 70/30, 50/50, 90/10 and 50/30/20 split the device within 2 points, and the
//     contended device stays >= 95 % busy;
//   * a lone tenant with weight 30 gets >= 95 % (work-conserving); a ceiling of 30 on an
//     otherwise idle device gives 30 +- 2 %;
//   * a `high` tenant's request latency next to a 1 ms batch tenant stays within its own
//     latency alone plus one batch kernel plus a margin (on a device with a 1 ms
//     timeslice; see the test);
//   * `fracgpu set` answers in < 200 ms and the new weights hold from 200 ms on;
//   * a tenant SIGKILLed while it holds the GPU stalls the others for < 1 s, and the
//     survivor then has the whole device (a kill while waiting at the gate: disabled,
//     a broker bug, see there).
// Windows are 5 s (2 s where a test needs a sequence, 1 s after a kill); the file runs in
// about 50 s and its tests are RUN_SERIAL, since they measure time. Every test logs its
// figures ("[ compute  ]" lines, and as test properties in the XML report).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "broker_fixture.h"

namespace fracgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kWindow = milliseconds(5000);  // measurement window of a share test
constexpr auto kSettle = milliseconds(500);   // after every tenant ran its first kernel
constexpr double kShareTolerance = 0.02;      // +- 2 points of the target share
constexpr double kMinUtilisation = 0.95;      // of the device's time, under contention
constexpr double kMaxLossToNative = 0.03;     // below it: at most this under a lone native client

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string pct(double fraction) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << fraction * 100 << "%";
  return s.str();
}

// One reading of the simulated device.
struct DeviceSample {
  Clock::time_point at;               // midpoint of the fakecuda-ctl call
  std::map<pid_t, uint64_t> busy_us;  // per process (dead ones too, once they ran work)
  uint64_t device_busy_us = 0;
  uint64_t overlap_violations = 0;
  pid_t engine_owner = 0;
  bool ok = false;
  std::string raw;

  uint64_t busy(pid_t pid) const {
    auto it = busy_us.find(pid);
    return it == busy_us.end() ? 0 : it->second;
  }
};

struct Tenant {
  std::string name;
  uint32_t weight = 100;
  std::unique_ptr<BackgroundProcess> process;
  pid_t pid() const { return process->pid(); }
};

// A window's figures: per tenant, its busy time and share.
struct WindowResult {
  double wall_s = 0;
  std::vector<double> busy_s;
  std::vector<double> share;
  double utilisation = 0;  // sum of busy / wall
  uint64_t overlap_violations = 0;
  std::string summary;
};

class ComputeShare : public BrokerFixture {
 protected:
  void TearDown() override {
    tenants_.clear();  // SIGKILLs whatever still runs, before the broker goes
    BrokerFixture::TearDown();
  }

  // Creates a tenant through the real CLI; `extra` are further flags (--compute-limit, --priority).
  void create(const std::string& name, uint32_t weight, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"tenant",   "create",    name,
                                     "--memory", "512MiB",    "--gpu",
                                     "0",        "--compute", std::to_string(weight)};
    args.insert(args.end(), extra.begin(), extra.end());
    ProcessResult r = cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  // Starts a spin client of tenant `name` (1 ms kernels, a sync every 8, for up to 60 s).
  Tenant& spin(const std::string& name, uint32_t weight, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        FRACGPU_SPIN_CLIENT, "--kernel-us", "1000", "--seconds", "60", "--stream-sync-every", "8"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    tenants_.push_back(
        Tenant{name, weight,
               std::make_unique<BackgroundProcess>(
                   argv, tenant_env(name),
                   dir_.path() + "/" + name + "-" + std::to_string(tenants_.size()))});
    return tenants_.back();
  }

  DeviceSample sample() { return sample(base_env_); }
  DeviceSample sample(const Environment& env) {
    DeviceSample s;
    const auto before = Clock::now();
    ProcessResult r = run_process({FRACGPU_FAKECUDA_CTL, "status"}, env, std::chrono::seconds(10));
    const auto after = Clock::now();
    s.at = before + (after - before) / 2;
    s.raw = r.out;
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    if (r.exit_code != 0 || doc.is_discarded() || !doc.contains("devices") ||
        doc["devices"].empty())
      return s;
    const auto& d = doc["devices"][0];
    s.device_busy_us = d.value("busy_us", uint64_t{0});
    s.overlap_violations = d.value("overlap_violations", uint64_t{0});
    s.engine_owner = static_cast<pid_t>(d.value("engine_owner_pid", int64_t{0}));
    for (const auto& p : d["processes"]) {
      s.busy_us[static_cast<pid_t>(p["pid"].get<int64_t>())] = p["busy_us"].get<uint64_t>();
    }
    s.ok = true;
    return s;
  }

  // Waits until every tenant's process ran work on the device (its first kernel went
  // through the scheduler), then kSettle more.
  void wait_all_running() {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    for (;;) {
      DeviceSample s = sample();
      bool all = s.ok;
      for (auto& t : tenants_) {
        ASSERT_TRUE(t.process->running()) << t.name << " exited early: " << t.process->err();
        all = all && s.busy(t.pid()) > 0;
      }
      if (all) break;
      ASSERT_LT(Clock::now(), deadline) << "not every tenant got to run a kernel: " << s.raw;
      std::this_thread::sleep_for(milliseconds(20));
    }
    std::this_thread::sleep_for(kSettle);
  }

  WindowResult between(const DeviceSample& a, const DeviceSample& b) const {
    WindowResult w;
    w.wall_s = seconds_between(a.at, b.at);
    double total = 0;
    for (const auto& t : tenants_) {
      const double busy = static_cast<double>(b.busy(t.pid()) - a.busy(t.pid())) / 1e6;
      w.busy_s.push_back(busy);
      total += busy;
    }
    std::ostringstream s;
    for (std::size_t i = 0; i < tenants_.size(); ++i) {
      w.share.push_back(total > 0 ? w.busy_s[i] / total : 0);
      s << tenants_[i].name << " (weight " << tenants_[i].weight << ") " << pct(w.share[i]) << " ["
        << std::fixed << std::setprecision(3) << w.busy_s[i] << " s]  ";
    }
    w.utilisation = w.wall_s > 0 ? total / w.wall_s : 0;
    w.overlap_violations = b.overlap_violations - a.overlap_violations;
    s << "| device busy " << pct(w.utilisation) << " of " << std::setprecision(3) << w.wall_s
      << " s";
    w.summary = s.str();
    return w;
  }

  // One window of `length`, read every second on the way so that the log shows how the
  // shares moved (a transient, a stall) when a test fails.
  WindowResult measure(milliseconds length) {
    std::vector<DeviceSample> samples{sample()};
    const auto start = Clock::now();
    for (auto next = start + milliseconds(1000); next < start + length;
         next += milliseconds(1000)) {
      std::this_thread::sleep_until(next);
      samples.push_back(sample());
    }
    std::this_thread::sleep_until(start + length);
    samples.push_back(sample());
    for (const auto& s : samples) EXPECT_TRUE(s.ok) << s.raw;
    WindowResult w = between(samples.front(), samples.back());
    if (samples.size() > 2) {
      std::ostringstream per_second;
      for (std::size_t i = 1; i < samples.size(); ++i) {
        WindowResult part = between(samples[i - 1], samples[i]);
        per_second << "[";
        for (std::size_t t = 0; t < part.share.size(); ++t)
          per_second << (t ? " " : "") << pct(part.share[t]);
        per_second << " busy " << pct(part.utilisation) << "] ";
      }
      w.summary +=
          "\n    per second: " + per_second.str() + "\n    load average: " + load_average();
    }
    return w;
  }

  // Only when a utilisation check failed: what one spin client reaches right now without
  // fracgpu, alone on a private simulated device. Below 95 % it is the machine (CPU
  // starvation delays the simulated device's executor), not the scheduler.
  // What a lone spin client without fracgpu keeps a private simulated device busy now: the
  // machine's own ceiling (a loaded 2-core machine takes points off it, fracgpu or not).
  double native_utilisation() {
    Environment env = native_env();
    const std::string shm = "/" + unique_name("reference");
    env["FAKECUDA_SHM_NAME"] = shm;
    BackgroundProcess client(
        {FRACGPU_SPIN_CLIENT, "--kernel-us", "1000", "--seconds", "2", "--stream-sync-every", "8"},
        env, dir_.path() + "/reference");
    std::this_thread::sleep_for(milliseconds(500));
    DeviceSample a = sample(env);
    std::this_thread::sleep_for(milliseconds(1000));
    DeviceSample b = sample(env);
    client.wait(std::chrono::seconds(5));
    shm_unlink(shm.c_str());
    const double busy = static_cast<double>(b.device_busy_us - a.device_busy_us) / 1e6;
    return busy / seconds_between(a.at, b.at);
  }
  static std::string native_reference(double native) {
    return "(for reference, a lone spin client without fracgpu reaches " + pct(native) +
           " of a private simulated device on this machine now)";
  }

  // The device kept busy: at least kMinUtilisation, or, where the machine itself is the
  // cause (a loaded 2-core machine takes points off a lone client too), within
  // kMaxLossToNative of a lone client without fracgpu measured now.
  void expect_busy(const WindowResult& w, const std::string& failure) {
    if (w.utilisation >= kMinUtilisation) return;
    const double native = native_utilisation();
    if (w.utilisation < native - kMaxLossToNative) {
      ADD_FAILURE() << failure << ": " << w.summary << "\n" << native_reference(native);
      return;
    }
    log("busy", "below " + pct(kMinUtilisation) + ", within " + pct(kMaxLossToNative) +
                    " of native " + native_reference(native));
  }

  static std::string load_average() {
    std::string text = read_text("/proc/loadavg");
    return text.substr(0, text.find(' ', text.find(' ', text.find(' ') + 1) + 1));
  }

  // The broker's own view (compute_measured_share over its last ~2 s), for the log.
  std::map<std::string, double> broker_shares() {
    std::map<std::string, double> out;
    ProcessResult r = cli({"status", "--json"});
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    if (doc.is_discarded() || !doc.contains("tenants")) return out;
    for (const auto& t : doc["tenants"]) {
      const auto& d = t["devices"][0];
      if (d.contains("compute_measured_share"))
        out[t["name"]] = d["compute_measured_share"].get<double>();
    }
    return out;
  }

  // SIGTERM every tenant; each must finish its launches and exit 0 within 5 s.
  void stop_all() {
    for (auto& t : tenants_) t.process->kill_now(SIGTERM);
    for (auto& t : tenants_) {
      const int status = t.process->wait(std::chrono::seconds(5));
      EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << t.name << " did not stop cleanly (status " << status << "): " << t.process->err();
    }
  }

  void log(const std::string& key, const std::string& line) {
    std::cout << "[ compute  ] " << key << ": " << line << std::endl;
    RecordProperty(key, line);
  }

  // Weights -> busy tenants for 5 s; shares within 2 points of weight / sum of weights,
  // the device >= 95 % busy, and the broker's measured shares near the same figures.
  void expect_shares(const std::vector<std::pair<std::string, uint32_t>>& weights) {
    double sum = 0;
    for (const auto& [name, w] : weights) {
      create(name, w);
      sum += w;
    }
    for (const auto& [name, w] : weights) spin(name, w);
    wait_all_running();
    if (HasFatalFailure()) return;
    WindowResult w = measure(kWindow);
    auto broker = broker_shares();
    stop_all();

    log("shares", w.summary);
    std::ostringstream b;
    for (const auto& [name, share] : broker) b << name << " " << pct(share) << "  ";
    log("broker_measured", b.str());
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const double target = weights[i].second / sum;
      EXPECT_NEAR(w.share[i], target, kShareTolerance) << weights[i].first << ": " << w.summary;
      if (broker.count(weights[i].first)) {
        EXPECT_NEAR(broker[weights[i].first], target, 0.05)
            << "the broker's own measured share: " << b.str();
      }
    }
    expect_busy(w, "the contended device idled");
    EXPECT_LE(w.utilisation, 1.01) << "more busy time than wall time: " << w.summary;
    EXPECT_EQ(w.overlap_violations, 0u);
  }

  std::vector<Tenant> tenants_;
};

// Items 1 and 2: weighted shares under contention, and the device kept busy.
TEST_F(ComputeShare, Weights70And30SplitTheDeviceAndKeepItBusy) {
  expect_shares({{"seventy", 70}, {"thirty", 30}});
}

TEST_F(ComputeShare, Weights50And50SplitTheDeviceAndKeepItBusy) {
  expect_shares({{"left", 50}, {"right", 50}});
}

TEST_F(ComputeShare, Weights90And10SplitTheDeviceAndKeepItBusy) {
  expect_shares({{"ninety", 90}, {"ten", 10}});
}

TEST_F(ComputeShare, Weights50And30And20SplitTheDeviceAndKeepItBusy) {
  expect_shares({{"fifty", 50}, {"thirty", 30}, {"twenty", 20}});
}

// Item 3: weights are relative; a tenant alone gets the whole device whatever its weight.
TEST_F(ComputeShare, ALoneTenantWithShare30GetsTheWholeDevice) {
  create("alone", 30);
  spin("alone", 30);
  wait_all_running();
  WindowResult w = measure(kWindow);
  stop_all();
  log("lone_share30", w.summary);
  expect_busy(w, "a lone tenant idled");
  EXPECT_LE(w.utilisation, 1.01) << w.summary;
}

// Item 4: a ceiling holds even when nobody else wants the device.
TEST_F(ComputeShare, ACeilingOf30HoldsOnAnIdleDevice) {
  create("capped", 100, {"--compute-limit", "30"});
  spin("capped", 100);
  wait_all_running();
  WindowResult w = measure(kWindow);
  stop_all();
  log("ceiling30", w.summary);
  EXPECT_LE(w.utilisation, 0.32) << "the ceiling did not hold: " << w.summary;
  // Under it by at most 2 points of what this machine reaches now without fracgpu (a loaded
  // machine takes the same fraction off a capped tenant as off a lone one).
  if (w.utilisation < 0.28) {
    const double native = std::min(1.0, native_utilisation());
    EXPECT_GE(w.utilisation, 0.30 * native - 0.02) << w.summary << "\n" << native_reference(native);
  }
}

// Item 5: a `high` tenant serving requests (one 100 us kernel, then a sync, then 1 ms of
// think time) next to a normal batch tenant that launches 1 ms kernels nonstop.
// Bound: p99 with the batch tenant <= p99 alone + 1.5 ms, i.e. one batch kernel (1 ms:
// the high launch is never held at the gate, but waits for the batch kernel that is
// running; the broker keeps the batch tenant's queue to --high-inflight-us = 500 us,
// which with 1 ms kernels is that one kernel) plus 0.5 ms for wake-ups on a loaded
// machine. The batch tenant must keep most of the device meanwhile (the high tenant's
// requests are ~8 % of the time), so the bound is not bought by starving it.
// The simulated device runs with FAKECUDA_TIMESLICE_US=1000 here (it preempts at the
// length of one batch kernel): with its default 2 ms timeslice the device alone, without
// fracgpu, already makes these requests wait up to a whole timeslice (p99 ~2.2 ms
// measured natively), because an executor whose host refills its queue before it
// notices the queue ran dry keeps the engine until its timeslice ends.
TEST_F(ComputeShare, AHighPriorityTenantsWaitIsBoundedByOneBatchKernel) {
  broker_.signal(SIGTERM);
  ASSERT_TRUE(broker_.wait(std::chrono::seconds(5)).has_value());
  shm_unlink(shm_name_.c_str());
  base_env_["FAKECUDA_TIMESLICE_US"] = "1000";
  start_broker();  // creates the device afresh, with the 1 ms timeslice
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(nlohmann::json::parse(sample().raw, nullptr, false).value("timeslice_us", 0), 1000);
  create("serve", 100, {"--priority", "high"});
  create("batch", 100);
  const std::vector<std::string> serve_args = {"--kernel-us", "100",  "--stream-sync-every", "1",
                                               "--think-us",  "1000", "--warmup-ms",         "300"};
  auto run_serve = [&](const std::string& seconds, const std::string& tag) -> nlohmann::json {
    const std::string report = dir_.path() + "/serve-" + tag + ".json";
    std::vector<std::string> argv = {FRACGPU_SPIN_CLIENT, "--seconds", seconds, "--report", report};
    argv.insert(argv.end(), serve_args.begin(), serve_args.end());
    ProcessResult r = run_process(argv, tenant_env("serve"), std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto doc = nlohmann::json::parse(read_text(report), nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << read_text(report);
    return doc.is_discarded() ? nlohmann::json{{"requests", 0}, {"latency_us", {{"p99", 0}}}} : doc;
  };

  // Alone: the reference latency on this machine, now.
  nlohmann::json alone = run_serve("2.3", "alone");
  // With the batch tenant busy.
  spin("batch", 100);
  wait_all_running();
  ASSERT_FALSE(HasFatalFailure());
  DeviceSample a = sample();
  nlohmann::json mixed = run_serve("5.3", "mixed");
  DeviceSample b = sample();
  WindowResult w = between(a, b);
  stop_all();

  const auto& la = alone["latency_us"];
  const auto& lm = mixed["latency_us"];
  std::ostringstream s;
  s << "alone: " << alone["requests"] << " requests p50 " << la["p50"] << " us p99 " << la["p99"]
    << " us max " << la["max"] << " us | with batch: " << mixed["requests"] << " requests p50 "
    << lm["p50"] << " us p90 " << lm["p90"] << " us p99 " << lm["p99"] << " us max " << lm["max"]
    << " us | batch busy " << std::fixed << std::setprecision(3) << w.busy_s[0] << " s of "
    << w.wall_s << " s";
  log("high_latency", s.str());
  ASSERT_GT(alone["requests"].get<uint64_t>(), 500u) << s.str();
  ASSERT_GT(mixed["requests"].get<uint64_t>(), 1000u) << s.str();
  const uint64_t bound_us = la["p99"].get<uint64_t>() + 1000 + 500;
  EXPECT_LE(lm["p99"].get<uint64_t>(), bound_us) << s.str();
  EXPECT_GE(w.busy_s[0] / w.wall_s, 0.5) << "the batch tenant was starved: " << s.str();
}

// Item 6: `fracgpu set` answers in < 200 ms, and from 200 ms after it the device is
// split by the new weights (70/30 -> 10/30, i.e. 25/75).
TEST_F(ComputeShare, ASetTakesEffectWithin200Milliseconds) {
  create("alpha", 70);
  create("beta", 30);
  spin("alpha", 70);
  spin("beta", 30);
  wait_all_running();
  ASSERT_FALSE(HasFatalFailure());
  WindowResult before = measure(milliseconds(2000));
  log("before_set", before.summary);
  EXPECT_NEAR(before.share[0], 0.70, 0.05) << before.summary;

  const DeviceSample at_set = sample();
  const auto set_start = Clock::now();
  ProcessResult r = cli({"set", "alpha", "--compute", "10"});
  const auto answered = Clock::now();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const double answer_ms = seconds_between(set_start, answered) * 1000;
  tenants_[0].weight = 10;

  // busy_us every ~50 ms for 2.5 s after the change.
  std::vector<DeviceSample> samples{at_set};
  while (Clock::now() - set_start < milliseconds(2500)) {
    std::this_thread::sleep_for(milliseconds(50));
    samples.push_back(sample());
  }
  stop_all();

  auto first_after = [&](milliseconds offset) -> const DeviceSample& {
    for (const auto& s : samples) {
      if (s.at >= set_start + offset) return s;
    }
    return samples.back();
  };
  // Successive 200 ms windows, for the log.
  std::ostringstream seq;
  for (int ms = 0; ms + 200 <= 2400; ms += 200) {
    WindowResult part = between(first_after(milliseconds(ms)), first_after(milliseconds(ms + 200)));
    seq << ms << "-" << ms + 200 << "ms alpha " << pct(part.share[0]) << "  ";
  }
  const DeviceSample& from = first_after(milliseconds(200));
  const DeviceSample& to = first_after(milliseconds(2200));
  WindowResult after = between(from, to);
  std::ostringstream s;
  s << "set answered in " << std::fixed << std::setprecision(1) << answer_ms << " ms; "
    << after.summary << " (window from +" << seconds_between(set_start, from.at) * 1000 << " ms)";
  log("after_set", s.str());
  log("after_set_200ms_windows", seq.str());

  EXPECT_LT(answer_ms, 200.0) << s.str();
  EXPECT_GE(after.wall_s, 1.9) << s.str();
  EXPECT_GE(seconds_between(set_start, from.at), 0.2);
  EXPECT_NEAR(after.share[0], 0.25, 0.05) << s.str();
  EXPECT_NEAR(after.share[1], 0.75, 0.05) << s.str();
  EXPECT_GE(after.utilisation, kMinUtilisation) << s.str();
}

// Item 7: a tenant SIGKILLed while it holds the GPU (it owns the simulated engine, with
// kernels in flight) does not stall the other: the survivor's busy time grows again
// within 1 s, and from 1 s after the kill on it has the device to itself (>= 90 %).
class ComputeKill : public ComputeShare {
 protected:
  // Two tenants of equal weight spin; once `moment` has been seen on two device readings
  // in a row, the victim is SIGKILLed and the survivor watched for 2 s.
  void kill_and_watch(const std::string& what, bool victim_owns_engine) {
    create("victim", 100);
    create("survivor", 100);
    const pid_t victim_pid = spin("victim", 100).pid();
    const pid_t survivor_pid = spin("survivor", 100).pid();
    wait_all_running();
    ASSERT_FALSE(HasFatalFailure());
    const TenantLedger* victim_ledger = ledger("victim");
    ASSERT_NE(victim_ledger, nullptr);

    DeviceSample last;
    int in_a_row = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (in_a_row < 2 && Clock::now() < deadline) {
      last = sample();
      const bool seen = victim_owns_engine ? last.engine_owner == victim_pid
                                           : last.engine_owner == survivor_pid &&
                                                 victim_ledger->devices[0].waiting.load() > 0;
      in_a_row = seen ? in_a_row + 1 : 0;
    }
    ASSERT_EQ(in_a_row, 2) << "never caught the victim " << what << ": " << last.raw;
    const uint64_t survivor_before = last.busy(survivor_pid);
    ::kill(victim_pid, SIGKILL);
    const auto killed = Clock::now();

    // The survivor must be running kernels again (5 ms of device time) within 1 s.
    DeviceSample now;
    double resumed_s = -1;
    while (Clock::now() - killed < std::chrono::seconds(2)) {
      now = sample();
      if (now.busy(survivor_pid) >= survivor_before + 5000) {
        resumed_s = seconds_between(killed, now.at);
        break;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    tenants_.erase(tenants_.begin());  // reaps the victim
    // From 1 s after the kill, the survivor alone: the whole device.
    std::this_thread::sleep_until(killed + milliseconds(1000));
    WindowResult alone = measure(milliseconds(1000));
    const auto victim_status = broker_tenant_state("victim");
    stop_all();
    std::ostringstream s;
    s << "victim killed " << what << "; survivor resumed " << std::fixed << std::setprecision(3)
      << resumed_s << " s after the kill; from +1 s: " << alone.summary
      << "\n    the dead victim's ledger: waiting " << victim_ledger->devices[0].waiting.load()
      << ", broker: " << victim_status;
    log("kill", s.str());
    ASSERT_GE(resumed_s, 0) << "the survivor never ran again: " << now.raw;
    EXPECT_LE(resumed_s, 1.0) << s.str();
    EXPECT_GE(alone.utilisation, 0.9) << "the survivor does not get the whole device: " << s.str();
  }

  // "STATE, GPU-TIME s, processes N" of a tenant in the broker's status.
  std::string broker_tenant_state(const std::string& name) {
    ProcessResult r = cli({"status", "--json"});
    auto doc = nlohmann::json::parse(r.out, nullptr, false);
    if (doc.is_discarded() || !doc.contains("tenants")) return "?";
    for (const auto& t : doc["tenants"]) {
      if (t["name"] != name) continue;
      const auto& d = t["devices"][0];
      std::ostringstream s;
      s << d.value("compute_state", std::string("?")) << ", measured share "
        << pct(d.value("compute_measured_share", 0.0)) << ", " << t["processes"].size()
        << " processes";
      return s.str();
    }
    return "?";
  }
};

TEST_F(ComputeKill, ATenantKilledWhileHoldingTheGpuDoesNotStallTheOthers) {
  kill_and_watch("while holding the GPU", true);
}

// A process SIGKILLed while one of its threads is blocked at the launch gate: its
// waiting count lives in its own slot, so the broker stops counting it the moment the
// process is seen dead and the survivor gets the device (this once kept ~49 % of it
// for the dead tenant, when waiting was one tenant-wide counter).
TEST_F(ComputeKill, ATenantKilledWhileWaitingForTheGpuDoesNotKeepItsTurn) {
  kill_and_watch("while waiting at the launch gate", false);
}

}  // namespace
}  // namespace fracgpu::testing
