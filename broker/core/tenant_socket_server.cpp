// Request handling on tenant sockets. Every field is validated before use and every
// failure is a one-sentence error reply; the process's pid is never taken from the
// request, only from the kernel (SO_PEERCRED), so one process cannot register — or
// get reclaimed — in the name of another.
#include "core/tenant_socket_server.h"

#include <spdlog/spdlog.h>

#include "core/ledger_ops.h"
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

}  // namespace

TenantSocketServer::TenantSocketServer(EventLoop& loop, TenantServices services, std::string tenant)
    : services_(services),
      tenant_(std::move(tenant)),
      server_(loop, "tenant " + tenant_, [this](Peer& p, const json& r) { return handle(p, r); }) {}

Status TenantSocketServer::listen() {
  Tenant* t = services_.registry.find(tenant_);
  if (t == nullptr) return Status::failure("no tenant " + tenant_);
  return server_.listen(t->socket_path(), 0666);
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
  if (name == "burst") return handle_burst(*tenant, request);
  return LineServer::error_reply("unknown op \"" + name.substr(0, 40) +
                                 "\" (tenant sockets accept register, burst)");
}

json TenantSocketServer::handle_register(Peer& peer, Tenant& tenant, const json& request) {
  if (request.contains("protocol")) {
    auto version = uint_field(request, "protocol", 1, 1);
    if (!version)
      return LineServer::error_reply("unsupported protocol: " + version.error() +
                                     " (this broker speaks 1)");
  }
  const pid_t pid = peer.cred.pid;
  const auto start = process_start_time(pid);
  if (pid <= 0 || !start) {
    return LineServer::error_reply("cannot identify the connecting process (pid " +
                                   std::to_string(pid) + " is not visible to the broker)");
  }
  const auto slot = ledger::claim_slot(tenant.ledger(), pid, *start);
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
  spdlog::info("tenant {}: pid {} registered in slot {}", tenant.spec.name, pid, *slot);
  json reply = ok_reply();
  reply["protocol"] = protocol::kVersion;
  reply["tenant"] = tenant.spec.name;
  reply["slot"] = *slot;
  reply["quota"] = protocol::kQuotaFileName;
  reply["ledger"] = protocol::kLedgerFileName;
  return reply;
}

json TenantSocketServer::handle_burst(Tenant& tenant, const json& request) {
  auto device = uint_field(request, "device", 0, kMaxDevices - 1);
  if (!device) return LineServer::error_reply(device.error());
  auto bytes = uint_field(request, "bytes", 1, UINT64_MAX);
  if (!bytes) return LineServer::error_reply(bytes.error());
  if (*device < tenant.quota().device_count)
    tenant.ledger().devices[*device].burst_requests.fetch_add(1);
  const auto members = services_.registry.arbiter_members();
  const ArbiterMember who{tenant.spec.name, &tenant.quota(), &tenant.ledger()};
  auto grant = services_.arbiter.burst(members, who, static_cast<uint32_t>(*device), *bytes);
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
