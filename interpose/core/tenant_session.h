// TenantSession: this process's membership of a tenant. attach() registers with the
// broker over the tenant socket (which is what identifies the tenant), then maps the
// tenant's quota read-only (by path in a pod; on a host from the read-only descriptor the
// broker passes, the file being 0600) and its ledger read-write from the descriptor the
// broker passed with the reply (protocol 2: the ledger has no path a tenant can reach).
// From then on allocations are counted in shared memory; the broker is only asked for
// burst memory beyond the grant. If the broker goes away, the mapped counters keep
// enforcing the caps; the session reconnects and re-registers (keeping its slot and its
// mapping) on the next burst request.
// A watch thread (started at attach, asleep on the quota's ledger incarnation, a futex,
// and looking every 500 ms) re-registers the process when its ledger was lost under it —
// rebuilt or re-created by the broker, or its slot wiped (membership.h): with the gate of
// its ProcessHoldings closed it sends its old slot and what it holds, maps the broker's
// ledger over the old mapping when it is another file, and resumes on the reply's slot
// (tenant_segment.h, "A ledger lost"). So a process that makes no CUDA call at all is
// counted again within moments of the broker's rebuild. The thread makes no CUDA call.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/broker_connection.h"
#include "core/membership.h"
#include "core/memory_ledger.h"
#include "core/mps_client_env.h"
#include "core/process_holdings.h"
#include "core/tenant_link.h"
#include "core/tenant_view.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

class TenantSession : public TenantLink {
 public:
  TenantSession() = default;
  ~TenantSession() override;
  TenantSession(const TenantSession&) = delete;
  TenantSession& operator=(const TenantSession&) = delete;

  // `watch`: start the thread that re-registers after a lost ledger (tests may drive
  // check_and_rejoin() themselves instead).
  bool attach(const std::string& socket_path, int timeout_ms, std::string* error,
              bool watch = true);
  bool attached() const { return quota_ != nullptr; }

  MemoryLedger& ledger() override { return ledger_; }
  const TenantQuota* quota() const override { return quota_; }
  const std::string& tenant() const override { return tenant_; }
  std::optional<DeviceMemoryView> memory_view(const char* uuid) const {
    return attached() ? device_memory_view(*quota_, *ledger_map_, uuid) : std::nullopt;
  }
  uint32_t slot() const override { return slot_.load(std::memory_order_relaxed); }
  uint32_t slot_generation() const override {
    return slot_generation_.load(std::memory_order_acquire);
  }
  const std::string& directory() const { return directory_; }
  // From the first registration's reply: this process's MPS server and client priority
  // when the broker runs MPS (protocol.h, minor 1); an empty pipe_dir otherwise.
  const MpsClientSettings& mps() const { return mps_; }
  TenantLedger* ledger_map() override { return ledger_map_; }
  std::atomic<uint64_t>* host_reserved_word() override {
    return ledger_size_ >= sizeof(TenantLedger) ? TenantLink::host_reserved_word() : nullptr;
  }
  ProcessHoldings& holdings() { return holdings_; }

  // In a child after fork(): drop the parent's connection; the child registers as a
  // process of its own (with its own slot) before its first allocation.
  void forget_parent_after_fork();
  bool needs_registration() const override { return forked_; }
  bool register_forked_child(std::string* error) override;

  // Asks the broker to raise the grant on `device` so that `bytes` more fit.
  bool request_burst(uint32_t device, uint64_t bytes, std::string* error) override;

  // One look of the watch: re-registers when the membership is no longer intact. Returns
  // what the look found; *rejoined says whether a re-registration succeeded.
  MembershipCheck check_and_rejoin(bool* rejoined, std::string* error);

 private:
  struct Reply;  // a parsed registration reply
  bool register_first(int timeout_ms, std::string* error);
  bool register_child(std::string* error);
  // A re-registration with the holdings' gate closed (the caller holds session_mutex_);
  // `why` (null after a plain broker restart) goes into the one log line.
  bool rejoin(const char* why, std::string* error);
  bool exchange(const std::string& line, int timeout_ms, Reply* reply, std::string* error);
  std::string rejoin_request() const;
  bool map_files(const std::string& quota_name, int ledger_fd, int quota_fd, std::string* error);
  // Maps the file open on `ledger_fd` over the current ledger mapping (same address).
  bool remap_ledger(int ledger_fd, std::string* error);
  // A re-registration's descriptor must be the file this process already counts in.
  bool same_ledger(int ledger_fd) const;
  void unmap();
  void start_watch();
  void stop_watch();
  void watch_loop();
  static void* watch_main(void* session);

  std::string socket_path_;
  std::string directory_;
  BrokerConnection connection_;
  std::string tenant_;
  std::atomic<uint32_t> slot_{0};
  std::atomic<uint32_t> slot_generation_{0};  // moves to another slot (rejoin)
  std::atomic<bool> forked_{false};
  const TenantQuota* quota_ = nullptr;
  std::size_t quota_size_ = 0;
  TenantLedger* ledger_map_ = nullptr;
  std::size_t ledger_size_ = 0;
  uint64_t ledger_dev_ = 0, ledger_ino_ = 0;
  ProcessHoldings holdings_;
  MemoryLedger ledger_;
  MpsClientSettings mps_;
  // Registration paths (the watch, a burst's reconnect, a forked child) one at a time.
  std::mutex session_mutex_;
  Membership membership_;  // under session_mutex_
  pthread_t watch_thread_{};
  bool watching_ = false;
  pid_t watch_pid_ = 0;            // the process that runs the watch (a forked child does not)
  std::atomic<uint32_t> stop_{0};  // a futex word: the watch's pause between retries
};

}  // namespace fracgpu
