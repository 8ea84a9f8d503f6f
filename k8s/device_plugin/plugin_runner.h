// The plugin's lifecycle around the kubelet: serve DevicePlugin on our endpoint socket,
// register with the kubelet's Registration service, and do both again whenever the
// kubelet restarts. A restarting kubelet removes the sockets in its device-plugin
// directory and creates a new kubelet.sock; we notice either (our socket gone, or
// kubelet.sock replaced: a different inode or change time) on a one-second check —
// polling rather than inotify because the directory is a hostPath mount where polling
// is always reliable and one stat a second is nothing. A second thread re-reads the
// broker's GPU list for health.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "device_plugin/broker_admin.h"
#include "device_plugin/device_plugin_service.h"
#include "device_plugin/plugin_config.h"
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

  std::string endpoint_path() const;
  std::string kubelet_socket_path() const;

 private:
  struct FileIdentity {
    dev_t device = 0;
    ino_t inode = 0;
    long change_ns = 0;
    bool operator==(const FileIdentity&) const = default;
  };
  static bool identify(const std::string& path, FileIdentity& out);

  bool start_server();
  void stop_server();
  bool register_with_kubelet();
  void health_loop(const std::atomic<bool>& stop);

  PluginConfig config_;
  BrokerAdmin broker_;        // Allocate: retries while the broker restarts
  BrokerAdmin health_probe_;  // health polls: one attempt, the next poll is the retry
  SliceInventory inventory_;
  std::unique_ptr<DevicePluginService> service_;
  std::unique_ptr<grpc::Server> server_;
  FileIdentity endpoint_identity_;
  FileIdentity registered_kubelet_;
  bool registered_ = false;
};

}  // namespace fracgpu::k8s
