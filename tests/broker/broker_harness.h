// Test harness for the integration tests: the real fracgpu-broker binary started over
// the simulated GPU (fakecuda/) with private run/state directories and a private
// simulated-device name, raw socket clients for the admin and tenant sockets, and
// forked "tenant processes" that register and account memory by the ledger rules.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client/broker_launcher.h"
#include "client/run_paths.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::test {

inline constexpr uint64_t kGiB = 1ull << 30;
inline constexpr uint64_t kMiB = 1ull << 20;

bool fake_driver_available();
#define FRACGPU_REQUIRE_FAKE_DRIVER()                                                       \
  do {                                                                                      \
    if (!::fracgpu::test::fake_driver_available()) GTEST_SKIP() << "fake driver not built"; \
  } while (0)

// A 0755 temporary directory (tenant processes of other uids must traverse it).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

struct ProcessResult {
  int status = -1;  // exit status, 128+N if killed by signal N
  std::string out, err;
};

// Runs argv with `env` added to this process's environment, capturing output.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::seconds timeout = std::chrono::seconds(60));

// A line-oriented raw client: sends anything, reads reply lines.
class LineClient {
 public:
  explicit LineClient(const std::filesystem::path& socket);
  ~LineClient();
  LineClient(const LineClient&) = delete;
  LineClient& operator=(const LineClient&) = delete;
  bool connected() const { return fd_ >= 0; }
  bool send_raw(const std::string& bytes);
  std::optional<nlohmann::json> read_reply(
      std::chrono::milliseconds timeout = std::chrono::seconds(5));
  std::optional<nlohmann::json> request(const nlohmann::json& j);
  // True when the broker closed the connection (EOF) within `timeout`.
  bool closed_by_peer(std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  int fd_ = -1;
  std::string buffer_;
};

class BrokerProcess {
 public:
  BrokerProcess();
  ~BrokerProcess();
  bool start(const std::vector<std::string>& extra_args = {});
  void kill9();
  int stop();  // SIGTERM; returns the exit status
  bool alive();
  pid_t pid() const { return process_.pid(); }
  std::filesystem::path run_dir() const { return dir_.path() / "run"; }
  std::filesystem::path state_dir() const { return dir_.path() / "state"; }
  std::filesystem::path admin_socket() const { return client::admin_socket_path(run_dir()); }
  // The tenant's directory: under pods/ unless created with owners (fracgpu/paths.h).
  std::filesystem::path tenant_dir(const std::string& name, bool has_owners = false) const {
    return client::tenant_dir(run_dir(), name, has_owners);
  }
  std::filesystem::path ledger_path(const std::string& name) const {
    return client::ledger_path(run_dir(), name);
  }
  const std::string& shm_name() const { return shm_name_; }
  std::string log() const;
  std::map<std::string, std::string> env() const;

  // One request on a fresh admin connection; the reply (or nullopt on transport failure).
  std::optional<nlohmann::json> admin(const nlohmann::json& request);
  // TENANT_STATUS of `name` from "list", or nullopt.
  std::optional<nlohmann::json> tenant_status(const std::string& name);
  bool create_tenant(const std::string& name, uint64_t limit,
                     std::optional<uint64_t> request = std::nullopt);

 private:
  TempDir dir_;
  std::string shm_name_;
  client::BrokerProcess process_;
};

// Who a TenantProcess runs as (set in the child before it connects; needs root).
struct ChildIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
};

// A forked child playing a CUDA process of a tenant: it registers on the tenant socket
// (so SO_PEERCRED sees the child's own pid), maps the tenant's quota (read-only, by path)
// and the ledger descriptor the broker passed with the reply, reserves `hold` bytes by
// the ledger rules and then either idles or, with `churn`, keeps reserving and releasing
// until it is killed.
class TenantProcess {
 public:
  TenantProcess(const std::filesystem::path& tenant_dir, uint64_t hold, bool churn = false,
                std::optional<ChildIdentity> as = std::nullopt);
  ~TenantProcess();
  bool ok() const { return reply_.has_value() && reply_->value("ok", false); }
  const std::optional<nlohmann::json>& reply() const { return reply_; }
  pid_t pid() const { return pid_; }
  uint32_t slot() const { return reply_ ? reply_->value("slot", 0u) : 0u; }
  void kill9();

 private:
  pid_t pid_ = -1;
  std::optional<nlohmann::json> reply_;
};

// The tenant's ledger, mapped read-only by the test to observe counters. Given the
// tenant's directory <run>/pods|tenants/<name>, it maps <run>/ledgers/<name>.
class LedgerView {
 public:
  explicit LedgerView(const std::filesystem::path& tenant_dir);
  ~LedgerView();
  const TenantLedger* operator->() const { return ledger_; }
  bool valid() const { return ledger_ != nullptr; }

 private:
  TenantLedger* ledger_ = nullptr;
};

}  // namespace fracgpu::test
