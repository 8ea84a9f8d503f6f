// Pod attribution end to end, with no cluster: the real fracgpu-device-plugin and
// fracgpu-broker (plugin_fixture.h), a fake kubelet for the device-plugin API and a fake
// PodResources API (fake_pod_resources.h) on the plugin's --pod-resources-socket. A
// container is allocated slices, the fake kubelet then lists that container's devices,
// and within seconds the broker's tenant carries the container's namespace, pod and
// container (in `fracgpu status --json` too); a second container gets its own; one that
// leaves the list keeps its identity; a broker that lost the tenant's GPU still takes
// the pod-only update; and without the API the plugin and broker work on and the plugin
// says so in one line.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "device_plugin/plugin_config.h"
#include "fake_pod_resources.h"
#include "plugin_fixture.h"

namespace fracgpu::testing {
namespace {

using nlohmann::json;

json pod(const std::string& ns, const std::string& name, const std::string& container) {
  return {{"namespace", ns}, {"pod", name}, {"container", container}};
}

std::size_t count_lines_with(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
  return n;
}

class PodIdentityTest : public PluginNodeTest {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.path() + "/pod-resources");
    kubelet_pods_ = std::make_unique<FakePodResourcesServer>(pod_resources_socket());
    ASSERT_TRUE(kubelet_pods_->serving());
    PluginNodeTest::SetUp();
  }
  void TearDown() override {
    PluginNodeTest::TearDown();
    kubelet_pods_.reset();
  }

  FakePodResources& pods() { return kubelet_pods_->lister(); }

  // Allocates `indices` of `gpu` and has the fake kubelet list them for the container.
  std::string allocate_for(const std::string& gpu, std::initializer_list<int> indices,
                           const std::string& ns, const std::string& name,
                           const std::string& container) {
    v1beta1::AllocateResponse response;
    auto status = allocate(slice_ids(gpu, indices), response);
    EXPECT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->err();
    pods().set_pod(pod_resources(ns, name, container, k8s::kResourceName, slice_ids(gpu, indices)));
    return status.ok() ? response.container_responses(0).annotations().at("fracgpu.io/tenant")
                       : std::string();
  }

  // The tenant's "pod" as the broker reports it, once it equals `wanted` (or the last
  // one seen after `limit`).
  json wait_for_pod(const std::string& tenant_name, const json& wanted,
                    std::chrono::milliseconds limit = std::chrono::seconds(6)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    json seen;
    do {
      const json t = tenant(tenant_name);
      seen = t.is_object() && t.contains("pod") ? t["pod"] : json();
      if (seen == wanted) return seen;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < deadline);
    return seen;
  }

  std::unique_ptr<FakePodResourcesServer> kubelet_pods_;
};

TEST_F(PodIdentityTest, EachAllocatedContainerGetsItsPodIdentity) {
  // The plugin reads the API every 10 s (the default), so what follows within seconds
  // comes from the passes each Allocate triggers.
  const std::string first = allocate_for(gpu0_, {0, 1}, "ml", "trainer-0", "main");
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(wait_for_pod(first, pod("ml", "trainer-0", "main")), pod("ml", "trainer-0", "main"))
      << plugin_->err();

  const std::string second = allocate_for(gpu0_, {2}, "web", "api-7f9c-x2", "server");
  ASSERT_FALSE(second.empty());
  EXPECT_NE(second, first);
  EXPECT_EQ(wait_for_pod(second, pod("web", "api-7f9c-x2", "server")),
            pod("web", "api-7f9c-x2", "server"))
      << plugin_->err();
  EXPECT_EQ(tenant(first)["pod"], pod("ml", "trainer-0", "main"));

  // The first container has ended: gone from the list, its tenant keeps its identity
  // (until the tenant is deleted). A third allocation proves passes ran since.
  pods().remove_pod("ml", "trainer-0");
  const int calls = pods().calls();
  const std::string third = allocate_for(gpu1_, {0}, "ml", "eval-1", "main");
  ASSERT_TRUE(pods().wait_for_call_after(calls, std::chrono::seconds(5)));
  EXPECT_EQ(wait_for_pod(third, pod("ml", "eval-1", "main")), pod("ml", "eval-1", "main"));
  EXPECT_EQ(tenant(first)["pod"], pod("ml", "trainer-0", "main"));

  // The same in `fracgpu status --json`, beside its api_version.
  Environment env = env_;
  env["FRACGPU_RUN_DIR"] = run_dir();
  ProcessResult r = run_process({FRACGPU_CLI, "status", "--json"}, env, std::chrono::seconds(20));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json status = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(status.is_object()) << r.out;
  EXPECT_EQ(status["api_version"], 1);
  std::map<std::string, json> by_name;
  for (const auto& t : status["tenants"]) by_name[t["name"].get<std::string>()] = t;
  EXPECT_EQ(by_name[second]["pod"], pod("web", "api-7f9c-x2", "server"));
  EXPECT_EQ(by_name[first]["pod"], pod("ml", "trainer-0", "main"));
  EXPECT_TRUE(plugin_->running());
}

// The broker restarted without the tenant's GPU: a quota update would now be refused at
// admission, the pod-only update still goes through (the periodic pass: no Allocate).
class PodIdentityPeriodicTest : public PodIdentityTest {
 protected:
  PodIdentityPeriodicTest() { pod_resources_args_ = {"--pod-resources-interval", "1"}; }
};

TEST_F(PodIdentityPeriodicTest, APodOnlyUpdateNeedsNoAdmission) {
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(allocate(slice_ids(gpu1_, {3}), response).ok());
  const std::string name = k8s::tenant_name_for(gpu1_, {3});
  kill_broker();
  shm_names_.push_back("/" + unique_name("k8s1"));
  env_["FAKECUDA_SHM_NAME"] = shm_names_.back();
  env_["FAKECUDA_DEVICE_COUNT"] = "1";
  start_broker();
  ASSERT_FALSE(tenant(name).is_null());
  auto quota =
      admin_.call({{"op", "update"},
                   {"tenant", {{"name", name}, {"devices", {{{"gpu", 1}, {"compute", 30}}}}}}});
  ASSERT_FALSE(quota);
  EXPECT_NE(quota.error().find("does not exist"), std::string::npos) << quota.error();

  pods().set_pod(
      pod_resources("ml", "survivor", "main", k8s::kResourceName, slice_ids(gpu1_, {3})));
  EXPECT_EQ(wait_for_pod(name, pod("ml", "survivor", "main")), pod("ml", "survivor", "main"))
      << plugin_->err();
  // Labels only: the quota is the one the tenant had.
  EXPECT_EQ(tenant(name)["devices"][0]["compute"], 25);  // 1 of 4 slices
  // Persisted: a restarted broker still knows the pod.
  kill_broker();
  start_broker();
  EXPECT_EQ(tenant(name)["pod"], pod("ml", "survivor", "main"));
}

// A pod deleted: the kubelet stops listing its container, and its tenant goes (three
// readings spanning two intervals, gone_tenants.h) once its processes have exited; the
// other pod's tenant stays. Before issue 29 the tenant stayed until its slices were
// allocated again.
TEST_F(PodIdentityPeriodicTest, ATenantWhosePodIsDeletedIsDeleted) {
  const std::string kept = allocate_for(gpu0_, {2, 3}, "web", "api", "server");
  const std::string removed = allocate_for(gpu0_, {0, 1}, "ml", "trainer-0", "main");
  ASSERT_TRUE(pre_start(slice_ids(gpu0_, {2, 3})).ok());
  ASSERT_TRUE(pre_start(slice_ids(gpu0_, {0, 1})).ok());
  ASSERT_EQ(wait_for_pod(removed, pod("ml", "trainer-0", "main")), pod("ml", "trainer-0", "main"));
  pods().remove_pod("ml", "trainer-0");
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::seconds(10);
  while (!tenant(removed).is_null() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(tenant(removed).is_null()) << plugin_->err();
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::seconds(2))
      << "not before two intervals";
  EXPECT_NE(plugin_->err().find("deleted tenant " + removed), std::string::npos);
  EXPECT_FALSE(tenant(kept).is_null());
  EXPECT_TRUE(plugin_->running());
}

// No PodResources API at all (the hostPath not mounted, or an old kubelet).
class NoPodResourcesTest : public PluginNodeTest {
 protected:
  NoPodResourcesTest() { pod_resources_args_ = {"--pod-resources-interval", "1"}; }
};

TEST_F(NoPodResourcesTest, PluginAndBrokerWorkOnAndOneLineSaysWhy) {
  const std::string clue = "PodResources socket " + pod_resources_socket() + " does not exist";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (count_lines_with(plugin_->err(), clue) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(count_lines_with(plugin_->err(), clue), 1u) << plugin_->err();

  v1beta1::AllocateResponse response;
  auto status = allocate(slice_ids(gpu0_, {1}), response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const json t = tenant(k8s::tenant_name_for(gpu0_, {1}));
  ASSERT_FALSE(t.is_null());
  EXPECT_FALSE(t.contains("pod"));
  // Passes every second and after the Allocate: still the one line.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  EXPECT_EQ(count_lines_with(plugin_->err(), clue), 1u) << plugin_->err();
  EXPECT_EQ(count_lines_with(plugin_->err(), "pod attribution:"), 1u) << plugin_->err();
  EXPECT_TRUE(plugin_->running());
  EXPECT_FALSE(tenant(k8s::tenant_name_for(gpu0_, {1})).is_null());
}

}  // namespace
}  // namespace fracgpu::testing
