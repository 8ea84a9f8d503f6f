// The plugin's lifecycle around the kubelet: for every slice class (resource_class.h),
// serve DevicePlugin on the class's endpoint socket and register its resource with the
// kubelet's Registration service — the kubelet takes one resource per registration — and
// do both again whenever the kubelet restarts. A restarting kubelet removes the sockets in its
// device-plugin directory and creates a new kubelet.sock; we notice either (our socket gone, or
// kubelet.sock replaced: a different inode or change time) on a one-second check, per
// endpoint, so one class's socket removed alone is served and registered again too —
// polling rather than inotify because the directory is a hostPath mount where polling
// is always reliable and one stat a second is nothing. A second thread re-reads the
// broker's GPU list for health, and a third (unless --pod-resources-interval is 0) tells
// the broker which pod each tenant belongs to (pod_attribution_loop.h). With CDI on, the
// health thread also removes the CDI specs of tenants the broker no longer has
// (cdi_publisher.h), once before the first Allocate is served and then every health interval.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "device_plugin/broker_admin.h"
#include "device_plugin/device_plugin_service.h"
#include "device_plugin/plugin_config.h"
#include "device_plugin/pod_attribution_loop.h"
#include "device_plugin/resource_class.h"
#include "device_plugin/slice_inventory.h"

namespace fracgpu::k8s {

class PluginRunner {
 public:
  explicit PluginRunner(PluginConfig config);
  ~PluginRunner();
  PluginRunner(const PluginRunner&) = delete;
  PluginRunner& operator=(const PluginRunner&) = delete;

  // Runs until `stop` becomes true; returns the process exit status.
  int run(const std::atomic<bool>& stop);

  std::string kubelet_socket_path() const;

 private:
  struct FileIdentity {
    dev_t device = 0;
    ino_t inode = 0;
    long change_ns = 0;
    bool operator==(const FileIdentity&) const = default;
  };
  static bool identify(const std::string& path, FileIdentity& out);

  // One slice class's gRPC server and its registration state.
  struct Endpoint {
    ResourceClass cls;
    std::unique_ptr<DevicePluginService> service;
    std::unique_ptr<grpc::Server> server;
    FileIdentity socket_identity;
    FileIdentity registered_kubelet;
    bool registered = false;
  };

  std::string endpoint_path(const Endpoint& endpoint) const;
  bool start_server(Endpoint& endpoint);
  void stop_server(Endpoint& endpoint);
  bool register_with_kubelet(const Endpoint& endpoint);
  // One pass of the kubelet check for one endpoint: serve, notice a restart, register.
  void keep_registered(Endpoint& endpoint, bool kubelet_present, const FileIdentity& kubelet_now);
  void health_loop(const std::atomic<bool>& stop);
  void sync_cdi();  // the health thread's (and run()'s, before it starts)

  PluginConfig config_;
  std::optional<cdi::SpecDir> cdi_;  // set by run() unless --cdi off
  std::string last_cdi_problem_;     // logged once until it changes
  BrokerAdmin broker_;               // Allocate: retries while the broker restarts
  BrokerAdmin health_probe_;         // health polls: one attempt, the next poll is the retry
  SliceInventory inventory_;
  PendingStarts pending_starts_;                     // every class's Allocates and container starts
  std::unique_ptr<PodAttributionLoop> attribution_;  // null when turned off
  std::vector<Endpoint> endpoints_;  // one per advertised class, in registration order
};

}  // namespace fracgpu::k8s
