// Unit tests of the pod attribution, without a cluster or a broker: the kubelet's
// PodResources list matched to tenant names (the names Allocate gives, for every slice
// class; other resources, foreign IDs and split entries), the updates the broker needs
// (changed identities only; containers gone from the list keep theirs), the PodResources
// client against an in-process fake kubelet (fake_pod_resources.h) and its one-sentence
// failures, and the setting (flag, config file, validation).
#include "device_plugin/pod_attribution.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "device_plugin/allocation_builder.h"
#include "device_plugin/plugin_config.h"
#include "device_plugin/pod_resources_client.h"
#include "device_plugin/resource_class.h"
#include "device_plugin/slice_ids.h"
#include "fake_kubelet.h"
#include "fake_pod_resources.h"

namespace fracgpu::k8s {
namespace {

using nlohmann::json;
using testing::FakePodResourcesServer;
using testing::pod_resources;

std::vector<std::string> ids(const std::string& uuid, std::initializer_list<int> indices) {
  std::vector<std::string> out;
  for (int i : indices) out.push_back(format_slice_id(uuid, i));
  return out;
}

// 8 slices per GPU, 2 of them high, and 4 best-effort ones: all three resources.
std::vector<ResourceClass> three_classes() {
  PluginConfig config;
  config.slices = 8;
  config.high_slices = 2;
  config.besteffort_slices = 4;
  return resource_classes(config);
}

const ResourceClass& named(const std::vector<ResourceClass>& classes, const std::string& name) {
  for (const auto& cls : classes)
    if (cls.resource_name == name) return cls;
  throw std::runtime_error(name + " is not advertised");
}

TEST(PodAttribution, ContainersNameTheTenantsAllocateMade) {
  const auto classes = three_classes();
  v1::ListPodResourcesResponse list;
  *list.add_pod_resources() =
      pod_resources("ml", "trainer-0", "main", kResourceName, ids("GPU-a", {3, 1}));
  *list.add_pod_resources() =
      pod_resources("web", "api-7f9c", "server", kHighResourceName, ids("GPU-b", {6}));
  *list.add_pod_resources() =
      pod_resources("batch", "etl-1", "worker", kBestEffortResourceName, ids("GPU-a", {9, 8}));
  const PodAttribution found = attribute_tenants(list, classes);
  EXPECT_TRUE(found.skipped.empty());
  ASSERT_EQ(found.tenants.size(), 3u);
  // The very names plan_allocation gives those IDs.
  const std::string normal =
      container_slices(ids("GPU-a", {1, 3}), named(classes, kResourceName))->tenant;
  EXPECT_EQ(normal, tenant_name_for("GPU-a", {1, 3}, kTenantPrefix));
  EXPECT_EQ(found.tenants.at(normal), (PodIdentity{"ml", "trainer-0", "main"}));
  EXPECT_EQ(found.tenants.at(tenant_name_for("GPU-b", {6}, kHighTenantPrefix)),
            (PodIdentity{"web", "api-7f9c", "server"}));
  EXPECT_EQ(found.tenants.at(tenant_name_for("GPU-a", {8, 9}, kBestEffortTenantPrefix)),
            (PodIdentity{"batch", "etl-1", "worker"}));
}

TEST(PodAttribution, OtherResourcesAndForeignIdsNameNoTenant) {
  const auto classes = three_classes();
  v1::ListPodResourcesResponse list;
  *list.add_pod_resources() = pod_resources("a", "gpu-pod", "c", "nvidia.com/gpu", {"GPU-a"});
  *list.add_pod_resources() = pod_resources("a", "cpu-pod", "c", kResourceName, {});
  *list.add_pod_resources() =
      pod_resources("a", "spans", "c", kResourceName, {"GPU-a::0", "GPU-b::1"});
  *list.add_pod_resources() = pod_resources("a", "wrong-class", "c", kResourceName, {"GPU-a::6"});
  *list.add_pod_resources() = pod_resources("a", "junk", "c", kResourceName, {"not-a-slice"});
  const PodAttribution found = attribute_tenants(list, classes);
  EXPECT_TRUE(found.tenants.empty());
  ASSERT_EQ(found.skipped.size(), 3u);
  EXPECT_NE(found.skipped[0].find("a/spans/c"), std::string::npos) << found.skipped[0];
  EXPECT_NE(found.skipped[0].find("different GPUs"), std::string::npos) << found.skipped[0];
  EXPECT_NE(found.skipped[1].find("is not a fracgpu.io/gpu-slice slice"), std::string::npos)
      << found.skipped[1];
  EXPECT_TRUE(attribute_tenants(v1::ListPodResourcesResponse(), classes).tenants.empty());
}

TEST(PodAttribution, OneContainerWithTwoClassesAndSplitEntries) {
  const auto classes = three_classes();
  v1::PodResources pod = pod_resources("ml", "mixed", "main", kResourceName, ids("GPU-a", {0}));
  auto* container = pod.mutable_containers(0);
  auto* more = container->add_devices();  // the same resource in a second entry
  more->set_resource_name(kResourceName);
  more->add_device_ids(format_slice_id("GPU-a", 2));
  auto* high = container->add_devices();
  high->set_resource_name(kHighResourceName);
  high->add_device_ids(format_slice_id("GPU-a", 7));
  auto* other = container->add_devices();
  other->set_resource_name("example.com/nic");
  other->add_device_ids("nic0");
  v1::ListPodResourcesResponse list;
  *list.add_pod_resources() = pod;
  const PodAttribution found = attribute_tenants(list, classes);
  ASSERT_EQ(found.tenants.size(), 2u) << (found.skipped.empty() ? "" : found.skipped[0]);
  const PodIdentity who{"ml", "mixed", "main"};
  EXPECT_EQ(found.tenants.at(tenant_name_for("GPU-a", {0, 2})), who);
  EXPECT_EQ(found.tenants.at(tenant_name_for("GPU-a", {7}, kHighTenantPrefix)), who);
}

// An init container's slices reused by the app container: one tenant, and the app
// container (listed after the init containers) is the one it belongs to.
TEST(PodAttribution, TheLastListedContainerOfATenantWins) {
  const auto classes = three_classes();
  v1::PodResources pod = pod_resources("ml", "job-0", "setup", kResourceName, ids("GPU-a", {4}));
  auto* app = pod.add_containers();
  app->set_name("train");
  auto* devices = app->add_devices();
  devices->set_resource_name(kResourceName);
  devices->add_device_ids(format_slice_id("GPU-a", 4));
  v1::ListPodResourcesResponse list;
  *list.add_pod_resources() = pod;
  const PodAttribution found = attribute_tenants(list, classes);
  ASSERT_EQ(found.tenants.size(), 1u);
  EXPECT_EQ(found.tenants.begin()->second, (PodIdentity{"ml", "job-0", "train"}));
}

TEST(PodAttribution, OnlyChangedIdentitiesOfExistingTenantsAreUpdated) {
  const std::map<std::string, PodIdentity> wanted = {
      {"s-00000001-1", {"ml", "a", "main"}},   // the broker has it without a pod
      {"s-00000001-2", {"ml", "b", "main"}},   // already right
      {"s-00000001-4", {"ml", "c2", "main"}},  // a new container on the same slices
      {"s-00000001-8", {"ml", "d", "main"}}};  // not in the broker (Allocate in flight)
  const json broker = json::parse(R"([
      {"name": "s-00000001-1"},
      {"name": "s-00000001-2", "pod": {"namespace": "ml", "pod": "b", "container": "main"}},
      {"name": "s-00000001-4", "pod": {"namespace": "ml", "pod": "c1", "container": "main"}},
      {"name": "s-00000001-10", "pod": {"namespace": "ml", "pod": "gone", "container": "main"}},
      {"name": "run-1234"}, 7, {"name": 3}])");
  const auto changes = identity_changes(wanted, broker);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].first, "s-00000001-1");
  EXPECT_EQ(changes[0].second, (PodIdentity{"ml", "a", "main"}));
  EXPECT_EQ(changes[1].first, "s-00000001-4");
  EXPECT_EQ(changes[1].second, (PodIdentity{"ml", "c2", "main"}));
  // s-00000001-10's container has left the list: it keeps its identity (no update).
  EXPECT_TRUE(identity_changes({}, broker).empty());
  EXPECT_TRUE(identity_changes(wanted, json::object()).empty());
}

TEST(PodAttribution, PodJsonBothWays) {
  const PodIdentity pod{"ml", "trainer-0", "main"};
  EXPECT_EQ(pod_json(pod),
            json::parse(R"({"namespace":"ml","pod":"trainer-0","container":"main"})"));
  EXPECT_EQ(pod_json(PodIdentity{}), json::object());  // clears it
  EXPECT_EQ(pod_of(json{{"name", "t"}, {"pod", pod_json(pod)}}), pod);
  EXPECT_TRUE(pod_of(json{{"name", "t"}}).empty());
  EXPECT_TRUE(pod_of(json{{"pod", "x"}}).empty());
  EXPECT_TRUE(pod_of(json(nullptr)).empty());
  EXPECT_EQ(describe(pod), "ml/trainer-0/main");
}

class PodResourcesClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/fracgpu-podres-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string socket() const { return dir_ + "/kubelet.sock"; }
  std::string dir_;
};

TEST_F(PodResourcesClientTest, ListsWhatTheKubeletServes) {
  FakePodResourcesServer kubelet(socket());
  ASSERT_TRUE(kubelet.serving());
  kubelet.lister().set_pod(pod_resources("ml", "p", "c", kResourceName, {"GPU-a::0"}));
  auto listed = PodResourcesClient(socket()).list();
  ASSERT_TRUE(listed) << listed.error();
  ASSERT_EQ(listed->pod_resources_size(), 1);
  EXPECT_EQ(listed->pod_resources(0).namespace_(), "ml");
  EXPECT_EQ(listed->pod_resources(0).containers(0).devices(0).device_ids(0), "GPU-a::0");
  EXPECT_EQ(kubelet.lister().calls(), 1);
  kubelet.lister().remove_pod("ml", "p");
  listed = PodResourcesClient(socket()).list();
  ASSERT_TRUE(listed) << listed.error();
  EXPECT_EQ(listed->pod_resources_size(), 0);
}

TEST_F(PodResourcesClientTest, AnAbsentSocketSaysWhatToMount) {
  auto listed = PodResourcesClient(socket()).list();
  ASSERT_FALSE(listed);
  EXPECT_NE(listed.error().find(socket() + " does not exist"), std::string::npos) << listed.error();
  EXPECT_NE(listed.error().find("mount the host's /var/lib/kubelet/pod-resources"),
            std::string::npos)
      << listed.error();
  std::ofstream(socket()) << "a file";
  listed = PodResourcesClient(socket()).list();
  ASSERT_FALSE(listed);
  EXPECT_NE(listed.error().find("is not a socket"), std::string::npos) << listed.error();
}

TEST_F(PodResourcesClientTest, AKubeletWithoutTheApiIsNamedAsSuch) {
  testing::FakeRegistration registration;  // a gRPC server that serves something else
  FakePodResourcesServer other(socket(), &registration);
  ASSERT_TRUE(other.serving());
  auto listed = PodResourcesClient(socket()).list();
  ASSERT_FALSE(listed);
  EXPECT_NE(listed.error().find("does not serve the PodResources API v1"), std::string::npos)
      << listed.error();
}

TEST_F(PodResourcesClientTest, ASocketNobodyServesIsRefusedQuickly) {
  // A socket file left behind by a kubelet that has gone: bound, nobody listening.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket().c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const auto start = std::chrono::steady_clock::now();
  auto listed = PodResourcesClient(socket(), std::chrono::seconds(2)).list();
  ::close(fd);
  ASSERT_FALSE(listed);
  EXPECT_NE(listed.error().find(socket()), std::string::npos) << listed.error();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(PodResourcesSetting, DefaultsFileAndValidation) {
  PluginConfig config;
  EXPECT_EQ(config.pod_resources_interval, 10);
  EXPECT_EQ(config.pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_TRUE(validate(config));
  const std::string path =
      ::testing::TempDir() + "/fracgpu-podres-config-" + std::to_string(::getpid());
  std::ofstream(path) << "pod-resources-interval=30\npod-resources-interval.node-b=0\n";
  ASSERT_TRUE(load_config_file(path, "node-a", config));
  EXPECT_EQ(config.pod_resources_interval, 30);
  ASSERT_TRUE(load_config_file(path, "node-b", config));
  EXPECT_EQ(config.pod_resources_interval, 0);  // off
  EXPECT_TRUE(validate(config));
  std::remove(path.c_str());
  config.pod_resources_interval = -1;
  auto bad = validate(config);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("pod-resources-interval"), std::string::npos) << bad.error();
  config.pod_resources_interval = 3601;
  EXPECT_FALSE(validate(config));
  config.pod_resources_interval = 10;
  config.pod_resources_socket = "kubelet.sock";
  bad = validate(config);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("--pod-resources-socket"), std::string::npos) << bad.error();
}

}  // namespace
}  // namespace fracgpu::k8s
