// A fake kubelet for tests: the kubelet's side of the device-plugin API over real gRPC.
// It serves Registration on <plugin-dir>/kubelet.sock (recording every RegisterRequest)
// and dials the plugin's endpoint as a DevicePlugin client, as the kubelet does after a
// registration. restart() mimics a kubelet restart: the server goes away, the
// directory's sockets are removed, and a new kubelet.sock appears.
#pragma once

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "deviceplugin/api.grpc.pb.h"

namespace fracgpu::testing {

class FakeRegistration final : public v1beta1::Registration::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty*) override {
    std::lock_guard lock(mutex_);
    requests_.push_back(*request);
    arrived_.notify_all();
    return grpc::Status::OK;
  }

  // Waits until at least `count` registrations have arrived; returns them all.
  std::vector<v1beta1::RegisterRequest> wait_for(std::size_t count,
                                                 std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, limit, [&] { return requests_.size() >= count; });
    return requests_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<v1beta1::RegisterRequest> requests_;
};

class FakeKubelet {
 public:
  explicit FakeKubelet(std::string plugin_dir) : plugin_dir_(std::move(plugin_dir)) { start(); }
  ~FakeKubelet() { stop(); }

  std::string socket_path() const { return plugin_dir_ + "/kubelet.sock"; }
  FakeRegistration& registration() { return registration_; }

  // Like a restarting kubelet: stop serving, delete every socket in the directory (unless
  // `keep_plugin_sockets`: only kubelet.sock is replaced), serve again.
  void restart(bool keep_plugin_sockets = false) {
    stop();
    if (!keep_plugin_sockets) {
      for (const auto& entry : std::filesystem::directory_iterator(plugin_dir_)) {
        if (entry.is_socket()) std::filesystem::remove(entry.path());
      }
    }
    start();
  }

  // A DevicePlugin client on the endpoint a registration named.
  std::unique_ptr<v1beta1::DevicePlugin::Stub> dial(const std::string& endpoint) const {
    auto channel = grpc::CreateChannel("unix://" + plugin_dir_ + "/" + endpoint,
                                       grpc::InsecureChannelCredentials());
    return v1beta1::DevicePlugin::NewStub(channel);
  }

 private:
  void start() {
    ::unlink(socket_path().c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_path(), grpc::InsecureServerCredentials());
    builder.RegisterService(&registration_);
    server_ = builder.BuildAndStart();
  }
  void stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
  }

  std::string plugin_dir_;
  FakeRegistration registration_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace fracgpu::testing
