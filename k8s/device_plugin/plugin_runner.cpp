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
        kStopCheck, std::chrono::duration_cast<std::chrono::milliseconds>(
                        until - std::chrono::steady_clock::now()) +
                        std::chrono::milliseconds(1)));
  }
}

}  // namespace

PluginRunner::PluginRunner(PluginConfig config)
    : config_(std::move(config)),
      broker_(config_.broker_run_dir),
      health_probe_(config_.broker_run_dir, single_attempt()) {
  if (config_.pod_resources_interval > 0) {
    PodAttributionSettings settings;
    settings.socket_path = config_.pod_resources_socket;
    settings.interval = std::chrono::seconds(config_.pod_resources_interval);
    attribution_ = std::make_unique<PodAttributionLoop>(settings, resource_classes(config_),
                                                        config_.broker_run_dir, pending_starts_);
  }
  for (auto& cls : resource_classes(config_)) {
    Endpoint endpoint;
    endpoint.cls = std::move(cls);
    endpoints_.push_back(std::move(endpoint));
  }
}

PluginRunner::~PluginRunner() {
  for (auto& endpoint : endpoints_) stop_server(endpoint);
}

std::string PluginRunner::endpoint_path(const Endpoint& endpoint) const {
  return config_.plugin_dir + "/" + endpoint.cls.endpoint_name;
}
std::string PluginRunner::kubelet_socket_path() const {
  return config_.plugin_dir + "/" + kKubeletSocketName;
}

bool PluginRunner::identify(const std::string& path, FileIdentity& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  out = {st.st_dev, st.st_ino, st.st_ctim.tv_sec * 1000000000L + st.st_ctim.tv_nsec};
  return true;
}

bool PluginRunner::start_server(Endpoint& endpoint) {
  const std::string path = endpoint_path(endpoint);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    spdlog::error("cannot remove the old socket {}: {}", path, std::strerror(errno));
    return false;
  }
  std::function<void()> on_allocated;
  if (attribution_) on_allocated = [loop = attribution_.get()] { loop->nudge(); };
  endpoint.service = std::make_unique<DevicePluginService>(
      config_, endpoint.cls, inventory_, broker_, pending_starts_, std::move(on_allocated),
      cdi_ ? &*cdi_ : nullptr);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(endpoint.service.get());
  endpoint.server = builder.BuildAndStart();
  if (!endpoint.server || !identify(path, endpoint.socket_identity)) {
    spdlog::error("cannot serve the device plugin for {} on {}", endpoint.cls.resource_name, path);
    endpoint.server.reset();
    endpoint.service.reset();
    return false;
  }
  spdlog::info("serving the device-plugin API for {} on {}", endpoint.cls.resource_name, path);
  return true;
}

void PluginRunner::stop_server(Endpoint& endpoint) {
  if (!endpoint.server) return;
  endpoint.service->stop();
  endpoint.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  endpoint.server->Wait();
  endpoint.server.reset();
  endpoint.service.reset();
  // Remove our socket only if it is still ours (a restarted kubelet may have cleaned up).
  FileIdentity now;
  if (identify(endpoint_path(endpoint), now) && now == endpoint.socket_identity) {
    ::unlink(endpoint_path(endpoint).c_str());
  }
}

bool PluginRunner::register_with_kubelet(const Endpoint& endpoint) {
  auto channel =
      grpc::CreateChannel("unix://" + kubelet_socket_path(), grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest request;
  request.set_version(kApiVersion);
  request.set_endpoint(endpoint.cls.endpoint_name);
  request.set_resource_name(endpoint.cls.resource_name);
  *request.mutable_options() = DevicePluginService::options();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRegisterDeadline);
  v1beta1::Empty reply;
  const grpc::Status status = stub->Register(&context, request, &reply);
  if (!status.ok()) {
    spdlog::warn("registration of {} with the kubelet at {} failed: {} (will retry)",
                 endpoint.cls.resource_name, kubelet_socket_path(), status.error_message());
    return false;
  }
  spdlog::info("registered {} with the kubelet (endpoint {}, API {})", endpoint.cls.resource_name,
               endpoint.cls.endpoint_name, kApiVersion);
  return true;
}

void PluginRunner::keep_registered(Endpoint& endpoint, bool kubelet_present,
                                   const FileIdentity& kubelet_now) {
  FileIdentity socket_now;
  if (endpoint.server && (!identify(endpoint_path(endpoint), socket_now) ||
                          !(socket_now == endpoint.socket_identity))) {
    spdlog::warn("our socket {} was removed or replaced (kubelet restart?): serving again",
                 endpoint_path(endpoint));
    stop_server(endpoint);
    endpoint.registered = false;
  }
  if (!endpoint.server && !start_server(endpoint)) return;
  if (!kubelet_present) {
    endpoint.registered = false;
    return;
  }
  if (endpoint.registered && !(kubelet_now == endpoint.registered_kubelet)) {
    spdlog::info("the kubelet socket was recreated (kubelet restart): registering {} again",
                 endpoint.cls.resource_name);
    endpoint.registered = false;
  }
  if (!endpoint.registered && register_with_kubelet(endpoint)) {
    endpoint.registered = true;
    endpoint.registered_kubelet = kubelet_now;
  }
}

void PluginRunner::sync_cdi() {
  if (!cdi_) return;
  auto synced = sync_cdi_specs(*cdi_, health_probe_);
  if (!synced && synced.error() != last_cdi_problem_)
    spdlog::warn("CDI specs not checked against the broker's tenants: {}", synced.error());
  last_cdi_problem_ = synced ? "" : synced.error();
}

void PluginRunner::health_loop(const std::atomic<bool>& stop) {
  while (!stop) {
    inventory_.refresh(health_probe_);
    sync_cdi();
    sleep_unless_stopped(config_.health_interval, stop);
  }
}

int PluginRunner::run(const std::atomic<bool>& stop) {
  auto cdi_dir = open_cdi_dir(config_);
  if (!cdi_dir) {
    spdlog::error("{}", cdi_dir.error());
    return 2;
  }
  cdi_ = std::move(*cdi_dir);
  if (cdi_)
    spdlog::info("CDI {}: tenants' specs in {} as {}=<tenant>", cdi_mode_name(config_.cdi_mode),
                 cdi_->dir(), kCdiKind);
  if (config_.cdi_mode == CdiMode::only)
    spdlog::warn(
        "CDI only: the responses carry no mounts; a runtime that does not apply CDI (containerd "
        "1.6, containerd 1.7 without enable_cdi) would start containers without the cap");
  inventory_.refresh(health_probe_);
  sync_cdi();  // a restarted plugin: specs of tenants deleted while it was down
  std::thread health([&] { health_loop(stop); });
  std::thread attribution;
  if (attribution_) {
    spdlog::info("reading the kubelet's PodResources API at {} every {} s for the tenants' pods",
                 config_.pod_resources_socket, config_.pod_resources_interval);
    attribution = std::thread([&] { attribution_->run(stop); });
  }
  bool kubelet_missing_logged = false;
  while (!stop) {
    FileIdentity kubelet_now;
    const bool kubelet_present = identify(kubelet_socket_path(), kubelet_now);
    if (!kubelet_present && !kubelet_missing_logged)
      spdlog::info("waiting for the kubelet socket {}", kubelet_socket_path());
    kubelet_missing_logged = !kubelet_present;
    for (auto& endpoint : endpoints_) keep_registered(endpoint, kubelet_present, kubelet_now);
    sleep_unless_stopped(config_.kubelet_check_interval, stop);
  }
  spdlog::info("stopping");
  inventory_.stop();
  for (auto& endpoint : endpoints_) stop_server(endpoint);
  health.join();
  if (attribution.joinable()) attribution.join();
  return 0;
}

}  // namespace fracgpu::k8s
