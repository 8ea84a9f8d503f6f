// The DevicePlugin gRPC service the kubelet calls on one endpoint socket (API v1beta1).
// One instance per slice class (resource_class.h): the class decides which slices it
// streams, which IDs Allocate accepts and the quota and priority of the tenant it makes;
// the inventory and the broker link are shared.
// Synchronous gRPC: every call is short except ListAndWatch, which holds one server
// thread for as long as the kubelet watches, waking on inventory changes and on stop().
// After a successful Allocate, `on_allocated` (when given) is called: the pod
// attribution's nudge, which never blocks. PreStartContainer is required (the options):
// the kubelet calls it right before creating each container, and the plugin makes a tenant
// there whose creation waited on an init container's (pending_starts.h). With CDI on, both
// write the tenant's CDI spec and Allocate names it (cdi_publisher.h).
#pragma once

#include <atomic>
#include <functional>

#include "device_plugin/allocation_builder.h"
#include "device_plugin/broker_admin.h"
#include "device_plugin/cdi_publisher.h"
#include "device_plugin/pending_starts.h"
#include "device_plugin/plugin_config.h"
#include "device_plugin/resource_class.h"
#include "device_plugin/slice_inventory.h"
#include "deviceplugin/api.grpc.pb.h"

namespace fracgpu::k8s {

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  DevicePluginService(const PluginConfig& config, ResourceClass cls, SliceInventory& inventory,
                      const BrokerAdmin& broker, PendingStarts& pending,
                      std::function<void()> on_allocated = {}, const cdi::SpecDir* cdi = nullptr)
      : config_(config),
        class_(std::move(cls)),
        inventory_(inventory),
        broker_(broker),
        pending_(pending),
        on_allocated_(std::move(on_allocated)),
        cdi_(cdi) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty* request,
                                      v1beta1::DevicePluginOptions* response) override;
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty* request,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext* context,
                                      const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override;
  grpc::Status Allocate(grpc::ServerContext* context, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;
  grpc::Status PreStartContainer(grpc::ServerContext* context,
                                 const v1beta1::PreStartContainerRequest* request,
                                 v1beta1::PreStartContainerResponse* response) override;

  // Ends every ListAndWatch stream (before the server shuts down).
  void stop() { stopping_ = true; }

  // The options announced both at registration and by GetDevicePluginOptions.
  static v1beta1::DevicePluginOptions options();

 private:
  Result<EnsuredTenant> ensure(const AllocationPlan& plan) const;
  static grpc::Status failed(const std::string& error);

  const PluginConfig& config_;
  const ResourceClass class_;
  SliceInventory& inventory_;
  const BrokerAdmin& broker_;
  PendingStarts& pending_;  // shared by the plugin's classes: their tenants may overlap
  const std::function<void()> on_allocated_;
  const cdi::SpecDir* const cdi_;  // null: CDI off (cdi_publisher.h)
  std::atomic<bool> stopping_{false};
};

}  // namespace fracgpu::k8s
