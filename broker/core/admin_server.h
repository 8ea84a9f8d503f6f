// The node's admin socket (<run-dir>/admin.sock). The socket file is world-connectable
// (0666) so that `fracgpu status` can at least get a clear refusal, but every request
// is authorised from SO_PEERCRED: only root or the broker's own effective uid may use
// it. The operations themselves are delegated to an AdminBackend (the Broker).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <nlohmann/json.hpp>
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

 private:
  nlohmann::json dispatch(const std::string& op, const nlohmann::json& request);

  AdminBackend& backend_;
  uid_t owner_uid_;
  LineServer server_;
};

}  // namespace fracgpu::broker
