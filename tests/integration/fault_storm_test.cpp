// The fault suite's storms, on the simulated GPU with real processes: tenant processes
// SIGKILLed at random points of allocation and launch storms (1,000 kills), and the broker
// itself killed -9 at random moments while tenants allocate, launch and an admin changes
// quotas. What must hold afterwards ("books exact"): every tenant's ledger and the
// broker's status show exactly what the surviving processes hold, which is exactly what the
// simulated device holds for them; no thread of a dead process is still counted as waiting
// for the GPU; every cap still stops allocation at the same byte; nothing a tenant or an
// admin change persisted is lost. Bounded in time: about 30 s on a loaded 2-core machine.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "broker_fixture.h"

namespace fracgpu::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr uint64_t kFootprint = 64 * kMiB;  // FAKECUDA_CONTEXT_FOOTPRINT of the fixture
constexpr uint64_t kWitnessBytes = 96 * kMiB;
constexpr uint64_t kCap = 640 * kMiB;

json parse_last_line(const std::string& out) {
  const auto end = out.find_last_not_of('\n');
  if (end == std::string::npos) return json();
  const auto start = out.rfind('\n', end);
  return json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1), nullptr,
                     false);
}

class FaultStorm : public BrokerFixture {
 protected:
  // A process of tenant `name` that holds kWitnessBytes for the whole test: the books must
  // keep showing exactly it, whatever happens to the processes around it.
  void start_witness(const std::string& name) {
    witnesses_.push_back(std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "hold", "--bytes",
                                 std::to_string(kWitnessBytes)},
        tenant_env(name), dir_.path() + "/witness-" + name));
    const TenantLedger* l = ledger(name);
    ASSERT_NE(l, nullptr);
    wait_until([&] { return l->devices[0].used.load() == kWitnessBytes + kFootprint; },
               std::chrono::seconds(15));
    ASSERT_EQ(l->devices[0].used.load(), kWitnessBytes + kFootprint) << witnesses_.back()->err();
  }

  // A victim: an allocation storm of random chunks, or a launch storm of short kernels
  // that keeps the launch gate busy (it waits for grants while others launch).
  std::unique_ptr<BackgroundProcess> start_victim(const std::string& name, std::mt19937& rng,
                                                  int serial) {
    std::vector<std::string> argv;
    if (rng() % 3 == 0) {
      argv = {FRACGPU_SPIN_CLIENT,
              "--kernel-us",
              std::to_string(50 + rng() % 400),
              "--seconds",
              "30",
              "--stream-sync-every",
              std::to_string(1 + rng() % 8)};
    } else {
      argv = {FRACGPU_ALLOC_CLIENT,
              "storm",
              "--chunk",
              std::to_string((1 + rng() % 7) * kMiB),
              "--ms",
              "30000"};
    }
    return std::make_unique<BackgroundProcess>(argv, tenant_env(name),
                                               dir_.path() + "/victim-" + std::to_string(serial));
  }

  // What the simulated device holds for live processes, by pid.
  std::map<pid_t, uint64_t> device_holdings() {
    std::map<pid_t, uint64_t> held;
    ProcessResult r = run_process({FRACGPU_FAKECUDA_CTL, "status"}, base_env_);
    const json doc = json::parse(r.out, nullptr, false);
    if (doc.is_discarded()) return held;
    for (const auto& p : doc["devices"][0]["processes"])
      if (p.value("alive", false) && p.value("used_bytes", uint64_t{0}) > 0)
        held[static_cast<pid_t>(p["pid"].get<int64_t>())] = p["used_bytes"].get<uint64_t>();
    return held;
  }

  uint32_t live_slots(const TenantLedger& l) {
    uint32_t live = 0;
    for (const ProcessSlot& s : l.processes)
      live += s.state.load() == static_cast<uint32_t>(SlotState::kLive);
    return live;
  }

  // Exactly the witness in the tenant's ledger (used, one live slot, nobody waiting) and
  // in the broker's status, within `limit`.
  void expect_books_exact(const std::vector<std::string>& tenants, milliseconds limit) {
    for (const std::string& name : tenants) {
      const TenantLedger* l = ledger(name);
      ASSERT_NE(l, nullptr) << name;
      wait_until(
          [&] {
            return l->devices[0].used.load() == kWitnessBytes + kFootprint && live_slots(*l) == 1 &&
                   l->devices[0].waiting.load() == 0;
          },
          limit);
      EXPECT_EQ(l->devices[0].used.load(), kWitnessBytes + kFootprint) << name;
      EXPECT_EQ(live_slots(*l), 1u) << name;
      EXPECT_EQ(l->devices[0].waiting.load(), 0u) << name << ": a dead thread still waits";
      EXPECT_EQ(l->devices[0].swapped.load(), 0u) << name;
    }
    ProcessResult status = cli({"status", "--json"});
    ASSERT_EQ(status.exit_code, 0) << status.err;
    const json doc = json::parse(status.out, nullptr, false);
    ASSERT_TRUE(doc.is_object()) << status.out;
    std::map<std::string, uint64_t> used;
    for (const auto& t : doc["tenants"]) used[t["name"]] = t["devices"][0]["memory_used"];
    for (const std::string& name : tenants)
      EXPECT_EQ(used[name], kWitnessBytes + kFootprint) << name << ": " << status.out;
    // The device itself: exactly the witnesses (context included) are left holding memory.
    const auto held = device_holdings();
    EXPECT_EQ(held.size(), witnesses_.size()) << "a dead process still holds device memory";
    for (const auto& w : witnesses_) {
      auto it = held.find(w->pid());
      ASSERT_NE(it, held.end()) << "witness " << w->pid() << " lost its memory";
      EXPECT_EQ(it->second, kWitnessBytes + kFootprint);
    }
  }

  // Each cap still stops a new process at the same byte.
  void expect_caps_hold(const std::vector<std::string>& tenants) {
    for (const std::string& name : tenants) {
      ProcessResult fill = run_process(
          {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(16 * kMiB)}, tenant_env(name));
      ASSERT_EQ(fill.exit_code, 0) << name << fill.out << fill.err;
      EXPECT_EQ(parse_last_line(fill.out)["allocated"].get<uint64_t>(),
                kCap - kWitnessBytes - 2 * kFootprint)
          << name;
    }
  }

  std::vector<std::unique_ptr<BackgroundProcess>> witnesses_;
};

// 1,000 SIGKILLs, 0-60 ms after each victim's start: before exec, in the loader, during the
// shim's start-up and registration, in the middle of allocations, frees and gated launches.
TEST_F(FaultStorm, AThousandRandomKillsLeaveTheBooksExact) {
  const std::vector<std::string> tenants = {"storm-a", "storm-b", "storm-c", "storm-d"};
  for (const auto& name : tenants) create_tenant(name, "640MiB");
  for (const auto& name : tenants) start_witness(name);
  ASSERT_FALSE(HasFatalFailure());

  struct Victim {
    std::unique_ptr<BackgroundProcess> process;
    Clock::time_point kill_at;
  };
  std::mt19937 rng(20261201);
  std::vector<Victim> running;
  constexpr int kKills = 1000;
  constexpr std::size_t kConcurrent = 8;
  int started = 0, killed = 0, refused = 0;
  const auto begin = Clock::now();
  while (killed < kKills && started < 3 * kKills) {
    while (running.size() < kConcurrent && started < 3 * kKills) {
      const std::string& name = tenants[rng() % tenants.size()];
      running.push_back(
          {start_victim(name, rng, started++), Clock::now() + milliseconds(rng() % 61)});
    }
    for (auto it = running.begin(); it != running.end();) {
      if (Clock::now() < it->kill_at) {
        ++it;
        continue;
      }
      if (it->process->running()) {
        it->process->kill_now(SIGKILL);
        it->process->wait(std::chrono::seconds(5));
        ++killed;
      } else {
        // Ended before its kill: the only acceptable reason is a clean refusal at the cap
        // (the storms of its tenant hold all of it), never a crash.
        const int status = it->process->wait(std::chrono::seconds(5));
        const std::string err = it->process->err();
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1 &&
                    err.find("memory cap") != std::string::npos)
            << "a victim ended by itself, status " << status << ": " << it->process->out() << err;
        ++refused;
      }
      it = running.erase(it);
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  for (Victim& v : running) {  // the last ones die too, wherever they are
    v.process->kill_now(SIGKILL);
    v.process->wait(std::chrono::seconds(5));
    ++killed;
  }
  running.clear();
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  std::printf("%d victims SIGKILLed, %d refused at their cap, in %.1f s\n", killed, refused,
              seconds);
  ASSERT_GE(killed, kKills);

  expect_books_exact(tenants, milliseconds(3000));
  expect_caps_hold(tenants);
  for (const auto& w : witnesses_) EXPECT_TRUE(w->running()) << "a witness died";
}

// The broker killed -9 at random moments (0-400 ms into each round) while victims allocate
// and launch and an admin keeps changing a tenant's cap; restarted each time. Nothing is
// lost: every tenant is back with a cap it was given, the witnesses' memory is exactly in
// the books, dead processes' memory is reclaimed, and caps hold.
TEST_F(FaultStorm, BrokerKilledAtRandomMomentsLosesNothing) {
  const std::vector<std::string> tenants = {"keep-a", "keep-b", "keep-c"};
  for (const auto& name : tenants) create_tenant(name, "640MiB");
  create_tenant("resized", "512MiB");
  for (const auto& name : tenants) start_witness(name);
  ASSERT_FALSE(HasFatalFailure());

  std::mt19937 rng(7);
  constexpr int kRounds = 12;
  int serial = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<BackgroundProcess>> victims;
    for (int i = 0; i < 4; ++i)
      victims.push_back(start_victim(tenants[rng() % tenants.size()], rng, serial++));
    // The admin change races the kill: either size may be the one that survives.
    const std::string size = round % 2 == 0 ? "768MiB" : "512MiB";
    std::thread admin([&] { cli({"tenant", "update", "resized", "--memory", size}); });
    std::this_thread::sleep_for(milliseconds(rng() % 401));
    kill_broker();
    admin.join();
    for (auto& v : victims) v->kill_now(SIGKILL);  // they die while no broker runs
    for (auto& v : victims) v->wait(std::chrono::seconds(5));
    start_broker();
    ASSERT_FALSE(HasFatalFailure()) << "round " << round;

    ProcessResult list = cli({"status", "--json"});
    ASSERT_EQ(list.exit_code, 0) << list.err;
    const json doc = json::parse(list.out, nullptr, false);
    ASSERT_TRUE(doc.is_object()) << list.out;
    std::map<std::string, uint64_t> limits;
    for (const auto& t : doc["tenants"]) limits[t["name"]] = t["devices"][0]["memory_limit"];
    ASSERT_EQ(limits.size(), tenants.size() + 1) << "round " << round << ": " << list.out;
    for (const auto& name : tenants) EXPECT_EQ(limits[name], kCap) << name;
    EXPECT_TRUE(limits["resized"] == 512 * kMiB || limits["resized"] == 768 * kMiB)
        << "round " << round << ": " << limits["resized"];
    expect_books_exact(tenants, milliseconds(3000));
    ASSERT_FALSE(HasFailure()) << "round " << round;
  }
  expect_caps_hold(tenants);
}

}  // namespace
}  // namespace fracgpu::testing
