// The device plugin against a fake kubelet, with no cluster: the real
// fracgpu-device-plugin binary, the real fracgpu-broker over a private simulated node of
// two 16 GiB GPUs, and the kubelet's side of the gRPC protocol played by the test
// (fake_kubelet.h). Covers registration, the advertised slices and their health,
// packing advice, Allocate (response and the tenant's quota in the broker), refusals,
// kubelet restarts and broker restarts.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "plugin_fixture.h"

namespace fracgpu::testing {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr int kSlices = 4;  // the fixture's default --slices

class DevicePluginTest : public PluginNodeTest {};

TEST_F(DevicePluginTest, RegistersTheResourceAndItsEndpoint) {
  auto registrations = kubelet_->registration().wait_for(1, std::chrono::seconds(1));
  ASSERT_EQ(registrations.size(), 1u);
  const auto& r = registrations[0];
  EXPECT_EQ(r.version(), "v1beta1");
  EXPECT_EQ(r.resource_name(), "fracgpu.io/gpu-slice");
  EXPECT_EQ(r.endpoint(), "fracgpu.sock");
  EXPECT_TRUE(r.options().get_preferred_allocation_available());
  EXPECT_TRUE(r.options().pre_start_required()) << "tenants made at a container's start";
  struct stat st {};
  ASSERT_EQ(stat((plugin_dir() + "/" + r.endpoint()).c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));

  grpc::ClientContext context;
  v1beta1::Empty empty;
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(plugin_stub_->GetDevicePluginOptions(&context, empty, &options).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());
  EXPECT_TRUE(options.pre_start_required());
  grpc::ClientContext pre_start_context;
  v1beta1::PreStartContainerRequest pre_start;
  v1beta1::PreStartContainerResponse pre_start_reply;
  EXPECT_TRUE(
      plugin_stub_->PreStartContainer(&pre_start_context, pre_start, &pre_start_reply).ok());
}

TEST_F(DevicePluginTest, ListAndWatchAdvertisesEachGpuAsNHealthySlices) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = plugin_stub_->ListAndWatch(&context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(stream->Read(&list));
  std::set<std::string> seen;
  for (const auto& device : list.devices()) {
    EXPECT_EQ(device.health(), "Healthy") << device.id();
    seen.insert(device.id());
  }
  std::set<std::string> expected;
  for (int k = 0; k < kSlices; ++k) {
    expected.insert(k8s::format_slice_id(gpu0_, k));
    expected.insert(k8s::format_slice_id(gpu1_, k));
  }
  EXPECT_EQ(seen, expected);
  context.TryCancel();
}

TEST_F(DevicePluginTest, SlicesPerGpuComeFromTheConfigFileWithPerNodeEntries) {
  stop_plugin();
  std::ofstream(dir_.path() + "/plugin.conf")
      << "# cluster default\nslices=2\nslices.gpu-node-7=3\n";
  start_plugin({"--config", dir_.path() + "/plugin.conf"}, {{"NODE_NAME", "gpu-node-7"}});
  EXPECT_EQ(first_list().devices_size(), 2 * 3);
  stop_plugin();
  start_plugin({"--config", dir_.path() + "/plugin.conf"}, {{"NODE_NAME", "gpu-node-1"}});
  EXPECT_EQ(first_list().devices_size(), 2 * 2);
  stop_plugin();
  start_plugin({"--config", dir_.path() + "/plugin.conf", "--slices", "5"});  // the flag wins
  EXPECT_EQ(first_list().devices_size(), 2 * 5);
}

// In a DaemonSet the plugin may start before the broker answers: it registers at once,
// advertises nothing, and streams the slices when the broker comes up.
TEST_F(DevicePluginTest, APluginStartedBeforeTheBrokerAdvertisesOnceItAnswers) {
  stop_plugin();
  kill_broker();
  start_plugin();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = plugin_stub_->ListAndWatch(&context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(stream->Read(&list));
  EXPECT_EQ(list.devices_size(), 0);
  start_broker();
  ASSERT_TRUE(stream->Read(&list)) << plugin_->err();
  EXPECT_EQ(list.devices_size(), 2 * kSlices);
  for (const auto& device : list.devices()) EXPECT_EQ(device.health(), "Healthy");
  context.TryCancel();
}

TEST_F(DevicePluginTest, AGpuMissingFromTheBrokerTurnsItsSlicesUnhealthy) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = plugin_stub_->ListAndWatch(&context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse list;
  ASSERT_TRUE(stream->Read(&list));
  // The node comes back with one GPU: a broker over a new simulated node of one device.
  kill_broker();
  shm_names_.push_back("/" + unique_name("k8s1"));
  env_["FAKECUDA_SHM_NAME"] = shm_names_.back();
  env_["FAKECUDA_DEVICE_COUNT"] = "1";
  start_broker();
  ASSERT_TRUE(stream->Read(&list)) << plugin_->err();
  ASSERT_EQ(list.devices_size(), 2 * kSlices);
  for (const auto& device : list.devices()) {
    const bool on_gpu1 = k8s::parse_slice_id(device.id())->gpu_uuid == gpu1_;
    EXPECT_EQ(device.health(), on_gpu1 ? "Unhealthy" : "Healthy") << device.id();
  }
  // Allocate refuses the unhealthy GPU's slices and still serves the healthy one.
  v1beta1::AllocateResponse response;
  auto refused = allocate(slice_ids(gpu1_, {0}), response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("unhealthy"), std::string::npos)
      << refused.error_message();
  v1beta1::AllocateResponse ok_response;
  EXPECT_TRUE(allocate(slice_ids(gpu0_, {0}), ok_response).ok());
  context.TryCancel();
}

TEST_F(DevicePluginTest, PreferredAllocationPacksOntoTheFullestGpuThatFits) {
  v1beta1::PreferredAllocationRequest request;
  auto* container = request.add_container_requests();
  for (const auto& id : slice_ids(gpu0_, {0, 1, 2, 3})) container->add_available_deviceids(id);
  for (const auto& id : slice_ids(gpu1_, {1, 3})) container->add_available_deviceids(id);
  container->set_allocation_size(2);
  auto* second = request.add_container_requests();
  *second = *container;
  second->set_allocation_size(3);
  auto* pinned = request.add_container_requests();
  *pinned = *container;
  pinned->add_must_include_deviceids(k8s::format_slice_id(gpu0_, 2));
  pinned->set_allocation_size(2);

  grpc::ClientContext context;
  v1beta1::PreferredAllocationResponse response;
  ASSERT_TRUE(plugin_stub_->GetPreferredAllocation(&context, request, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 3);
  auto as_vector = [](const auto& repeated) {
    return std::vector<std::string>(repeated.begin(), repeated.end());
  };
  EXPECT_EQ(as_vector(response.container_responses(0).deviceids()), slice_ids(gpu1_, {1, 3}));
  EXPECT_EQ(as_vector(response.container_responses(1).deviceids()), slice_ids(gpu0_, {0, 1, 2}));
  EXPECT_EQ(as_vector(response.container_responses(2).deviceids()), slice_ids(gpu0_, {2, 0}));
}

TEST_F(DevicePluginTest, AllocateRegistersTheTenantWithItsShareOfTheGpu) {
  v1beta1::AllocateResponse response;
  auto status = allocate(slice_ids(gpu1_, {3, 1}), response);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->err();
  ASSERT_EQ(response.container_responses_size(), 1);
  const auto& container = response.container_responses(0);
  const std::string name = k8s::tenant_name_for(gpu1_, {1, 3});

  std::map<std::string, std::pair<std::string, bool>> mounts;
  for (const auto& m : container.mounts())
    mounts[m.container_path()] = {m.host_path(), m.read_only()};
  ASSERT_EQ(mounts.size(), 3u);
  EXPECT_EQ(mounts["/usr/local/fracgpu/lib/libfracgpu.so"], std::make_pair(shim_host_path_, true));
  EXPECT_EQ(mounts["/etc/ld.so.preload"], std::make_pair(preload_host_path_, true));
  // The broker's own directory for an owner-less tenant, read-only in the container.
  EXPECT_EQ(mounts["/run/fracgpu"], std::make_pair(run_dir() + "/pods/" + name, true));
  EXPECT_TRUE(std::filesystem::exists(run_dir() + "/pods/" + name + "/broker.sock"));
  EXPECT_EQ(container.envs().at("NVIDIA_VISIBLE_DEVICES"), gpu1_);
  EXPECT_EQ(container.envs().at("FRACGPU_SOCKET"), "/run/fracgpu/broker.sock");
  EXPECT_EQ(container.annotations().at("fracgpu.io/tenant"), name);

  auto t = tenant(name);
  ASSERT_FALSE(t.is_null()) << "tenant " << name << " not in the broker";
  ASSERT_EQ(t["devices"].size(), 1u);
  const auto& d = t["devices"][0];
  EXPECT_EQ(d["gpu"], 1);
  EXPECT_EQ(d["memory_limit"].get<uint64_t>(), 8 * kGiB);  // 2 of 4 slices of 16 GiB
  EXPECT_EQ(d["memory_request"].get<uint64_t>(), 8 * kGiB);
  EXPECT_EQ(d["compute"], 50);

  // A restarted container is allocated the same IDs: same tenant, not a second one.
  v1beta1::AllocateResponse again;
  ASSERT_TRUE(allocate(slice_ids(gpu1_, {1, 3}), again).ok());
  EXPECT_EQ(again.container_responses(0).annotations().at("fracgpu.io/tenant"), name);
  auto listed = admin_.call({{"op", "list"}});
  ASSERT_TRUE(listed);
  EXPECT_EQ((*listed)["tenants"].size(), 1u);
}

// What a container would do with the response (run_in_allocation: the shim preloaded,
// FRACGPU_SOCKET into the mounted tenant directory).
TEST_F(DevicePluginTest, AProcessUsingTheAllocationIsCappedAtItsShare) {
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {0}), response).ok());  // 1 of 4 slices: 4 GiB
  ProcessResult r;
  auto result =
      run_in_allocation(response.container_responses(0),
                        {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(64ull << 20)}, r);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_TRUE(result.is_object()) << r.out;
  EXPECT_EQ(result["refused_with"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(result["info_total"].get<uint64_t>(), 4 * kGiB);
  EXPECT_EQ(result["allocated"].get<uint64_t>(), 4 * kGiB - (64ull << 20));  // minus the context
}

TEST_F(DevicePluginTest, AllocateRefusesSlicesOfTwoGpusClearly) {
  v1beta1::AllocateResponse response;
  auto status =
      allocate({k8s::format_slice_id(gpu0_, 0), k8s::format_slice_id(gpu1_, 0)}, response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("different GPUs"), std::string::npos)
      << status.error_message();
  auto listed = admin_.call({{"op", "list"}});
  ASSERT_TRUE(listed);
  EXPECT_TRUE((*listed)["tenants"].empty());
  EXPECT_TRUE(plugin_->running());
}

// A mount whose host path is missing is created by containerd's CRI as an empty directory
// (tests/runtime/cri_pod_test.sh, containerd 1.6): the container then has a directory at
// /etc/ld.so.preload, loads no shim and runs uncapped. So the plugin refuses the Allocate
// (the kubelet fails the pod's admission with the message) while the shim or the preload
// file is missing or not a regular file, creates no tenant, and serves again once it is.
TEST_F(DevicePluginTest, AllocateIsRefusedWhileTheFilesItMountsAreMissing) {
  const auto ids = slice_ids(gpu0_, {0, 1});
  const std::string name = k8s::tenant_name_for(gpu0_, {0, 1});
  std::filesystem::remove(preload_host_path_);
  v1beta1::AllocateResponse response;
  auto status = allocate(ids, response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find(preload_host_path_ + " on the node: "), std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find("uncapped"), std::string::npos) << status.error_message();
  EXPECT_TRUE(tenant(name).is_null()) << "a refused Allocate left a tenant behind";

  // What containerd leaves after such a mount: a directory at the path. Still refused.
  std::filesystem::create_directory(preload_host_path_);
  response.Clear();
  status = allocate(ids, response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("is a directory"), std::string::npos)
      << status.error_message();
  std::filesystem::remove(preload_host_path_);

  std::filesystem::rename(shim_host_path_, shim_host_path_ + ".gone");
  std::ofstream(preload_host_path_) << "/usr/local/fracgpu/lib/libfracgpu.so\n";
  response.Clear();
  status = allocate(ids, response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find(shim_host_path_ + " on the node: "), std::string::npos)
      << status.error_message();

  std::filesystem::rename(shim_host_path_ + ".gone", shim_host_path_);
  response.Clear();
  status = allocate(ids, response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(tenant(name).is_null());
  EXPECT_TRUE(plugin_->running());
}

TEST_F(DevicePluginTest, SlicesGivenToANewContainerReplaceTheGoneContainersTenant) {
  // While both fit, overlapping tenants coexist (an init container's slices reused by the
  // app container are allocated before either runs).
  v1beta1::AllocateResponse init_response, app_response;
  ASSERT_TRUE(allocate(slice_ids(gpu1_, {0}), init_response).ok());
  ASSERT_TRUE(allocate(slice_ids(gpu1_, {0, 1}), app_response).ok());
  EXPECT_FALSE(tenant(k8s::tenant_name_for(gpu1_, {0})).is_null());
  EXPECT_FALSE(tenant(k8s::tenant_name_for(gpu1_, {0, 1})).is_null());

  v1beta1::AllocateResponse whole;
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {0, 1, 2, 3}), whole).ok());  // all 16 GiB guaranteed
  ASSERT_TRUE(pre_start(slice_ids(gpu0_, {0, 1, 2, 3})).ok());        // its container ran
  // The kubelet hands slices 2 and 3 to another container: the first one has gone. Without
  // removing its tenant the broker would refuse the new guarantee (the GPU is full).
  v1beta1::AllocateResponse half;
  auto status = allocate(slice_ids(gpu0_, {2, 3}), half);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(tenant(k8s::tenant_name_for(gpu0_, {0, 1, 2, 3})).is_null());
  EXPECT_FALSE(tenant(k8s::tenant_name_for(gpu0_, {2, 3})).is_null());
}

TEST_F(DevicePluginTest, ATenantWithRunningProcessesIsNeverTakenOver) {
  v1beta1::AllocateResponse whole;
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {0, 1, 2, 3}), whole).ok());
  ASSERT_TRUE(pre_start(slice_ids(gpu0_, {0, 1, 2, 3})).ok());
  const std::string old_name = k8s::tenant_name_for(gpu0_, {0, 1, 2, 3});
  Environment env = env_;
  env["FRACGPU_SOCKET"] = run_dir() + "/pods/" + old_name + "/broker.sock";
  env["LD_PRELOAD"] = FRACGPU_SHIM_PATH;
  env["FRACGPU_REAL_DRIVER"] = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
  auto holder = std::make_unique<BackgroundProcess>(
      std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "hold", "--bytes",
                               std::to_string(64ull << 20)},
      env, dir_.path() + "/holder");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (tenant(old_name)["processes"].empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(tenant(old_name)["processes"].empty()) << holder->err();

  v1beta1::AllocateResponse refused_response;
  auto refused = allocate(slice_ids(gpu0_, {2, 3}), refused_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_NE(refused.error_message().find("refused tenant"), std::string::npos)
      << refused.error_message();
  EXPECT_FALSE(tenant(old_name).is_null());

  holder.reset();  // the old container's process is gone
  const auto gone = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!tenant(old_name)["processes"].empty() && std::chrono::steady_clock::now() < gone) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  v1beta1::AllocateResponse response;
  auto status = allocate(slice_ids(gpu0_, {2, 3}), response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(tenant(old_name).is_null());
}

// The kubelet allocates every container of a pod at admission, before any starts, and hands
// an init container's devices to the app container after it. On a GPU whose guarantees are
// taken (another pod holds slices 2-3), the app container's slice 0 overlaps the init
// container's 0-1: the broker refuses the app's tenant, and the init container's tenant has
// no process — because it has not started yet. It is kept (pending_starts.h); the app's
// tenant is made at its PreStartContainer, after the init container ran. (The old Allocate
// deleted the init container's tenant as "gone": its container then found no tenant.)
TEST_F(DevicePluginTest, AnInitContainersTenantOutlivesTheAppContainersAllocate) {
  v1beta1::AllocateResponse other, init, app;
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {2, 3}), other).ok());
  ASSERT_TRUE(pre_start(slice_ids(gpu0_, {2, 3})).ok());
  const std::string init_name = k8s::tenant_name_for(gpu0_, {0, 1});
  const std::string app_name = k8s::tenant_name_for(gpu0_, {0});
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {0, 1}), init).ok());
  auto status = allocate(slice_ids(gpu0_, {0}), app);
  ASSERT_TRUE(status.ok()) << status.error_message() << plugin_->err();
  EXPECT_FALSE(tenant(init_name).is_null()) << "the init container has not even started";
  EXPECT_TRUE(tenant(app_name).is_null()) << "made at its own start";
  std::map<std::string, std::string> mounts;
  for (const auto& m : app.container_responses(0).mounts())
    mounts[m.container_path()] = m.host_path();
  EXPECT_EQ(mounts["/run/fracgpu"], run_dir() + "/pods/" + app_name);

  // The init container starts, runs capped at its 8 GiB, and is still running when the
  // app container's start is tried: that start is refused, the init container keeps its tenant.
  ASSERT_TRUE(pre_start(slice_ids(gpu0_, {0, 1})).ok());
  Environment env = env_;
  env["FRACGPU_SOCKET"] = run_dir() + "/pods/" + init_name + "/broker.sock";
  env["LD_PRELOAD"] = FRACGPU_SHIM_PATH;
  env["FRACGPU_REAL_DRIVER"] = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
  auto holder = std::make_unique<BackgroundProcess>(
      std::vector<std::string>{FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(7ull << 30)},
      env, dir_.path() + "/init-holder");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (tenant(init_name)["processes"].empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_FALSE(tenant(init_name)["processes"].empty()) << holder->err();
  const auto early = pre_start(slice_ids(gpu0_, {0}));
  EXPECT_EQ(early.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << early.error_message();
  EXPECT_FALSE(tenant(init_name).is_null());

  // The init container has finished: the app container starts on its own tenant, capped.
  holder.reset();
  const auto gone = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!tenant(init_name)["processes"].empty() && std::chrono::steady_clock::now() < gone)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  status = pre_start(slice_ids(gpu0_, {0}));
  ASSERT_TRUE(status.ok()) << status.error_message() << plugin_->err();
  EXPECT_TRUE(tenant(init_name).is_null());
  EXPECT_FALSE(tenant(app_name).is_null());
  EXPECT_FALSE(tenant(k8s::tenant_name_for(gpu0_, {2, 3})).is_null()) << "the other pod's";
  ProcessResult r;
  auto result =
      run_in_allocation(app.container_responses(0),
                        {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(64ull << 20)}, r);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(result["info_total"].get<uint64_t>(), 4 * kGiB);
}

TEST_F(DevicePluginTest, PreStartContainerRefusesIdsItCannotPlan) {
  const auto status = pre_start({k8s::format_slice_id(gpu0_, 0), k8s::format_slice_id(gpu1_, 0)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("different GPUs"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(plugin_->running());
}

TEST_F(DevicePluginTest, RegistersAgainWhenTheKubeletRestarts) {
  kubelet_->restart();  // removes our socket and recreates kubelet.sock
  auto registrations = kubelet_->registration().wait_for(2, std::chrono::seconds(10));
  ASSERT_EQ(registrations.size(), 2u) << plugin_->err();
  EXPECT_EQ(registrations[1].resource_name(), "fracgpu.io/gpu-slice");
  auto stub = kubelet_->dial(registrations[1].endpoint());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(stub->GetDevicePluginOptions(&context, v1beta1::Empty(), &options).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());
}

TEST_F(DevicePluginTest, RegistersAgainWhenOnlyTheKubeletSocketIsReplaced) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a distinct change time
  kubelet_->restart(/*keep_plugin_sockets=*/true);
  auto registrations = kubelet_->registration().wait_for(2, std::chrono::seconds(10));
  ASSERT_EQ(registrations.size(), 2u) << plugin_->err();
  EXPECT_EQ(registrations[1].endpoint(), "fracgpu.sock");
}

TEST_F(DevicePluginTest, AllocateRidesOutABrokerRestartAndReportsAnOutage) {
  kill_broker();
  // Down for good: a clear UNAVAILABLE, and the plugin keeps running.
  v1beta1::AllocateResponse response;
  auto down = allocate(slice_ids(gpu0_, {0}), response);
  EXPECT_EQ(down.error_code(), grpc::StatusCode::UNAVAILABLE) << down.error_message();
  EXPECT_NE(down.error_message().find("cannot be reached"), std::string::npos)
      << down.error_message();
  EXPECT_TRUE(plugin_->running());
  // Back within the retry window: the same call succeeds.
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    start_broker();
  });
  v1beta1::AllocateResponse later;
  auto status = allocate(slice_ids(gpu0_, {1}), later);
  restart.join();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(tenant(k8s::tenant_name_for(gpu0_, {1})).is_null());
}

// Bad settings stop the plugin at start with one line and exit status 2, before it
// touches the kubelet's directory.
TEST(DevicePluginFlags, BadSettingsAreOneLineAndExitStatusTwo) {
  TempDir dir{"k8s-flags"};
  std::ofstream(dir.path() + "/bad.conf") << "slices=lots\n";
  const std::string d = dir.path();
  const std::vector<std::vector<std::string>> cases = {
      {"--plugin-dir", d, "--broker-run-dir", d, "--slices", "0"},
      {"--plugin-dir", d, "--broker-run-dir", d, "--slices", "65"},
      {"--plugin-dir", d, "--broker-run-dir", d, "--config", d + "/bad.conf"},
      {"--plugin-dir", d, "--broker-run-dir", d, "--config", d + "/missing.conf"},
      {"--plugin-dir", "relative/dir", "--broker-run-dir", d},
      {"--plugin-dir", d, "--broker-run-dir", d, "--log-level", "loud"},
      {"--plugin-dir", d, "--broker-run-dir", d, "--slices", "eight"},
      {"--plugin-dir", d, "--no-such-flag"},
  };
  for (const auto& args : cases) {
    std::vector<std::string> argv = {FRACGPU_DEVICE_PLUGIN};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string extra = args.back();
    ProcessResult r = run_process(argv, clean_environment(), std::chrono::seconds(10));
    EXPECT_EQ(r.exit_code, 2) << extra << ": " << r.err;
    EXPECT_FALSE(r.err.empty() && r.out.empty()) << extra;
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/fracgpu.sock"));
  }
}

}  // namespace
}  // namespace fracgpu::testing
