// Admin request dispatch: authorisation first (at accept time and again per request),
// then op-specific validation, then the backend. Mutations are logged with the uid and
// pid that asked for them.
#include "core/admin_server.h"

#include <spdlog/spdlog.h>

#include "core/spare_descriptor.h"

namespace fracgpu::broker {
namespace {

using nlohmann::json;

json ok_with(const char* key, json value) {
  return {{"ok", true}, {key, std::move(value)}};
}

}  // namespace

AdminServer::AdminServer(EventLoop& loop, AdminBackend& backend, uid_t owner_uid)
    : backend_(backend),
      owner_uid_(owner_uid),
      server_(
          loop, "admin", [this](Peer& p, const json& r) { return handle(p, r); },
          ConnectionLimits::admin_socket()) {
  server_.set_peer_filter([this](const PeerCredentials& cred) { return refusal(cred); });
}

Status AdminServer::listen(const std::filesystem::path& path) {
  return server_.listen(path, 0600);
}

std::optional<std::string> AdminServer::refusal(const PeerCredentials& cred) const {
  if (cred.uid == 0 || cred.uid == owner_uid_) return std::nullopt;
  return "permission denied: the fracgpu admin socket accepts only root or uid " +
         std::to_string(owner_uid_) + " (you are uid " + std::to_string(cred.uid) + ")";
}

json AdminServer::handle(const Peer& peer, const json& request) {
  if (auto why = refusal(peer.cred)) {  // the accept-time filter already said so; belt and braces
    spdlog::warn("admin: refused a request from uid {} (pid {})", peer.cred.uid, peer.cred.pid);
    return LineServer::error_reply(*why);
  }
  auto op = request.find("op");
  if (op == request.end() || !op->is_string())
    return LineServer::error_reply("request needs a string \"op\"");
  const std::string name = op->get<std::string>();
  // Lend the request a spare descriptor (spare_descriptor.h): at EMFILE, root's `delete`
  // can still rewrite the state file, and the deleted tenant's descriptors free the rest.
  struct LentSpare {
    LentSpare() { spare_descriptor::release(); }
    ~LentSpare() { spare_descriptor::ensure(); }
  };
  json reply;
  {
    LentSpare lent;
    reply = dispatch(name, request);
  }
  if (name == "create" || name == "update" || name == "delete") {
    spdlog::info("admin: {} by uid {} pid {}: {}", name, peer.cred.uid, peer.cred.pid,
                 reply.value("ok", false) ? "done" : reply.value("error", ""));
  }
  return reply;
}

json AdminServer::dispatch(const std::string& op, const json& request) {
  if (op == "list") {
    json reply = ok_with("tenants", backend_.list_tenants());
    reply["gpus"] = backend_.list_gpus();
    return reply;
  }
  if (op == "gpus") {
    json reply = ok_with("gpus", backend_.list_gpus());
    if (const std::string problem = backend_.gpu_problem(); !problem.empty())
      reply["gpu_problem"] = problem;
    return reply;
  }
  if (op == "create" || op == "update") {
    auto tenant = request.find("tenant");
    if (tenant == request.end() || !tenant->is_object())
      return LineServer::error_reply("\"tenant\" must be an object");
    auto result =
        op == "create" ? backend_.create_tenant(*tenant) : backend_.update_tenant(*tenant);
    return result ? ok_with("tenant", std::move(*result)) : LineServer::error_reply(result.error());
  }
  if (op == "delete") {
    auto name = request.find("name");
    if (name == request.end() || !name->is_string())
      return LineServer::error_reply("\"name\" must be a string");
    auto status = backend_.delete_tenant(name->get<std::string>());
    return status ? json{{"ok", true}} : LineServer::error_reply(status.error());
  }
  return LineServer::error_reply(
      "unknown op \"" + op.substr(0, 40) +
      "\" (the admin socket accepts create, update, delete, list, gpus)");
}

}  // namespace fracgpu::broker
