// Failing open fast, end to end: the real broker and CLI, tenants' spin clients (1 ms
// kernels) with the shim preloaded over the simulated GPU.
//   * the broker SIGKILLed while a tenant's thread waits at the launch gate: the thread
//     launches within 100 ms (its death is seen on the doorbell; asserted with a margin
//     for a loaded 2-core machine, the figure is printed);
//   * a broker started again: the gates come back and the weights hold from 1 s on;
//   * the holder SIGSTOPped (mid-slice) and a waiter SIGSTOPped: the other tenant gets
//     >= 85 % of its solo rate while the stop lasts; after SIGCONT the stopped tenant is
//     scheduled again.
// Figures come from the simulated device (fakecuda-ctl status: per-process busy time)
// and from the tenants' ledgers (threads waiting at the gate), never from the broker.
// Every test prints its figures as "[ failopen ]" lines.
#include <signal.h>

#include <cstdio>
#include <map>
#include <thread>

#include "broker_fixture.h"

namespace fracgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_since(Clock::time_point a, Clock::time_point b = Clock::now()) {
  return std::chrono::duration<double>(b - a).count();
}

// Per-process busy time of the simulated device, and which process owns its engine.
struct Reading {
  Clock::time_point at;
  std::map<pid_t, uint64_t> busy_us;
  pid_t engine_owner = 0;
  bool ok = false;
  uint64_t busy(pid_t pid) const {
    auto it = busy_us.find(pid);
    return it == busy_us.end() ? 0 : it->second;
  }
};

class FailOpen : public BrokerFixture {
 protected:
  void TearDown() override {
    for (auto& [name, p] : spinners_) ::kill(p->pid(), SIGCONT);
    spinners_.clear();
    BrokerFixture::TearDown();
  }

  void create(const std::string& name, uint32_t weight) {
    ProcessResult r = cli({"tenant", "create", name, "--memory", "512MiB", "--gpu", "0",
                           "--compute", std::to_string(weight)});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  pid_t spin(const std::string& name) {
    auto p = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_SPIN_CLIENT, "--kernel-us", "1000", "--seconds", "60",
                                 "--stream-sync-every", "8"},
        tenant_env(name), dir_.path() + "/" + name);
    const pid_t pid = p->pid();
    spinners_[name] = std::move(p);
    return pid;
  }

  Reading read_device() {
    Reading r;
    const auto before = Clock::now();
    ProcessResult out =
        run_process({FRACGPU_FAKECUDA_CTL, "status"}, base_env_, std::chrono::seconds(10));
    r.at = before + (Clock::now() - before) / 2;
    auto doc = nlohmann::json::parse(out.out, nullptr, false);
    if (out.exit_code != 0 || doc.is_discarded() || !doc.contains("devices") ||
        doc["devices"].empty())
      return r;
    const auto& d = doc["devices"][0];
    r.engine_owner = static_cast<pid_t>(d.value("engine_owner_pid", int64_t{0}));
    for (const auto& p : d["processes"])
      r.busy_us[static_cast<pid_t>(p["pid"].get<int64_t>())] = p["busy_us"].get<uint64_t>();
    r.ok = true;
    return r;
  }

  // Waits until each of `pids` ran device work, then 500 ms more.
  void wait_running(const std::vector<pid_t>& pids) {
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    for (;;) {
      Reading r = read_device();
      bool all = r.ok;
      for (pid_t pid : pids) all = all && r.busy(pid) > 0;
      if (all) break;
      ASSERT_LT(Clock::now(), deadline) << "not every tenant ran a kernel";
      std::this_thread::sleep_for(milliseconds(20));
    }
    std::this_thread::sleep_for(milliseconds(500));
  }

  // Device seconds per wall second of each of `pids` over `length`.
  std::vector<double> rates(const std::vector<pid_t>& pids, milliseconds length) {
    const Reading a = read_device();
    std::this_thread::sleep_for(length);
    const Reading b = read_device();
    EXPECT_TRUE(a.ok && b.ok);
    std::vector<double> out;
    const double wall = std::chrono::duration<double>(b.at - a.at).count();
    for (pid_t pid : pids)
      out.push_back(static_cast<double>(b.busy(pid) - a.busy(pid)) / 1e6 / wall);
    return out;
  }

  // Threads blocked at a gate, from the processes' own slots (DeviceUsage.waiting is the
  // broker's copy of this sum, which stops moving when the broker is gone).
  uint32_t waiting(const TenantLedger* ledger) const {
    uint32_t total = 0;
    for (uint32_t i = 0; i < kMaxProcesses; ++i)
      if (ledger->processes[i].state.load() == static_cast<uint32_t>(SlotState::kLive))
        total += ledger->schedule[i][0].waiting.load();
    return total;
  }

  std::map<std::string, std::unique_ptr<BackgroundProcess>> spinners_;
};

// The reported stall: a 70 % tenant ran nothing for the 2 s until the old fail-open.
TEST_F(FailOpen, ATenantWaitingWhenTheBrokerIsKilledLaunchesWithin100Ms) {
  create("heavy", 70);
  create("light", 30);
  const pid_t heavy = spin("heavy");
  const pid_t light = spin("light");
  wait_running({heavy, light});
  ASSERT_FALSE(HasFatalFailure());
  const TenantLedger* heavy_ledger = ledger("heavy");
  const TenantLedger* light_ledger = ledger("light");
  ASSERT_NE(heavy_ledger, nullptr);
  ASSERT_NE(light_ledger, nullptr);

  // Catch a moment when one of them waits at its gate (the other holds the GPU).
  const TenantLedger* waiter = nullptr;
  wait_until(
      [&] {
        waiter = waiting(heavy_ledger) > 0   ? heavy_ledger
                 : waiting(light_ledger) > 0 ? light_ledger
                                             : nullptr;
        return waiter != nullptr;
      },
      milliseconds(5000));
  ASSERT_NE(waiter, nullptr) << "no tenant ever waited at its gate";
  const auto killed = Clock::now();
  broker_.signal(SIGKILL);
  while (waiting(waiter) > 0 && seconds_since(killed) < 3)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  const double passed_s = seconds_since(killed);
  const std::string who = waiter == heavy_ledger ? "heavy (weight 70)" : "light (weight 30)";
  std::printf("[ failopen ] broker SIGKILLed while %s waited: it launched %.1f ms later\n",
              who.c_str(), passed_s * 1000);
  EXPECT_LT(passed_s, 0.25) << "the old fail-open took 2 s";
  // Both run unscheduled now: each keeps its processes' kernels going.
  const std::vector<double> r = rates({heavy, light}, milliseconds(500));
  std::printf("[ failopen ] without a broker: heavy %.2f, light %.2f device-s/s\n", r[0], r[1]);
  EXPECT_GT(r[0], 0.1);
  EXPECT_GT(r[1], 0.1);
  EXPECT_EQ(broker_.wait(milliseconds(2000)).value_or(-1), 128 + SIGKILL);

  // A new broker (same state, same segments): within 1 s the weights hold again.
  const auto restart = Clock::now();
  start_broker();
  ASSERT_FALSE(HasFatalFailure());
  const auto started = Clock::now();
  const auto gated = wait_until(
      [&] { return waiting(heavy_ledger) > 0 || waiting(light_ledger) > 0; }, milliseconds(3000));
  std::printf(
      "[ failopen ] broker restarted in %.0f ms; a gate held a launch again %lld ms after\n",
      seconds_since(restart, started) * 1000, static_cast<long long>(gated.count()));
  EXPECT_LT(gated.count(), 1000);
  std::this_thread::sleep_until(started + milliseconds(1000));
  const std::vector<double> back = rates({heavy, light}, milliseconds(2000));
  const double heavy_share = back[0] / (back[0] + back[1]);
  std::printf("[ failopen ] from 1 s after the restart: heavy %.1f%% (weight 70), busy %.1f%%\n",
              heavy_share * 100, (back[0] + back[1]) * 100);
  EXPECT_NEAR(heavy_share, 0.70, 0.08);
}

class StoppedTenant : public FailOpen {
 protected:
  // `other` alone for its solo rate; then `stopped` (weight 70) joins and is SIGSTOPped
  // holding the engine, or waiting at its gate while the other holds the engine (a stop
  // during its own drain is the holder's case: passed over after the drain timeout, 1 s);
  // the other's rate over the stop
  // is compared with its solo rate; then SIGCONT, and the stopped one must run again.
  void stop_and_watch(bool while_holding) {
    create("stopped", 70);
    create("other", 30);
    const pid_t other = spin("other");
    wait_running({other});
    ASSERT_FALSE(HasFatalFailure());
    const double solo = rates({other}, milliseconds(1000))[0];
    const pid_t stopped = spin("stopped");
    wait_running({stopped, other});
    ASSERT_FALSE(HasFatalFailure());
    const TenantLedger* stopped_ledger = ledger("stopped");
    ASSERT_NE(stopped_ledger, nullptr);

    bool caught = false;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!caught && Clock::now() < deadline) {
      if (while_holding) {
        caught = read_device().engine_owner == stopped && waiting(stopped_ledger) == 0;
      } else {  // waiting while the other holds the engine: its own drain is over
        caught = read_device().engine_owner == other && waiting(stopped_ledger) > 0;
      }
      if (caught) ::kill(stopped, SIGSTOP);
    }
    ASSERT_TRUE(caught) << "never caught the tenant " << (while_holding ? "holding" : "waiting");
    const auto stop_at = Clock::now();
    const bool was_waiting = waiting(stopped_ledger) > 0;
    // A holder that never drains is passed over after the drain timeout (1 s).
    std::this_thread::sleep_until(stop_at + milliseconds(while_holding ? 1200 : 300));
    const std::vector<double> during = rates({other, stopped}, milliseconds(2000));
    std::printf(
        "[ failopen ] SIGSTOP of the weight-70 tenant (%s): the other ran %.3f device-s/s, "
        "%.1f%% of its solo %.3f; the stopped one %.3f\n",
        was_waiting ? "waiting at its gate" : "holding the GPU", during[0], during[0] / solo * 100,
        solo, during[1]);
    EXPECT_GE(during[0], 0.85 * solo);

    ::kill(stopped, SIGCONT);
    const auto resumed = Clock::now();
    const uint64_t before = read_device().busy(stopped);
    const auto ran = wait_until([&] { return read_device().busy(stopped) >= before + 5000; },
                                milliseconds(3000));
    std::printf("[ failopen ] SIGCONT: the stopped tenant ran 5 ms of kernels %lld ms later\n",
                static_cast<long long>(ran.count()));
    EXPECT_LT(ran.count(), 1000);
    std::this_thread::sleep_until(resumed + milliseconds(1000));
    const std::vector<double> after = rates({stopped, other}, milliseconds(2000));
    const double share = after[0] / (after[0] + after[1]);
    std::printf("[ failopen ] from 1 s after SIGCONT: the weight-70 tenant has %.1f%%\n",
                share * 100);
    EXPECT_NEAR(share, 0.70, 0.08);
  }
};

TEST_F(StoppedTenant, AHolderStoppedMidSliceIsPassedOverUntilItRunsAgain) {
  stop_and_watch(true);
}

TEST_F(StoppedTenant, ATenantStoppedAtItsGateIsNotGrantedWhileStopped) {
  stop_and_watch(false);
}

}  // namespace
}  // namespace fracgpu::testing
