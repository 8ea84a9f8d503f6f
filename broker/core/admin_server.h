// The node's admin socket (<run-dir>/admin.sock): the control plane, root's only. The
// socket file is 0600 and owned by the broker's effective uid, so other uids cannot even
// connect (the CLI turns EACCES into a sentence); a peer that gets through anyway (a
// different mode set by hand) is refused at accept time from SO_PEERCRED, before any of
// its bytes are read, and every request is checked again. Only root or the broker's own
// effective uid may use it, and they get room that floods cannot take
// (ConnectionLimits::admin_socket: a reserve above the cap, the spare descriptor at
// EMFILE). The operations themselves are delegated to an AdminBackend (the Broker).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/result.h"
#include "core/event_loop.h"
#include "core/line_server.h"

namespace fracgpu::broker {

class AdminBackend {
 public:
  virtual ~AdminBackend() = default;
  virtual Result<nlohmann::json> create_tenant(
      const nlohmann::json& tenant) = 0;  // -> TENANT_STATUS
  virtual Result<nlohmann::json> update_tenant(
      const nlohmann::json& tenant) = 0;  // -> TENANT_STATUS
  virtual Status delete_tenant(const std::string& name) = 0;
  virtual nlohmann::json list_tenants() = 0;  // [TENANT_STATUS...]
  virtual nlohmann::json list_gpus() = 0;     // [GPU...]
  virtual std::string gpu_problem() = 0;      // why there are no GPUs ("" when there are)
};

class AdminServer {
 public:
  AdminServer(EventLoop& loop, AdminBackend& backend, uid_t owner_uid);

  Status listen(const std::filesystem::path& path);
  void shutdown(bool unlink) { server_.shutdown(unlink); }

  nlohmann::json handle(const Peer& peer, const nlohmann::json& request);
  // The refusal for a peer that is neither root nor the broker's uid (nullopt: admitted).
  std::optional<std::string> refusal(const PeerCredentials& cred) const;

 private:
  nlohmann::json dispatch(const std::string& op, const nlohmann::json& request);

  AdminBackend& backend_;
  uid_t owner_uid_;
  LineServer server_;
};

}  // namespace fracgpu::broker
