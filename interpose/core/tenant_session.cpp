// Registration with the broker and mapping of the tenant's segment files (see
// tenant_session.h; the mappings themselves: core/file_mapping.h). Runs at the first CUDA
// call, after fork, on a burst request and from the watch thread; never on the allocation
// fast path. The ledger descriptor the broker passes is closed as soon as it is mapped, or
// at once when the process maps that file already (a forked child, a re-registration after
// a broker restart): the mapping is all the shim needs. The MPS fields of a reply count
// only at the first registration: the process's environment is set once, before cuInit.
#include "core/tenant_session.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <new>

#include "core/file_mapping.h"
#include "core/shim_log.h"
#include "core/wire_json.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/protocol.h"

namespace fracgpu {
namespace {

constexpr int kBurstTimeoutMs = 5000;
constexpr int kBurstConnectMs = 200;
// A re-registration holds this process's allocations at the gate while it runs: short.
constexpr int kGateTimeoutMs = 1000;
constexpr int kRejoinTimeoutMs = 2000;
constexpr int kRejoinConnectMs = 1000;
constexpr int64_t kWatchPollNs = 500'000'000;
constexpr int64_t kRetryNs = 250'000'000;

// A name the broker gave us must stay inside the tenant's directory.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
}

// "mps_pipe_dir", "mps_log_dir", "mps_client_priority" (protocol.h, minor 1). Absolute
// paths only: anything else is ignored (no MPS), as is a reply without them.
void read_mps_fields(const std::string& reply, MpsClientSettings* out) {
  auto pipe = wire::string_field(reply, "mps_pipe_dir");
  if (!pipe || pipe->empty() || pipe->front() != '/') return;
  auto log = wire::string_field(reply, "mps_log_dir");
  out->pipe_dir = *pipe;
  out->log_dir = log && !log->empty() && log->front() == '/' ? *log : std::string();
  out->priority = wire::int_field(reply, "mps_client_priority").value_or(1) == 0 ? 0 : 1;
}

constexpr const char* kRegisterRequest = R"({"op":"register","protocol":2})";

}  // namespace

// A registration reply, checked: the slot, the tenant, the quota's file name and the
// ledger descriptor (closed with the reply unless taken).
struct TenantSession::Reply {
  std::string text;
  int fd = -1;
  int quota_fd = -1;  // a host tenant's quota, read-only ("quota_fd":true)
  uint32_t slot = 0;
  std::string tenant, quota;
  Reply() = default;
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;
  ~Reply() {
    if (fd >= 0) ::close(fd);
    if (quota_fd >= 0) ::close(quota_fd);
  }
};

TenantSession::~TenantSession() {
  stop_watch();
  unmap();
}

bool TenantSession::attach(const std::string& socket_path, int timeout_ms, std::string* error,
                           bool watch) {
  socket_path_ = socket_path;
  directory_ = directory_of(socket_path);
  if (!connection_.connect(socket_path, timeout_ms, error)) return false;
  if (!register_first(timeout_ms, error)) return false;
  if (watch) start_watch();
  return true;
}

bool TenantSession::exchange(const std::string& line, int timeout_ms, Reply* reply,
                             std::string* error) {
  auto text = connection_.request(line, timeout_ms, error, &reply->fd, &reply->quota_fd);
  if (!text) return false;
  reply->text = *text;
  if (wire::bool_field(*text, "ok") != true) {
    *error = "broker refused registration: " + wire::string_field(*text, "error").value_or(*text);
    return false;
  }
  auto slot = wire::int_field(*text, "slot");
  auto tenant = wire::string_field(*text, "tenant");
  auto quota = wire::string_field(*text, "quota");
  if (!slot || *slot < 0 || static_cast<std::size_t>(*slot) >= kMaxProcesses || !tenant || !quota ||
      !plain_file_name(*quota) || wire::bool_field(*text, "ledger_fd") != true) {
    *error = "malformed registration reply from broker: " + *text;
    return false;
  }
  if (reply->fd < 0) {
    *error = "the broker's registration reply came without the ledger descriptor: " + *text;
    return false;
  }
  if (wire::bool_field(*text, "quota_fd") == true && reply->quota_fd < 0) {
    *error = "the broker's registration reply came without the quota descriptor: " + *text;
    return false;
  }
  reply->slot = static_cast<uint32_t>(*slot);
  reply->tenant = *tenant;
  reply->quota = *quota;
  return true;
}

bool TenantSession::register_first(int timeout_ms, std::string* error) {
  std::lock_guard<std::mutex> lock(session_mutex_);
  Reply reply;
  if (!exchange(kRegisterRequest, timeout_ms, &reply, error)) return false;
  tenant_ = reply.tenant;
  slot_.store(reply.slot, std::memory_order_relaxed);
  read_mps_fields(reply.text, &mps_);
  if (!map_files(reply.quota, reply.fd, reply.quota_fd, error)) return false;
  // Read after the mapping (nothing was mapped before): a rebuild between the broker's
  // reply and this load would need a broker restart within it; the slot check covers it.
  membership_ = membership_of(*ledger_map_, reply.slot,
                              quota_->ledger_incarnation.load(std::memory_order_acquire));
  return true;
}

bool TenantSession::register_child(std::string* error) {
  std::lock_guard<std::mutex> lock(session_mutex_);
  const uint32_t incarnation = quota_->ledger_incarnation.load(std::memory_order_acquire);
  Reply reply;
  if (!connection_.connect(socket_path_, 2000, error) ||
      !exchange(kRegisterRequest, kBurstTimeoutMs, &reply, error))
    return false;
  if (!same_ledger(reply.fd)) {  // the child holds nothing yet: it keeps its parent's mapping
    *error = "the broker now keeps tenant '" + tenant_ +
             "' in another ledger file than the one this process counts in";
    return false;
  }
  slot_.store(reply.slot, std::memory_order_relaxed);
  ledger_ = MemoryLedger(quota_, ledger_map_, reply.slot, &holdings_);
  membership_ = membership_of(*ledger_map_, reply.slot, incarnation);
  forked_ = false;
  return true;
}

std::string TenantSession::rejoin_request() const {
  const ProcessHoldings::Snapshot held = holdings_.snapshot();
  std::string line =
      R"({"op":"register","protocol":2,"slot":)" + std::to_string(slot()) + R"(,"holdings":[)";
  const uint32_t devices = std::min<uint32_t>(quota_->device_count, kMaxDevices);
  for (uint32_t d = 0; d < devices; ++d) {
    // Appended piece by piece: GCC 12 at -O3 misreads `"..." + std::string&&` (-Wrestrict).
    if (d != 0) line += ',';
    line += R"({"device":)";
    line += std::to_string(d);
    line += R"(,"used":)";
    line += std::to_string(held[d].used);
    line += R"(,"swapped":)";
    line += std::to_string(held[d].swapped);
    line += '}';
  }
  return line + "]}";
}

bool TenantSession::rejoin(const char* why, std::string* error) {
  // Nothing of this process may move its books between the snapshot sent and the slot
  // the reply names: its own reservations wait at the gate meanwhile.
  if (!holdings_.close(kGateTimeoutMs)) {
    *error = "this process's ledger operations in flight did not finish";
    return false;
  }
  struct Reopen {
    ProcessHoldings& holdings;
    ~Reopen() { holdings.open(); }
  } reopen{holdings_};
  const uint32_t incarnation = quota_->ledger_incarnation.load(std::memory_order_acquire);
  const std::string line = rejoin_request();
  Reply reply;
  bool ok = connection_.connected() && exchange(line, kRejoinTimeoutMs, &reply, error);
  if (!ok) {  // a broker that restarted hung the old connection up
    Reply again;
    if (!connection_.connect(socket_path_, kRejoinConnectMs, error) ||
        !exchange(line, kRejoinTimeoutMs, &again, error))
      return false;
    std::swap(reply.text, again.text);
    std::swap(reply.fd, again.fd);
    reply.slot = again.slot;
  }
  if (!same_ledger(reply.fd) && !remap_ledger(reply.fd, error)) return false;
  const uint32_t before = slot();
  ledger_.rebind_slot(reply.slot);  // the gate is closed: no operation reads it now
  slot_.store(reply.slot, std::memory_order_relaxed);
  if (reply.slot != before) slot_generation_.fetch_add(1, std::memory_order_release);
  membership_ = membership_of(*ledger_map_, reply.slot, incarnation);
  if (why != nullptr) {
    FRACGPU_LOG(LogLevel::kWarn,
                "re-registered with tenant '%s' (%s): slot %u (was %u), holdings re-charged",
                tenant_.c_str(), why, reply.slot, before);
  }
  return true;
}

bool TenantSession::same_ledger(int ledger_fd) const {
  struct stat st {};
  return ::fstat(ledger_fd, &st) == 0 && static_cast<uint64_t>(st.st_dev) == ledger_dev_ &&
         static_cast<uint64_t>(st.st_ino) == ledger_ino_;
}

// A pod's quota by path, through its read-only mount; a host tenant's (0600) from the
// read-only descriptor the broker passed (paths.h).
bool TenantSession::map_files(const std::string& quota_name, int ledger_fd, int quota_fd,
                              std::string* error) {
  void* quota = quota_fd >= 0
                    ? map_segment_fd(quota_fd, false, &quota_size_, error)
                    : map_segment_file(directory_ + "/" + quota_name, false, &quota_size_, error);
  if (quota == nullptr) return false;
  quota_ = static_cast<const TenantQuota*>(quota);
  std::string why;
  void* ledger = map_segment_fd(ledger_fd, true, &ledger_size_, &why);
  struct stat st {};
  if (ledger == nullptr || ::fstat(ledger_fd, &st) != 0) {
    *error = "cannot map the ledger descriptor the broker passed: " + why;
    if (ledger != nullptr) ::munmap(ledger, ledger_size_);
    unmap();
    return false;
  }
  ledger_map_ = static_cast<TenantLedger*>(ledger);
  ledger_dev_ = static_cast<uint64_t>(st.st_dev);
  ledger_ino_ = static_cast<uint64_t>(st.st_ino);
  if (!quota_layout_ok(*quota_, quota_size_) || !ledger_layout_ok(*ledger_map_, ledger_size_)) {
    *error = "tenant segment has an unknown layout (magic/version mismatch with this shim)";
    unmap();
    return false;
  }
  ledger_ = MemoryLedger(quota_, ledger_map_, slot(), &holdings_);
  return true;
}

// The broker re-created the ledger (the old file was deleted): the new file goes where the
// old mapping was, so that every pointer into the ledger (the gates' slots, the swap
// engine's) now reaches the broker's file. Mapped aside and checked first; mremap then
// replaces the old pages in one step, or fails leaving them as they were.
bool TenantSession::remap_ledger(int ledger_fd, std::string* error) {
  struct stat st {};
  if (::fstat(ledger_fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::size_t>(st.st_size) < kLedgerMinSize) {
    *error = "the broker's new ledger descriptor is not a ledger file";
    return false;
  }
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  void* fresh = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, ledger_fd, 0);
  if (fresh == MAP_FAILED) {
    *error = "cannot map the broker's new ledger";
    return false;
  }
  if (!ledger_layout_ok(*static_cast<const TenantLedger*>(fresh), size)) {
    ::munmap(fresh, size);
    *error = "the broker's new ledger has an unknown layout";
    return false;
  }
  const std::size_t span = std::min(size, ledger_size_);
  if (::mremap(fresh, span, span, MREMAP_MAYMOVE | MREMAP_FIXED, ledger_map_) == MAP_FAILED) {
    ::munmap(fresh, size);
    *error = "cannot move the broker's new ledger over the old mapping";
    return false;
  }
  if (size > span) ::munmap(static_cast<char*>(fresh) + span, size - span);
  ledger_dev_ = static_cast<uint64_t>(st.st_dev);
  ledger_ino_ = static_cast<uint64_t>(st.st_ino);
  return true;
}

void TenantSession::unmap() {
  if (quota_ != nullptr) ::munmap(const_cast<TenantQuota*>(quota_), quota_size_);
  if (ledger_map_ != nullptr) ::munmap(ledger_map_, ledger_size_);
  quota_ = nullptr;
  ledger_map_ = nullptr;
  ledger_ = MemoryLedger();
}

void TenantSession::forget_parent_after_fork() {
  connection_.forget_after_fork();  // no locking: the child is single-threaded here
  forked_ = true;
  // In a child the watch thread is not there, and the lock states and holdings are the
  // parent's; in the same process (tests) they are left alone.
  if (watching_ && watch_pid_ == ::getpid()) return;
  new (&session_mutex_) std::mutex();
  holdings_.reset_after_fork();
  watching_ = false;
}

bool TenantSession::register_forked_child(std::string* error) {
  if (!register_child(error)) return false;
  if (!watching_) start_watch();
  return true;
}

bool TenantSession::request_burst(uint32_t device, uint64_t bytes, std::string* error) {
  const std::string request = R"({"op":"burst","device":)" + std::to_string(device) +
                              R"(,"bytes":)" + std::to_string(bytes) + "}";
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!connection_.connected()) {
      std::lock_guard<std::mutex> lock(session_mutex_);
      if (!connection_.connected() &&
          !(connection_.connect(socket_path_, kBurstConnectMs, error) && rejoin(nullptr, error)))
        return false;
    }
    auto reply = connection_.request(request, kBurstTimeoutMs, error);
    if (!reply) continue;  // the broker restarted: reconnect once
    if (wire::bool_field(*reply, "ok") == true) return true;
    *error = wire::string_field(*reply, "error").value_or("burst refused");
    return false;
  }
  return false;
}

MembershipCheck TenantSession::check_and_rejoin(bool* rejoined, std::string* error) {
  *rejoined = false;
  if (!attached() || forked_) return MembershipCheck::kIntact;
  std::lock_guard<std::mutex> lock(session_mutex_);
  const MembershipCheck check = check_membership(*quota_, *ledger_map_, membership_);
  if (check == MembershipCheck::kIntact || check == MembershipCheck::kUnreadable) return check;
  *rejoined = rejoin(membership_check_name(check), error);
  return check;
}

void TenantSession::start_watch() {
  // No signal of the application's is ever delivered to this thread.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  watching_ = pthread_create(&watch_thread_, &attr, &TenantSession::watch_main, this) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (watching_) {
    watch_pid_ = ::getpid();
  } else {
    FRACGPU_LOG(LogLevel::kWarn,
                "cannot start the ledger watch thread; a ledger the broker rebuilds is noticed "
                "only at the next burst request");
  }
}

void TenantSession::stop_watch() {
  if (!watching_ || watch_pid_ != ::getpid()) return;
  stop_.store(1, std::memory_order_seq_cst);
  futex_wake_all(stop_);
  if (quota_ != nullptr)  // FUTEX_WAKE only reads: fine on the read-only quota
    futex_wake_all(const_cast<std::atomic<uint32_t>&>(quota_->ledger_incarnation));
  pthread_join(watch_thread_, nullptr);
  watching_ = false;
}

void* TenantSession::watch_main(void* session) {
  static_cast<TenantSession*>(session)->watch_loop();
  return nullptr;
}

void TenantSession::watch_loop() {
  bool told = false;  // one line per episode, not one per retry
  while (stop_.load(std::memory_order_seq_cst) == 0) {
    uint32_t incarnation = 0;
    {
      std::lock_guard<std::mutex> lock(session_mutex_);
      incarnation = membership_.incarnation;
    }
    futex_wait_for(quota_->ledger_incarnation, incarnation, kWatchPollNs);
    if (stop_.load(std::memory_order_seq_cst) != 0) break;
    bool rejoined = false;
    std::string error;
    const MembershipCheck check = check_and_rejoin(&rejoined, &error);
    if (check == MembershipCheck::kIntact || rejoined) {
      told = false;
      continue;
    }
    if (!told && check == MembershipCheck::kUnreadable) {
      FRACGPU_LOG(LogLevel::kWarn,
                  "the ledger of tenant '%s' is shorter than its mapping (truncated?); waiting "
                  "for the broker to rebuild it",
                  tenant_.c_str());
    } else if (!told) {
      FRACGPU_LOG(LogLevel::kWarn, "cannot re-register with tenant '%s' (%s): %s; retrying",
                  tenant_.c_str(), membership_check_name(check), error.c_str());
    }
    told = true;
    futex_wait_for(stop_, 0, kRetryNs);
  }
}

}  // namespace fracgpu
