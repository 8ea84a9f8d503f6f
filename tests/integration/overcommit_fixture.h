// What the overcommit tests share (overcommit_*_test.cpp): the real broker and CLI over a
// 4 GiB simulated GPU with 64 MiB contexts (BrokerFixture), tenants made through the CLI,
// borrowers that hold memory with a known pattern (fracgpu-alloc-client pattern), and the
// three books a test compares to the byte: each tenant's ledger, `fracgpu status --json`,
// and what the simulated device itself holds per process (fakecuda-ctl status).
#pragma once

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "broker_fixture.h"

namespace fracgpu::testing {

inline constexpr uint64_t kContext = 64 * kMiB;  // FAKECUDA_CONTEXT_FOOTPRINT of the fixture

class OvercommitFixture : public BrokerFixture {
 protected:
  // `fracgpu tenant create NAME --memory M --memory-request R --gpu 0` plus `extra`.
  void tenant(const std::string& name, const std::string& memory, const std::string& request,
              std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"tenant",           "create", name,    "--memory", memory,
                                     "--memory-request", request,  "--gpu", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    ProcessResult r = cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  // A best-effort (low, nothing guaranteed) tenant that may swap.
  void borrower_tenant(const std::string& name) {
    tenant(name, "4GiB", "0", {"--priority", "low", "--swap", "allow"});
  }
  void set_request(const std::string& name, const std::string& request) {
    ProcessResult r = cli({"tenant", "update", name, "--memory-request", request});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  std::string file(const std::string& name) const { return dir_.path() + "/" + name; }
  void touch(const std::string& name) { std::ofstream(file(name)) << "go\n"; }

  // fracgpu-alloc-client pattern in tenant `name`: `bytes` in chunks of `chunk` by `route`,
  // waiting for file `go` to read them back and for `done` (if given) to free them.
  // Returns once it printed "ready" (or fails the test).
  std::unique_ptr<BackgroundProcess> start_pattern(const std::string& name, uint64_t bytes,
                                                   uint64_t chunk, const std::string& go,
                                                   const std::string& done = "",
                                                   const std::string& route = "alloc",
                                                   const Environment& extra = {}) {
    std::vector<std::string> argv = {FRACGPU_ALLOC_CLIENT,
                                     "pattern",
                                     "--bytes",
                                     std::to_string(bytes),
                                     "--chunk",
                                     std::to_string(chunk),
                                     "--go",
                                     file(go),
                                     "--route",
                                     route};
    if (!done.empty()) argv.insert(argv.end(), {"--done", file(done)});
    Environment env = tenant_env(name);
    env["FRACGPU_LOG_LEVEL"] = "info";  // the shim says what it moved and how fast
    for (const auto& [k, v] : extra) env[k] = v;
    auto p = std::make_unique<BackgroundProcess>(argv, env,
                                                 file(name + "-" + std::to_string(++serial_)));
    const std::string why = p->wait_until_ready(
        [&] { return p->out().find("\"ready\"") != std::string::npos; }, std::chrono::seconds(30));
    EXPECT_EQ(why, "") << p->out() << p->err();
    return p;
  }

  nlohmann::json status() {
    ProcessResult r = cli({"status", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  // tenant name -> its GPU 0 entry of `fracgpu status --json`.
  std::map<std::string, nlohmann::json> status_devices() {
    std::map<std::string, nlohmann::json> out;
    const nlohmann::json doc = status();
    if (!doc.is_object()) return out;
    for (const auto& t : doc["tenants"]) out[t["name"]] = t["devices"][0];
    return out;
  }

  // The simulated device: pid -> bytes it holds (live processes holding any), and
  // pid -> kernels executed (live processes).
  nlohmann::json device_status() {
    ProcessResult r = run_process({FRACGPU_FAKECUDA_CTL, "status"}, base_env_);
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  std::map<pid_t, uint64_t> device_holdings() {
    std::map<pid_t, uint64_t> held;
    const nlohmann::json doc = device_status();
    if (doc.is_discarded()) return held;
    for (const auto& p : doc["devices"][0]["processes"])
      if (p.value("alive", false) && p.value("used_bytes", uint64_t{0}) > 0)
        held[static_cast<pid_t>(p["pid"].get<int64_t>())] = p["used_bytes"].get<uint64_t>();
    return held;
  }
  std::map<pid_t, uint64_t> kernels_by_pid() {
    std::map<pid_t, uint64_t> k;
    const nlohmann::json doc = device_status();
    if (doc.is_discarded()) return k;
    for (const auto& p : doc["devices"][0]["processes"])
      k[static_cast<pid_t>(p["pid"].get<int64_t>())] = p.value("kernels_executed", uint64_t{0});
    return k;
  }

  static uint32_t live_slots(const TenantLedger& l) {
    uint32_t live = 0;
    for (const ProcessSlot& s : l.processes)
      live += s.state.load() == static_cast<uint32_t>(SlotState::kLive);
    return live;
  }
  // The sum of the live slots' used bytes on device 0 (what the ledger's counter must be).
  static uint64_t slot_sum(const TenantLedger& l) {
    uint64_t sum = 0;
    for (const ProcessSlot& s : l.processes)
      if (s.state.load() == static_cast<uint32_t>(SlotState::kLive)) sum += s.used[0].load();
    return sum;
  }

  // Every tenant in `expect` holds exactly that many resident bytes and nothing on host, in
  // its ledger (counter and live slots) and in `fracgpu status --json`.
  void expect_books(const std::map<std::string, uint64_t>& expect) {
    auto devices = status_devices();
    for (const auto& [name, bytes] : expect) {
      const TenantLedger* l = ledger(name);
      ASSERT_NE(l, nullptr) << name;
      EXPECT_EQ(l->devices[0].used.load(), bytes) << name;
      EXPECT_EQ(slot_sum(*l), bytes) << name << ": the live slots";
      EXPECT_EQ(l->devices[0].swapped.load(), 0u) << name;
      EXPECT_EQ(devices[name].value("memory_used", uint64_t{1}), bytes) << name;
      EXPECT_EQ(devices[name].value("memory_swapped", uint64_t{1}), 0u) << name;
    }
  }

  // A holder of `bytes` in the guaranteed tenant `name` (made already): starts it and waits
  // (15 s at most) until it holds them all; *seconds is how long that took, also recorded
  // as the test's guarantee_seconds. Null (and a failure naming why) when it never did.
  std::unique_ptr<BackgroundProcess> hold_guarantee(const std::string& name, uint64_t bytes,
                                                    const BackgroundProcess& borrower,
                                                    double* seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    auto holder = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(bytes)},
        tenant_env(name), file(name));
    const std::string why = holder->wait_until_ready(
        [&] { return holder->out().find("\"holding\"") != std::string::npos; },
        std::chrono::seconds(15));
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!why.empty()) {
      ADD_FAILURE() << why << holder->out() << holder->err() << broker_log() << borrower.err();
      return nullptr;
    }
    RecordProperty("guarantee_seconds", std::to_string(*seconds));
    std::printf("guaranteed tenant held its %llu MiB after %.2f s\n",
                static_cast<unsigned long long>(bytes / kMiB), *seconds);
    return holder;
  }

  std::string broker_log() const {
    return read_text(dir_.path() + "/broker-" + std::to_string(broker_starts_) + ".log");
  }

  int serial_ = 0;
};

}  // namespace fracgpu::testing
