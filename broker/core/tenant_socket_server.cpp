// Request handling on tenant sockets. Every field is validated before use and every
// failure is a one-sentence error reply; the process's pid and uid are never taken from
// the request, only from the kernel (SO_PEERCRED), so one process cannot register — or
// get reclaimed — in the name of another, nor a uid join a tenant it does not own. The
// ledger descriptor is opened per registration (one open(2), never on a hot path) so
// each process holds its own open file, and none can be reached by path.
#include "core/tenant_socket_server.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "core/audit_service.h"
#include "core/ledger_ops.h"
#include "core/mps_daemon.h"
#include "core/quantity_parser.h"
#include "core/recharge_policy.h"
#include "fracgpu/protocol.h"

namespace fracgpu::broker {
namespace {

using nlohmann::json;

json ok_reply() {
  return {{"ok", true}};
}

// A required unsigned integer field of a request.
Result<uint64_t> uint_field(const json& request, const char* key, uint64_t min, uint64_t max) {
  auto it = request.find(key);
  if (it == request.end()) return Result<uint64_t>::failure(std::string("missing \"") + key + "\"");
  if (!it->is_number_integer())
    return Result<uint64_t>::failure(std::string("\"") + key + "\" must be an integer");
  if (!it->is_number_unsigned() && it->get<int64_t>() < 0) {
    return Result<uint64_t>::failure(std::string("\"") + key + "\" must not be negative");
  }
  const uint64_t v = it->get<uint64_t>();
  if (v < min || v > max) {
    return Result<uint64_t>::failure(std::string("\"") + key + "\" must be between " +
                                     std::to_string(min) + " and " + std::to_string(max));
  }
  return v;
}

// The "protocol" of a register or view: only 2 (the ledger by descriptor) is spoken.
std::optional<std::string> protocol_problem(const json& request) {
  auto it = request.find("protocol");
  if (it == request.end())
    return "missing \"protocol\" (this broker speaks protocol " +
           std::to_string(protocol::kVersion) + ")";
  if (!it->is_number_integer())
    return "unsupported protocol: \"protocol\" must be an integer (this broker speaks " +
           std::to_string(protocol::kVersion) + ")";
  if (it->get<int64_t>() == 1) {
    return "protocol 1 is no longer served: this broker passes the tenant's ledger as a "
           "descriptor (protocol 2) and keeps it out of reach by path; install the "
           "libfracgpu.so that came with this broker";
  }
  if (it->get<int64_t>() != protocol::kVersion)
    return "unsupported protocol " + std::to_string(it->get<int64_t>()) + " (this broker speaks " +
           std::to_string(protocol::kVersion) + ")";
  return std::nullopt;
}

// MPS client priority of a tenant's processes (CUDA_MPS_CLIENT_PRIORITY, per process, so
// per tenant): 0 (normal) when it is high on any of its GPUs, else 1 (below normal).
int mps_client_priority(const TenantSpec& spec) {
  for (const DeviceSpec& d : spec.devices)
    if (d.priority == PriorityClass::kHigh) return 0;
  return 1;
}

// --mps: what the registering process needs to become a client of the broker's MPS server
// (protocol.h, minor 1), unless the daemon is down or serves another uid (mps_daemon.h).
void add_mps_fields(json& reply, MpsDaemon& mps, const Tenant& tenant, const Peer& peer) {
  if (auto refusal = mps.admit_client(peer.cred.pid, peer.cred.uid)) {
    spdlog::info("tenant {}: pid {} is not made an MPS client (it time-slices): {}",
                 tenant.spec.name, peer.cred.pid, *refusal);
    return;
  }
  reply["mps_pipe_dir"] = mps.pipe_dir();
  reply["mps_log_dir"] = mps.log_dir();
  reply["mps_client_priority"] = mps_client_priority(tenant.spec);
}

// A re-registration's "slot" and "holdings" (protocol.h, minor 2), validated whole
// before anything is claimed; both absent for a first registration.
struct Rejoin {
  std::optional<uint32_t> slot;
  RechargeClaims claims;
  bool has_holdings = false;
};

Result<Rejoin> rejoin_fields(const json& request, uint32_t device_count) {
  using R = Result<Rejoin>;
  Rejoin out;
  if (request.contains("slot")) {
    auto slot = uint_field(request, "slot", 0, kMaxProcesses - 1);
    if (!slot) return R::failure(slot.error());
    out.slot = static_cast<uint32_t>(*slot);
  }
  auto it = request.find("holdings");
  if (it == request.end()) return out;
  if (!it->is_array() || it->size() > kMaxDevices)
    return R::failure("\"holdings\" must be an array of at most " + std::to_string(kMaxDevices) +
                      " objects");
  out.has_holdings = true;
  for (const json& entry : *it) {
    if (!entry.is_object()) return R::failure("each of \"holdings\" must be an object");
    auto device = uint_field(entry, "device", 0, kMaxDevices - 1);
    if (!device) return R::failure("holdings: " + device.error());
    if (*device >= device_count)
      return R::failure("holdings: device " + std::to_string(*device) +
                        " is not one of the tenant's GPUs");
    if (out.claims[*device])
      return R::failure("holdings: device " + std::to_string(*device) + " is given twice");
    auto used = uint_field(entry, "used", 0, UINT64_MAX);
    if (!used) return R::failure("holdings: " + used.error());
    RechargeClaim claim{*used, 0};
    if (entry.contains("swapped")) {
      auto swapped = uint_field(entry, "swapped", 0, UINT64_MAX);
      if (!swapped) return R::failure("holdings: " + swapped.error());
      claim.swapped = *swapped;
    }
    out.claims[*device] = claim;
  }
  return out;
}

// What the tenant's other processes book on `device` (the placeholder of a hold is not a
// process: its bytes are the ones a re-charge takes over).
uint64_t others_booked(const TenantLedger& ledger, uint32_t slot, uint32_t device) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (i == slot || s.state.load() != static_cast<uint32_t>(SlotState::kLive) ||
        ledger::is_placeholder(s))
      continue;
    sum += s.used[device].load();
  }
  return sum;
}

// What the tenant's other live processes book on host on `device` (their swapped pages).
uint64_t others_on_host(const TenantLedger& ledger, uint32_t slot, uint32_t device) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kMaxProcesses; ++i)
    if (i != slot && ledger.processes[i].state.load() == static_cast<uint32_t>(SlotState::kLive))
      sum += uint64_t{ledger.schedule[i][device].swapped_pages.load()} * kSwapPage;
  return sum;
}

}  // namespace

std::optional<std::string> registration_refusal(const TenantSpec& spec, uid_t peer_uid,
                                                uid_t broker_uid) {
  if (peer_uid == 0 || peer_uid == broker_uid || !spec.has_owners() || spec.owned_by(peer_uid))
    return std::nullopt;
  // Never the owners' uids: who may use a tenant is not the business of a user who may not.
  return "permission denied: uid " + std::to_string(peer_uid) + " is not an owner of tenant '" +
         spec.name + "'; an administrator can add it with: fracgpu tenant update " + spec.name +
         " --owner " + std::to_string(peer_uid);
}

TenantSocketServer::TenantSocketServer(EventLoop& loop, TenantServices services, std::string tenant)
    : services_(services),
      tenant_(std::move(tenant)),
      server_(loop, "tenant " + tenant_, [this](Peer& p, const json& r) { return handle(p, r); }) {}

Status TenantSocketServer::listen() {
  Tenant* t = services_.registry.find(tenant_);
  if (t == nullptr) return Status::failure("no tenant " + tenant_);
  // Read at every accept: an update of the owners applies to the next connection.
  server_.set_peer_filter([this](const PeerCredentials& cred) -> std::optional<std::string> {
    const Tenant* tenant = services_.registry.find(tenant_);
    if (tenant == nullptr) return "tenant '" + tenant_ + "' no longer exists";
    return registration_refusal(tenant->spec, cred.uid, ::geteuid());
  });
  const SocketAccess access = socket_access(t->spec);
  return server_.listen(t->socket_path(), access.mode, access.owner);
}

json TenantSocketServer::handle(Peer& peer, const json& request) {
  Tenant* tenant = services_.registry.find(tenant_);
  if (tenant == nullptr)
    return LineServer::error_reply("tenant '" + tenant_ + "' no longer exists");
  auto op = request.find("op");
  if (op == request.end() || !op->is_string())
    return LineServer::error_reply("request needs a string \"op\"");
  const std::string name = op->get<std::string>();
  if (name == "register") return handle_register(peer, *tenant, request);
  if (name == "view") return handle_view(peer, *tenant, request);
  if (name == "burst") return handle_burst(*tenant, request);
  return LineServer::error_reply("unknown op \"" + name.substr(0, 40) +
                                 "\" (tenant sockets accept register, view, burst)");
}

json TenantSocketServer::handle_register(Peer& peer, Tenant& tenant, const json& request) {
  if (auto problem = protocol_problem(request)) return LineServer::error_reply(*problem);
  if (peer.pending_fd >= 0)
    return LineServer::error_reply("a reply with a descriptor is still being sent");
  const auto rejoin = rejoin_fields(request, tenant.quota().device_count);
  if (!rejoin) return LineServer::error_reply(rejoin.error());
  rebuild_if_damaged(tenant);
  // Opened before a slot is claimed: nothing to undo when it fails.
  const int ledger_fd = tenant.segments->ledger_descriptor(/*writable=*/true);
  if (ledger_fd < 0) {
    spdlog::error("tenant {}: cannot open its ledger {} for a registration", tenant.spec.name,
                  tenant.ledger_path.string());
    return LineServer::error_reply("the broker cannot open the ledger of tenant '" +
                                   tenant.spec.name + "'");
  }
  struct FdGuard {
    int fd;
    ~FdGuard() {
      if (fd >= 0) ::close(fd);
    }
  } guard{ledger_fd};
  const pid_t pid = peer.cred.pid;
  const auto start = process_start_time(pid);
  if (pid <= 0 || !start) {
    return LineServer::error_reply("cannot identify the connecting process (pid " +
                                   std::to_string(pid) + " is not visible to the broker)");
  }
  // While a lost ledger's processes re-register, a new process takes a slot from the top:
  // the low ones may be the old slots of processes that have not come back yet.
  const bool rebuilding = services_.reconciler.rebuilds().pending(tenant.spec.name);
  const auto slot =
      ledger::claim_slot(tenant.ledger(), pid, *start,
                         ledger::ClaimOptions{rejoin->slot, rebuilding && !rejoin->slot});
  if (!slot) {
    return LineServer::error_reply("all " + std::to_string(kMaxProcesses) +
                                   " process slots of tenant '" + tenant.spec.name +
                                   "' are in use");
  }
  if (!services_.tracker.watch(tenant.spec.name, *slot, pid, *start)) {
    services_.reconciler.process_died(tenant, *slot);
    return LineServer::error_reply("process " + std::to_string(pid) + " exited while registering");
  }
  peer.slot = *slot;
  peer.pending_fd = guard.fd;  // LineServer sends it with the reply and closes it
  guard.fd = -1;
  const bool quota_fd = attach_quota(peer, tenant);
  spdlog::info("tenant {}: pid {} (uid {}) registered in slot {}{}", tenant.spec.name, pid,
               peer.cred.uid, *slot, rejoin->slot ? " again" : "");
  json recharged;
  if (rejoin->has_holdings) {
    recharged = recharge(tenant, *slot, pid, *start, rejoin->claims);
  } else if (rebuilding) {
    services_.reconciler.rebuilds().reregistered(tenant, pid, *start, {});
  }
  json reply = ok_reply();
  if (!recharged.is_null()) reply["recharged"] = std::move(recharged);
  reply["protocol"] = protocol::kVersion;
  reply["protocol_minor"] = protocol::kMinorVersion;
  reply["tenant"] = tenant.spec.name;
  reply["slot"] = *slot;
  reply["quota"] = protocol::kQuotaFileName;
  reply["ledger_fd"] = true;
  if (quota_fd) reply["quota_fd"] = true;
  if (services_.mps != nullptr) add_mps_fields(reply, *services_.mps, tenant, peer);
  return reply;
}

// A host tenant's quota is 0600 (paths.h): its processes get it as a read-only descriptor
// after the ledger's. A pod's is read by path through its read-only mount (docs/security.md).
bool TenantSocketServer::attach_quota(Peer& peer, Tenant& tenant) {
  if (!tenant.spec.has_owners()) return false;
  const int fd = tenant.segments->quota_descriptor();
  if (fd < 0) {
    spdlog::error("tenant {}: cannot open its quota {} for a process", tenant.spec.name,
                  (tenant.dir / protocol::kQuotaFileName).string());
    return false;
  }
  peer.pending_second_fd = fd;
  return true;
}

json TenantSocketServer::recharge(Tenant& tenant, uint32_t slot, pid_t pid, uint64_t start_time,
                                  const RechargeClaims& claims) {
  std::vector<GpuUsageSample> samples;
  if (services_.usage != nullptr) samples = services_.usage->sample();  // once per re-registration
  TenantLedger& ledger = tenant.ledger();
  std::array<uint64_t, kMaxDevices> added{};
  json out = json::array();
  std::string said;
  for (uint32_t d = 0; d < tenant.quota().device_count && d < kMaxDevices; ++d) {
    if (!claims[d]) continue;
    const DeviceQuota& q = tenant.quota().devices[d];
    const GpuInfo* gpu = services_.registry.gpus().find(q.host_index);
    const ledger::Booked before = ledger::booked(ledger, slot, d);
    RechargeFacts facts;
    facts.booked_used = before.used;
    facts.booked_swapped = before.swapped;
    facts.others = others_booked(ledger, slot, d);
    facts.host_allowance = q.host_allowance.load();
    facts.others_swapped = others_on_host(ledger, slot, d);
    facts.limit = q.memory_limit.load();
    facts.device_memory = gpu != nullptr ? gpu->memory_total : facts.limit;
    facts.footprint = q.context_footprint.load();
    if (gpu != nullptr && services_.usage != nullptr)
      facts.device_shows = device_usage_of(samples, pid, gpu->uuid);
    const RechargeDecision decision = decide_recharge(*claims[d], facts);
    const ledger::Booked after = ledger::recharge(ledger, slot, d, decision.used, decision.swapped);
    added[d] = after.used - before.used;
    out.push_back({{"device", d},
                   {"used", after.used},
                   {"swapped", after.swapped},
                   {"basis", recharge_basis_name(decision.basis)}});
    said += (said.empty() ? "" : "; ") + format_size(after.used) + " on GPU " +
            std::to_string(q.host_index) + " (claimed " + format_size(claims[d]->used) + ", " +
            recharge_basis_name(decision.basis) + ")";
    if (after.swapped > 0) said += " and " + format_size(after.swapped) + " on host";
  }
  spdlog::info("tenant {}: pid {} re-charged in slot {}: {}", tenant.spec.name, pid, slot,
               said.empty() ? "nothing" : said);
  services_.reconciler.rebuilds().reregistered(tenant, pid, start_time, added);
  return out;
}

// A header zeroed under the running broker (the maintenance tick looks once a second):
// rebuilt before a process is given the ledger, and held (ledger_rebuild.h).
void TenantSocketServer::rebuild_if_damaged(Tenant& tenant) {
  if (tenant.segments->rebuild_if_damaged())
    services_.reconciler.rebuilds().begin({&tenant}, LedgerRebuilds::Clock::now(),
                                          LedgerRebuilds::Found::kWhileRunning);
}

json TenantSocketServer::handle_view(Peer& peer, Tenant& tenant, const json& request) {
  if (auto problem = protocol_problem(request)) return LineServer::error_reply(*problem);
  if (peer.pending_fd >= 0)
    return LineServer::error_reply("a reply with a descriptor is still being sent");
  rebuild_if_damaged(tenant);
  const int ledger_fd = tenant.segments->ledger_descriptor(/*writable=*/false);
  if (ledger_fd < 0)
    return LineServer::error_reply("the broker cannot open the ledger of tenant '" +
                                   tenant.spec.name + "'");
  peer.pending_fd = ledger_fd;
  const bool quota_fd = attach_quota(peer, tenant);
  json reply = ok_reply();
  reply["protocol"] = protocol::kVersion;
  reply["tenant"] = tenant.spec.name;
  reply["quota"] = protocol::kQuotaFileName;
  reply["ledger_fd"] = true;
  if (quota_fd) reply["quota_fd"] = true;
  return reply;
}

json TenantSocketServer::handle_burst(Tenant& tenant, const json& request) {
  auto device = uint_field(request, "device", 0, kMaxDevices - 1);
  if (!device) return LineServer::error_reply(device.error());
  auto bytes = uint_field(request, "bytes", 1, UINT64_MAX);
  if (!bytes) return LineServer::error_reply(bytes.error());
  if (*device < tenant.quota().device_count)
    tenant.ledger().devices[*device].burst_requests.fetch_add(1);
  std::string flagged;
  if (services_.audit != nullptr) {
    // The arbiter reads every tenant's grant: they must be the ones the broker wrote.
    services_.audit->verify_grants();
    if (services_.audit->burst_refused(tenant.spec.name, &flagged)) {
      spdlog::info("tenant {}: burst of {} bytes on device {} refused: {}", tenant.spec.name,
                   *bytes, *device, flagged);
      return LineServer::error_reply(flagged);
    }
  }
  const auto& members = services_.registry.arbiter_members();
  const ArbiterMember who{tenant.spec.name, &tenant.quota(), &tenant.ledger()};
  auto grant = services_.arbiter.burst(members, who, static_cast<uint32_t>(*device), *bytes);
  if (services_.audit != nullptr) services_.audit->note_grants();  // the broker's new grants
  if (!grant) {
    spdlog::info("tenant {}: burst of {} bytes on device {} refused: {}", tenant.spec.name, *bytes,
                 *device, grant.error());
    return LineServer::error_reply(grant.error());
  }
  json reply = ok_reply();
  reply["grant"] = *grant;
  return reply;
}

}  // namespace fracgpu::broker
