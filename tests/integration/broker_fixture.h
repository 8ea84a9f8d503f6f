// A node broker of our own for integration tests: a private run/state directory, the
// real fracgpu-broker binary over a private simulated GPU (started by the client
// library's launcher, client/broker_launcher.h), tenants created through the real CLI,
// and the tenant's ledger mapped read-only so tests can watch its counters.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <thread>

#include "client/broker_launcher.h"
#include "client/run_paths.h"
#include "fracgpu/tenant_segment.h"
#include "shim_fixture.h"

namespace fracgpu::testing {

class BrokerFixture : public ShimFixture {
 protected:
  void SetUp() override {
    ShimFixture::SetUp();
    base_env_["FAKECUDA_MEMORY"] = "4GiB";
    base_env_["FAKECUDA_CONTEXT_FOOTPRINT"] = "64MiB";
    start_broker();
  }
  void TearDown() override {
    broker_.kill();
    ShimFixture::TearDown();
  }

  std::string run_dir() const { return dir_.path() + "/run"; }
  std::string state_dir() const { return dir_.path() + "/state"; }
  // Tenants created by create_tenant have no owners: their directory is under pods/.
  std::string tenant_socket(const std::string& name, bool has_owners = false) const {
    return client::tenant_socket_path(run_dir(), name, has_owners);
  }

  void start_broker() {
    client::BrokerLaunch launch;
    launch.program = {FRACGPU_BROKER};
    launch.run_dir = run_dir();
    launch.state_dir = state_dir();
    launch.args = {"--driver", FRACGPU_FAKECUDA_DIR "/libcuda.so.1", "--context-footprint", "auto"};
    launch.args.insert(launch.args.end(), extra_broker_args_.begin(), extra_broker_args_.end());
    launch.environment = base_env_;
    launch.log_file = dir_.path() + "/broker-" + std::to_string(++broker_starts_) + ".log";
    launch.ready_timeout = std::chrono::seconds(10);
    const auto started = broker_.start(launch);
    ASSERT_TRUE(started.ok()) << started.error() << "\n" << read_text(launch.log_file);
  }

  void kill_broker() { broker_.kill(); }

  ProcessResult cli(std::vector<std::string> args) {
    args.insert(args.begin(), {FRACGPU_CLI, "--run-dir", run_dir()});
    return run_process(args, base_env_, std::chrono::seconds(30));
  }

  void create_tenant(const std::string& name, const std::string& memory,
                     const std::string& request = "") {
    std::vector<std::string> args = {"tenant", "create", name, "--memory", memory, "--gpu", "0"};
    if (!request.empty()) args.insert(args.end(), {"--memory-request", request});
    ProcessResult r = cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  // Environment of a process of tenant `name` (shim preloaded, registered through its socket).
  Environment tenant_env(const std::string& name) const {
    Environment env = shim_env();
    env["FRACGPU_SOCKET"] = tenant_socket(name);
    return env;
  }

  // The tenant's ledger (<run>/ledgers/<name>, the broker's uid only), mapped read-only.
  const TenantLedger* ledger(const std::string& name) { return map_ledger(name, false); }
  // The same mapped writable, as the tenant's own processes map it (a forger's view).
  TenantLedger* writable_ledger(const std::string& name) { return map_ledger(name, true); }

  // Polls until `predicate` holds or `limit` passes; returns the time it took.
  template <typename Predicate>
  std::chrono::milliseconds wait_until(Predicate predicate, std::chrono::milliseconds limit) {
    const auto start = std::chrono::steady_clock::now();
    while (!predicate() && std::chrono::steady_clock::now() - start < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  }

  std::vector<std::string> extra_broker_args_;  // flags of the next start_broker()

 private:
  TenantLedger* map_ledger(const std::string& name, bool writable) {
    const std::string path = client::ledger_path(run_dir(), name);
    const int fd = open(path.c_str(), writable ? O_RDWR : O_RDONLY);
    if (fd < 0) return nullptr;
    void* p = mmap(nullptr, sizeof(TenantLedger), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? nullptr : static_cast<TenantLedger*>(p);
  }

 protected:
  TempDir dir_{"broker"};
  client::BrokerProcess broker_;
  int broker_starts_ = 0;
};

inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;

}  // namespace fracgpu::testing
