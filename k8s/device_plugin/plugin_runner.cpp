// Serving, registering and re-registering with the kubelet (see plugin_runner.h).
#include "device_plugin/plugin_runner.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fracgpu::k8s {
namespace {

constexpr auto kStopCheck = std::chrono::milliseconds(100);
constexpr auto kRegisterDeadline = std::chrono::seconds(5);

RetryPolicy single_attempt() {
  RetryPolicy policy;
  policy.attempts = 1;
  return policy;
}

// Sleeps up to `total`, waking early when `stop` is set.
void sleep_unless_stopped(std::chrono::milliseconds total, const std::atomic<bool>& stop) {
  const auto until = std::chrono::steady_clock::now() + total;
  while (!stop && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        kStopCheck, std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()) +
                        std::chrono::milliseconds(1)));
  }
}

}  // namespace

PluginRunner::PluginRunner(PluginConfig config)
    : config_(std::move(config)),
      broker_(config_.broker_run_dir),
      health_probe_(config_.broker_run_dir, single_attempt()),
      inventory_(config_.slices) {}

PluginRunner::~PluginRunner() { stop_server(); }

std::string PluginRunner::endpoint_path() const { return config_.plugin_dir + "/" + config_.endpoint_name; }
std::string PluginRunner::kubelet_socket_path() const { return config_.plugin_dir + "/" + kKubeletSocketName; }

bool PluginRunner::identify(const std::string& path, FileIdentity& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  out = {st.st_dev, st.st_ino, st.st_ctim.tv_sec * 1000000000L + st.st_ctim.tv_nsec};
  return true;
}

bool PluginRunner::start_server() {
  const std::string path = endpoint_path();
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    spdlog::error("cannot remove the old socket {}: {}", path, std::strerror(errno));
    return false;
  }
  service_ = std::make_unique<DevicePluginService>(config_, inventory_, broker_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || !identify(path, endpoint_identity_)) {
    spdlog::error("cannot serve the device plugin on {}", path);
    server_.reset();
    service_.reset();
    return false;
  }
  spdlog::info("serving the device-plugin API on {}", path);
  return true;
}

void PluginRunner::stop_server() {
  if (!server_) return;
  service_->stop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
  service_.reset();
  // Remove our socket only if it is still ours (a restarted kubelet may have cleaned up).
  FileIdentity now;
  if (identify(endpoint_path(), now) && now == endpoint_identity_) ::unlink(endpoint_path().c_str());
}

bool PluginRunner::register_with_kubelet() {
  auto channel = grpc::CreateChannel("unix://" + kubelet_socket_path(), grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(config_.endpoint_name);
  request.set_resource_name(kResourceName);
  *request.mutable_options() = DevicePluginService::options();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRegisterDeadline);
  v1beta1::Empty reply;
  const grpc::Status status = stub->Register(&context, request, &reply);
  if (!status.ok()) {
    spdlog::warn("registration with the kubelet at {} failed: {} (will retry)", kubelet_socket_path(),
                 status.error_message());
    return false;
  }
  spdlog::info("registered {} with the kubelet (endpoint {}, API {})", kResourceName, config_.endpoint_name,
               kApiVersion);
  return true;
}

void PluginRunner::health_loop(const std::atomic<bool>& stop) {
  while (!stop) {
    inventory_.refresh(health_probe_);
    sleep_unless_stopped(config_.health_interval, stop);
  }
}

int PluginRunner::run(const std::atomic<bool>& stop) {
  inventory_.refresh(health_probe_);
  std::thread health([&] { health_loop(stop); });
  bool kubelet_missing_logged = false;
  while (!stop) {
    FileIdentity endpoint_now;
    if (server_ && (!identify(endpoint_path(), endpoint_now) || !(endpoint_now == endpoint_identity_))) {
      spdlog::warn("our socket {} was removed or replaced (kubelet restart?): serving again", endpoint_path());
      stop_server();
      registered_ = false;
    }
    if (!server_ && !start_server()) {
      sleep_unless_stopped(config_.kubelet_check_interval, stop);
      continue;
    }
    FileIdentity kubelet_now;
    if (!identify(kubelet_socket_path(), kubelet_now)) {
      if (!kubelet_missing_logged) spdlog::info("waiting for the kubelet socket {}", kubelet_socket_path());
      kubelet_missing_logged = true;
      registered_ = false;
    } else {
      kubelet_missing_logged = false;
      if (registered_ && !(kubelet_now == registered_kubelet_)) {
        spdlog::info("the kubelet socket was recreated (kubelet restart): registering again");
        registered_ = false;
      }
      if (!registered_ && register_with_kubelet()) {
        registered_ = true;
        registered_kubelet_ = kubelet_now;
      }
    }
    sleep_unless_stopped(config_.kubelet_check_interval, stop);
  }
  spdlog::info("stopping");
  inventory_.stop();
  stop_server();
  health.join();
  return 0;
}

}  // namespace fracgpu::k8s
