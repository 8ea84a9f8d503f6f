// The node under test for the Kubernetes integration tests: a real fracgpu-broker over a
// private simulated node of two 16 GiB GPUs (64 MiB context footprint), the real
// fracgpu-device-plugin binary, and a fake kubelet (fake_kubelet.h) it registers with.
// Shared by the device-plugin tests, the slice-class tests and the end-to-end pod test;
// a derived fixture picks the slices per GPU (and the extra flags, e.g. high and
// best-effort slices, with the number of resources the plugin then registers) and the
// shim/preload host paths the plugin mounts by setting the members below in its
// constructor. The plugin reads the kubelet's PodResources API on a socket in the test's
// directory (pod_resources_socket(); nothing serves it unless a test starts
// fake_pod_resources.h there), never the host's.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

#include "child_process.h"
#include "client/broker_launcher.h"
#include "device_plugin/broker_admin.h"
#include "device_plugin/slice_ids.h"
#include "fake_kubelet.h"

namespace fracgpu::testing {

class PluginNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = clean_environment();
    shm_names_.push_back("/" + unique_name("k8s"));
    env_["FAKECUDA_SHM_NAME"] = shm_names_.back();
    env_["FAKECUDA_MEMORY"] = "16GiB";
    env_["FAKECUDA_DEVICE_COUNT"] = "2";
    env_["FAKECUDA_CONTEXT_FOOTPRINT"] = "64MiB";
    std::filesystem::create_directories(plugin_dir());
    std::filesystem::create_directories(dir_.path() + "/pod-resources");
    // The files the plugin mounts must exist (it refuses Allocate otherwise): stand-ins in
    // the test's directory unless a derived fixture named its own.
    std::filesystem::create_directories(dir_.path() + "/host");
    if (shim_host_path_.empty()) {
      shim_host_path_ = dir_.path() + "/host/libfracgpu.so";
      std::ofstream(shim_host_path_) << "not a library\n";
    }
    if (preload_host_path_.empty()) {
      preload_host_path_ = dir_.path() + "/host/ld.so.preload";
      std::ofstream(preload_host_path_) << "/usr/local/fracgpu/lib/libfracgpu.so\n";
    }
    start_broker();
    if (HasFatalFailure()) return;
    auto gpus = admin_.gpus();
    ASSERT_TRUE(gpus) << gpus.error();
    ASSERT_EQ(gpus->size(), 2u);
    gpu0_ = (*gpus)[0].uuid;
    gpu1_ = (*gpus)[1].uuid;
    kubelet_ = std::make_unique<FakeKubelet>(plugin_dir());
    start_plugin();
  }

  void TearDown() override {
    if (plugin_) {
      plugin_->kill_now(SIGTERM);
      EXPECT_NE(plugin_->wait(std::chrono::seconds(10)), -1)
          << "the plugin did not stop on SIGTERM";
    }
    plugin_.reset();
    kubelet_.reset();
    broker_.kill();
    for (const auto& name : shm_names_) shm_unlink(name.c_str());
  }

  std::string plugin_dir() const { return dir_.path() + "/device-plugins"; }
  std::string run_dir() const { return dir_.path() + "/run"; }
  std::string pod_resources_socket() const { return dir_.path() + "/pod-resources/kubelet.sock"; }
  // The plugin's CDI specs (its default, /var/run/cdi, is the host's: never in a test).
  std::string cdi_dir() const { return dir_.path() + "/cdi"; }

  void start_broker() {
    client::BrokerLaunch launch;
    launch.program = {FRACGPU_BROKER};
    launch.run_dir = run_dir();
    launch.state_dir = dir_.path() + "/state";
    launch.args = {"--driver", FRACGPU_FAKECUDA_DIR "/libcuda.so.1", "--context-footprint",
                   "64MiB"};
    launch.environment = env_;
    launch.log_file = dir_.path() + "/broker-" + std::to_string(++broker_starts_) + ".log";
    launch.ready_timeout = std::chrono::seconds(10);
    const auto started = broker_.start(launch);
    ASSERT_TRUE(started.ok()) << started.error() << "\n" << read_text(launch.log_file);
  }

  void kill_broker() { broker_.kill(); }

  // "pid N: State: ...; wchan: ..." from /proc, for a diagnosis in the test's output.
  static std::string process_state(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid);
    std::string state = "gone", wchan;
    std::ifstream status(dir + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("State:", 0) == 0) state = line;
    std::getline(std::ifstream(dir + "/wchan") >> std::ws, wchan);
    return "pid " + std::to_string(pid) + ": " + state + "; wchan: " + wchan;
  }

  // Starts the plugin (by default with --slices slices_ and extra_args_) and waits for its
  // registrations (registrations_per_start_ of them: one per resource).
  void start_plugin(std::vector<std::string> slice_args = {}, const Environment& extra_env = {}) {
    if (slice_args.empty()) {
      slice_args = {"--slices", std::to_string(slices_)};
      slice_args.insert(slice_args.end(), extra_args_.begin(), extra_args_.end());
    }
    std::vector<std::string> argv = {FRACGPU_DEVICE_PLUGIN,
                                     "--plugin-dir",
                                     plugin_dir(),
                                     "--broker-run-dir",
                                     run_dir(),
                                     "--shim-host-path",
                                     shim_host_path_,
                                     "--preload-host-path",
                                     preload_host_path_,
                                     "--health-interval-ms",
                                     "200",
                                     "--log-level",
                                     "debug",
                                     "--pod-resources-socket",
                                     pod_resources_socket(),
                                     "--cdi-dir",
                                     cdi_dir()};
    argv.insert(argv.end(), pod_resources_args_.begin(), pod_resources_args_.end());
    argv.insert(argv.end(), cdi_args_.begin(), cdi_args_.end());
    argv.insert(argv.end(), slice_args.begin(), slice_args.end());
    Environment env = env_;
    for (const auto& [key, value] : extra_env) env[key] = value;
    plugin_ = std::make_unique<BackgroundProcess>(
        argv, env, dir_.path() + "/plugin-" + std::to_string(++plugin_starts_));
    expected_registrations_ += static_cast<std::size_t>(registrations_per_start_);
    auto registrations =
        kubelet_->registration().wait_for(expected_registrations_, std::chrono::seconds(10));
    // A plugin that has not registered: its state goes to the test's output. (Under ASan a
    // child of this multi-threaded process used to hang between fork and exec, asleep in a
    // futex with an empty log, in malloc: child_process.cpp now builds everything before
    // fork. The state line is what showed it.)
    if (registrations.size() != expected_registrations_)
      std::cerr << "plugin_fixture: no registration within 10 s; " << process_state(plugin_->pid())
                << "\n";
    ASSERT_EQ(registrations.size(), expected_registrations_) << "no registration; plugin log:\n"
                                                             << plugin_->err();
    stubs_.clear();
    for (auto r = registrations.end() - registrations_per_start_; r != registrations.end(); ++r) {
      stubs_[r->resource_name()] = kubelet_->dial(r->endpoint());
    }
    auto normal =
        std::find_if(registrations.end() - registrations_per_start_, registrations.end(),
                     [](const auto& r) { return r.resource_name() == "fracgpu.io/gpu-slice"; });
    plugin_stub_ =
        kubelet_->dial((normal != registrations.end() ? *normal : registrations.back()).endpoint());
  }

  void stop_plugin() {
    plugin_->kill_now(SIGTERM);
    ASSERT_NE(plugin_->wait(std::chrono::seconds(10)), -1) << "the plugin did not stop on SIGTERM";
    plugin_.reset();
  }

  // The DevicePlugin client of `resource`'s endpoint (as registered by the last start).
  v1beta1::DevicePlugin::Stub& stub(const std::string& resource) {
    auto it = stubs_.find(resource);
    if (it == stubs_.end()) throw std::runtime_error("no registration for " + resource);
    return *it->second;
  }

  // The first list of a new ListAndWatch stream (of the normal resource unless `on`).
  v1beta1::ListAndWatchResponse first_list(v1beta1::DevicePlugin::Stub* on = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = (on ? on : plugin_stub_.get())->ListAndWatch(&context, v1beta1::Empty());
    v1beta1::ListAndWatchResponse list;
    EXPECT_TRUE(stream->Read(&list));
    context.TryCancel();
    return list;
  }

  // Allocate on the normal resource unless `on`.
  grpc::Status allocate(const std::vector<std::string>& ids, v1beta1::AllocateResponse& response,
                        v1beta1::DevicePlugin::Stub* on = nullptr) {
    v1beta1::AllocateRequest request;
    auto* container = request.add_container_requests();
    for (const auto& id : ids) container->add_devices_ids(id);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return (on ? on : plugin_stub_.get())->Allocate(&context, request, &response);
  }

  // PreStartContainer with the container's IDs, as the kubelet calls it right before it
  // creates the container (the plugin asks for it at registration).
  grpc::Status pre_start(const std::vector<std::string>& ids) {
    v1beta1::PreStartContainerRequest request;
    for (const auto& id : ids) request.add_devices_ids(id);
    v1beta1::PreStartContainerResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return plugin_stub_->PreStartContainer(&context, request, &response);
  }

  // The broker's TENANT_STATUS of `name`, or null.
  nlohmann::json tenant(const std::string& name) {
    auto listed = admin_.call({{"op", "list"}});
    EXPECT_TRUE(listed) << listed.error();
    if (!listed) return nullptr;
    for (const auto& t : (*listed)["tenants"]) {
      if (t["name"] == name) return t;
    }
    return nullptr;
  }

  // Runs `argv` as a container given `container` would: the response's environment, the
  // shim preloaded, FRACGPU_SOCKET into the mounted tenant directory (its host path here,
  // standing in for the bind mount). Returns the last JSON object the program printed
  // (null when it printed none) and the raw result in `raw`.
  nlohmann::json run_in_allocation(const v1beta1::ContainerAllocateResponse& container,
                                   const std::vector<std::string>& argv, ProcessResult& raw) {
    std::string tenant_dir;
    for (const auto& m : container.mounts()) {
      if (m.container_path() == "/run/fracgpu") tenant_dir = m.host_path();
    }
    EXPECT_FALSE(tenant_dir.empty());
    Environment env = env_;
    for (const auto& [key, value] : container.envs()) env[key] = value;
    env["FRACGPU_SOCKET"] =
        tenant_dir + "/broker.sock";  // /run/fracgpu/broker.sock in the container
    env["LD_PRELOAD"] = FRACGPU_SHIM_PATH;
    env["FRACGPU_REAL_DRIVER"] = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
    raw = run_process(argv, env, std::chrono::seconds(30));
    const auto brace = raw.out.rfind('{');
    if (brace == std::string::npos) return nullptr;
    auto parsed = nlohmann::json::parse(raw.out.substr(brace), nullptr, false);
    return parsed.is_object() ? parsed : nlohmann::json(nullptr);
  }

  std::vector<std::string> slice_ids(const std::string& uuid, std::initializer_list<int> indices) {
    std::vector<std::string> out;
    for (int i : indices) out.push_back(k8s::format_slice_id(uuid, i));
    return out;
  }

  // What the plugin is started with; a derived fixture may change them in its constructor.
  int slices_ = 4;
  std::vector<std::string> extra_args_;          // e.g. {"--high-slices", "2"}
  int registrations_per_start_ = 1;              // resources the plugin registers with those flags
  std::vector<std::string> pod_resources_args_;  // e.g. {"--pod-resources-interval", "1"}
  std::vector<std::string> cdi_args_;            // e.g. {"--cdi", "only"}; specs go to cdi_dir()
  std::string shim_host_path_;                   // default: a file made in SetUp under dir_/host
  std::string preload_host_path_;                // likewise

  TempDir dir_{"k8s"};
  Environment env_;
  std::vector<std::string> shm_names_;
  k8s::BrokerAdmin admin_{dir_.path() + "/run", k8s::RetryPolicy{1, std::chrono::milliseconds(10),
                                                                 std::chrono::milliseconds(10)}};
  client::BrokerProcess broker_;
  int broker_starts_ = 0;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<BackgroundProcess> plugin_;
  int plugin_starts_ = 0;
  std::size_t expected_registrations_ = 0;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> plugin_stub_;  // the normal resource's endpoint
  std::map<std::string, std::unique_ptr<v1beta1::DevicePlugin::Stub>> stubs_;  // by resource name
  std::string gpu0_, gpu1_;
};

}  // namespace fracgpu::testing
