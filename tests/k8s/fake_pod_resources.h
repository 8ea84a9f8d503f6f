// A fake of the kubelet's PodResources API for tests: v1.PodResourcesLister/List over
// real gRPC on a Unix socket the test names, answering with whatever the test put there
// (set_container / remove_pod, or set_response for the raw message), and counting the
// calls so a test can wait for the plugin's next reading instead of sleeping.
#pragma once

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "podresources/podresources.grpc.pb.h"

namespace fracgpu::testing {

// One pod with one container holding `ids` of `resource`.
inline v1::PodResources pod_resources(const std::string& ns, const std::string& pod,
                                      const std::string& container, const std::string& resource,
                                      const std::vector<std::string>& ids) {
  v1::PodResources p;
  p.set_namespace_(ns);
  p.set_name(pod);
  auto* c = p.add_containers();
  c->set_name(container);
  auto* d = c->add_devices();
  d->set_resource_name(resource);
  for (const auto& id : ids) d->add_device_ids(id);
  return p;
}

class FakePodResources final : public v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* response) override {
    std::lock_guard lock(mutex_);
    *response = response_;
    ++calls_;
    called_.notify_all();
    return grpc::Status::OK;
  }

  void set_response(v1::ListPodResourcesResponse response) {
    std::lock_guard lock(mutex_);
    response_ = std::move(response);
  }

  // Adds the pod, or replaces the pod of that namespace and name.
  void set_pod(const v1::PodResources& pod) {
    std::lock_guard lock(mutex_);
    for (auto& p : *response_.mutable_pod_resources()) {
      if (p.namespace_() == pod.namespace_() && p.name() == pod.name()) {
        p = pod;
        return;
      }
    }
    *response_.add_pod_resources() = pod;
  }

  void remove_pod(const std::string& ns, const std::string& pod) {
    std::lock_guard lock(mutex_);
    auto* pods = response_.mutable_pod_resources();
    for (int i = 0; i < pods->size(); ++i) {
      if (pods->Get(i).namespace_() == ns && pods->Get(i).name() == pod) {
        pods->DeleteSubrange(i, 1);
        return;
      }
    }
  }

  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

  // Waits until List has been called more than `after` times; false on timeout.
  bool wait_for_call_after(int after, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return called_.wait_for(lock, limit, [&] { return calls_ > after; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable called_;
  v1::ListPodResourcesResponse response_;
  int calls_ = 0;
};

// Serves `service` (FakePodResources, or any other service to play a kubelet that does
// not serve PodResources) on `socket_path` while it lives.
class FakePodResourcesServer {
 public:
  explicit FakePodResourcesServer(std::string socket_path, grpc::Service* service = nullptr)
      : socket_path_(std::move(socket_path)) {
    ::unlink(socket_path_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_path_, grpc::InsecureServerCredentials());
    builder.RegisterService(service != nullptr ? service : &lister_);
    server_ = builder.BuildAndStart();
  }
  ~FakePodResourcesServer() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
    ::unlink(socket_path_.c_str());
  }
  FakePodResourcesServer(const FakePodResourcesServer&) = delete;
  FakePodResourcesServer& operator=(const FakePodResourcesServer&) = delete;

  bool serving() const { return server_ != nullptr; }
  FakePodResources& lister() { return lister_; }

 private:
  std::string socket_path_;
  FakePodResources lister_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace fracgpu::testing
