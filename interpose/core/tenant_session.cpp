// Registration with the broker and mapping of the tenant's segment files (see
// tenant_session.h; the mappings themselves: core/file_mapping.h). Runs at the first CUDA
// call, after fork and on a burst request; never on the allocation fast path. The
// ledger descriptor the broker passes is closed as soon as it is mapped, or at once when
// the process maps the ledger already (a forked child, a re-registration after a broker
// restart): the mapping is all the shim needs. The MPS fields of a reply count only at
// the first registration: the process's environment is set once, before cuInit.
#include "core/tenant_session.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_mapping.h"
#include "core/wire_json.h"
#include "fracgpu/protocol.h"

namespace fracgpu {
namespace {

constexpr int kBurstTimeoutMs = 5000;

// A name the broker gave us must stay inside the tenant's directory.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
}

// Closes the broker's descriptor on every way out of a registration.
struct ReceivedFd {
  int fd = -1;
  ~ReceivedFd() {
    if (fd >= 0) ::close(fd);
  }
};

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

}  // namespace

TenantSession::~TenantSession() {
  unmap();
}

bool TenantSession::attach(const std::string& socket_path, int timeout_ms, std::string* error) {
  socket_path_ = socket_path;
  directory_ = directory_of(socket_path);
  if (!connection_.connect(socket_path, timeout_ms, error)) return false;
  return register_process(timeout_ms, error);
}

bool TenantSession::register_process(int timeout_ms, std::string* error) {
  ReceivedFd ledger_fd;
  auto reply =
      connection_.request(R"({"op":"register","protocol":2})", timeout_ms, error, &ledger_fd.fd);
  if (!reply) return false;
  if (wire::bool_field(*reply, "ok") != true) {
    *error = "broker refused registration: " + wire::string_field(*reply, "error").value_or(*reply);
    return false;
  }
  auto slot = wire::int_field(*reply, "slot");
  auto tenant = wire::string_field(*reply, "tenant");
  auto quota = wire::string_field(*reply, "quota");
  if (!slot || *slot < 0 || static_cast<std::size_t>(*slot) >= kMaxProcesses || !tenant || !quota ||
      !plain_file_name(*quota) || wire::bool_field(*reply, "ledger_fd") != true) {
    *error = "malformed registration reply from broker: " + *reply;
    return false;
  }
  if (ledger_fd.fd < 0) {
    *error = "the broker's registration reply came without the ledger descriptor: " + *reply;
    return false;
  }
  if (attached() && !same_ledger(ledger_fd.fd)) {
    *error = "the broker now keeps tenant '" + tenant_ +
             "' in another ledger file than the one this process counts in";
    return false;
  }
  if (attached() && forked_) {  // a forked child: same mapping, a slot of its own
    slot_ = static_cast<uint32_t>(*slot);
    ledger_ = MemoryLedger(quota_, ledger_map_, slot_);
    forked_ = false;
    return true;
  }
  if (attached()) {  // re-registration after a broker restart: same mapping, same slot
    if (static_cast<uint32_t>(*slot) != slot_) {
      *error = "broker moved this process to another slot after restarting";
      return false;
    }
    return true;
  }
  tenant_ = *tenant;
  slot_ = static_cast<uint32_t>(*slot);
  read_mps_fields(*reply, &mps_);
  return map_files(*quota, ledger_fd.fd, error);
}

bool TenantSession::same_ledger(int ledger_fd) const {
  struct stat st {};
  return ::fstat(ledger_fd, &st) == 0 && static_cast<uint64_t>(st.st_dev) == ledger_dev_ &&
         static_cast<uint64_t>(st.st_ino) == ledger_ino_;
}

bool TenantSession::map_files(const std::string& quota_name, int ledger_fd, std::string* error) {
  void* quota = map_segment_file(directory_ + "/" + quota_name, false, &quota_size_, error);
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
  ledger_ = MemoryLedger(quota_, ledger_map_, slot_);
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
}

bool TenantSession::register_forked_child(std::string* error) {
  return connection_.connect(socket_path_, 2000, error) && register_process(kBurstTimeoutMs, error);
}

bool TenantSession::request_burst(uint32_t device, uint64_t bytes, std::string* error) {
  const std::string request = R"({"op":"burst","device":)" + std::to_string(device) +
                              R"(,"bytes":)" + std::to_string(bytes) + "}";
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!connection_.connected() && !(connection_.connect(socket_path_, 200, error) &&
                                      register_process(kBurstTimeoutMs, error))) {
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

}  // namespace fracgpu
