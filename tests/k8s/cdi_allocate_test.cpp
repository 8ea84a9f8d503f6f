// What Allocate returns in each CDI mode (--cdi off | both | only), with the real
// fracgpu-device-plugin and broker over the simulated GPU and the fake kubelet: the
// response's mounts, envs and CDI device names, the spec file the plugin wrote in its CDI
// directory (the same edits as the response's), the spec written again at the container's
// start, removed once its tenant is gone, and a bad mode or directory refused at start
// with one sentence. A runtime applying the spec is tests/runtime/cdi_podman_test.sh.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "plugin_fixture.h"

namespace fracgpu::testing {
namespace {

std::string spec_path(const std::string& dir, const std::string& tenant) {
  return dir + "/fracgpu.io-gpu-slice_" + tenant + ".json";
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    out.insert(entry.path().filename().string());
  return out;
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// The response's mounts as {host, container, read-only} and envs as "K=V".
std::set<std::tuple<std::string, std::string, bool>> response_mounts(
    const v1beta1::ContainerAllocateResponse& c) {
  std::set<std::tuple<std::string, std::string, bool>> out;
  for (const auto& m : c.mounts()) out.insert({m.host_path(), m.container_path(), m.read_only()});
  return out;
}
std::set<std::string> response_envs(const v1beta1::ContainerAllocateResponse& c) {
  std::set<std::string> out;
  for (const auto& [key, value] : c.envs()) out.insert(key + "=" + value);
  return out;
}
std::set<std::tuple<std::string, std::string, bool>> spec_mounts(const nlohmann::json& spec) {
  std::set<std::tuple<std::string, std::string, bool>> out;
  for (const auto& m : spec["devices"][0]["containerEdits"]["mounts"]) {
    const auto& o = m["options"];
    out.insert({m["hostPath"], m["containerPath"], std::find(o.begin(), o.end(), "ro") != o.end()});
  }
  return out;
}
std::set<std::string> spec_envs(const nlohmann::json& spec) {
  std::set<std::string> out;
  for (const auto& e : spec["devices"][0]["containerEdits"]["env"]) out.insert(e);
  return out;
}

class CdiBothTest : public PluginNodeTest {};  // the default mode: no --cdi flag

class CdiOffTest : public PluginNodeTest {
 public:
  CdiOffTest() { cdi_args_ = {"--cdi", "off"}; }
};

class CdiOnlyTest : public PluginNodeTest {
 public:
  CdiOnlyTest() { cdi_args_ = {"--cdi", "only"}; }
};

TEST_F(CdiBothTest, AllocateReturnsTheEditsAndTheCdiNameOfASpecWithTheSameEdits) {
  v1beta1::AllocateResponse response;
  auto status = allocate(slice_ids(gpu1_, {3, 1}), response);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->err();
  const auto& c = response.container_responses(0);
  const std::string tenant = k8s::tenant_name_for(gpu1_, {1, 3});
  ASSERT_EQ(c.cdi_devices_size(), 1);
  EXPECT_EQ(c.cdi_devices(0).name(), "fracgpu.io/gpu-slice=" + tenant);
  EXPECT_EQ(c.mounts_size(), 3);
  EXPECT_EQ(c.envs_size(), 2);

  const std::string path = spec_path(cdi_dir(), tenant);
  EXPECT_EQ(files_in(cdi_dir()), std::set<std::string>{std::filesystem::path(path).filename()});
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  const auto spec = read_json(path);
  ASSERT_TRUE(spec.is_object());
  EXPECT_EQ(spec["cdiVersion"], "0.4.0");
  EXPECT_EQ(spec["kind"], "fracgpu.io/gpu-slice");
  EXPECT_EQ(spec["devices"][0]["name"], tenant);
  EXPECT_EQ(spec_mounts(spec), response_mounts(c));
  EXPECT_EQ(spec_envs(spec), response_envs(c));
}

TEST_F(CdiOffTest, AllocateReturnsTheEditsOnlyAndWritesNoSpec) {
  v1beta1::AllocateResponse response;
  auto status = allocate(slice_ids(gpu0_, {0}), response);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->err();
  const auto& c = response.container_responses(0);
  EXPECT_EQ(c.cdi_devices_size(), 0);
  EXPECT_EQ(c.mounts_size(), 3);
  EXPECT_EQ(c.envs_size(), 2);
  EXPECT_TRUE(files_in(cdi_dir()).empty()) << "off writes nothing, and makes no directory";
  EXPECT_FALSE(std::filesystem::exists(cdi_dir()));
}

TEST_F(CdiOnlyTest, AllocateReturnsTheCdiNameAloneAndTheSpecHoldsTheEdits) {
  v1beta1::AllocateResponse response;
  auto status = allocate(slice_ids(gpu0_, {0, 1}), response);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->err();
  const auto& c = response.container_responses(0);
  const std::string tenant = k8s::tenant_name_for(gpu0_, {0, 1});
  EXPECT_EQ(c.mounts_size(), 0);
  EXPECT_EQ(c.envs_size(), 0);
  EXPECT_EQ(c.annotations().at("fracgpu.io/tenant"), tenant);
  ASSERT_EQ(c.cdi_devices_size(), 1);
  EXPECT_EQ(c.cdi_devices(0).name(), "fracgpu.io/gpu-slice=" + tenant);
  const auto spec = read_json(spec_path(cdi_dir(), tenant));
  ASSERT_TRUE(spec.is_object());
  EXPECT_EQ(spec_mounts(spec), (std::set<std::tuple<std::string, std::string, bool>>{
                                   {shim_host_path_, "/usr/local/fracgpu/lib/libfracgpu.so", true},
                                   {preload_host_path_, "/etc/ld.so.preload", true},
                                   {run_dir() + "/pods/" + tenant, "/run/fracgpu", true}}));
  EXPECT_EQ(spec_envs(spec), (std::set<std::string>{"NVIDIA_VISIBLE_DEVICES=" + gpu0_,
                                                    "FRACGPU_SOCKET=/run/fracgpu/broker.sock"}));
}

// The kubelet calls PreStartContainer right before the runtime resolves the name.
TEST_F(CdiBothTest, TheContainersStartWritesItsSpecAgain) {
  v1beta1::AllocateResponse response;
  const auto ids = slice_ids(gpu0_, {2});
  ASSERT_TRUE(allocate(ids, response).ok()) << plugin_->err();
  const std::string path = spec_path(cdi_dir(), k8s::tenant_name_for(gpu0_, {2}));
  ASSERT_TRUE(std::filesystem::remove(path));
  auto started = pre_start(ids);
  ASSERT_TRUE(started.ok()) << started.error_message();
  EXPECT_TRUE(read_json(path).is_object()) << "no spec after PreStartContainer";
}

// The plugin's health interval here is 200 ms: the spec goes within a few of them.
TEST_F(CdiBothTest, ATenantsSpecIsRemovedOnceTheTenantIsGone) {
  v1beta1::AllocateResponse a, b;
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {0}), a).ok()) << plugin_->err();
  ASSERT_TRUE(allocate(slice_ids(gpu1_, {0}), b).ok()) << plugin_->err();
  const std::string gone = k8s::tenant_name_for(gpu0_, {0});
  const std::string kept = k8s::tenant_name_for(gpu1_, {0});
  std::ofstream(cdi_dir() + "/vendor.example-other.json") << "{}";  // not ours: left alone
  ASSERT_TRUE(admin_.call({{"op", "delete"}, {"name", gone}}));
  EXPECT_TRUE(eventually([&] { return !std::filesystem::exists(spec_path(cdi_dir(), gone)); },
                         std::chrono::seconds(5)))
      << plugin_->err();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // three more passes
  EXPECT_TRUE(std::filesystem::exists(spec_path(cdi_dir(), kept)));
  EXPECT_TRUE(std::filesystem::exists(cdi_dir() + "/vendor.example-other.json"));
  EXPECT_NE(plugin_->err().find("removed the CDI spec of tenant " + gone), std::string::npos);
}

// A plugin restarted after its tenant was deleted removes the spec before serving.
TEST_F(CdiBothTest, ARestartedPluginRemovesSpecsOfTenantsDeletedWhileItWasDown) {
  v1beta1::AllocateResponse response;
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {1}), response).ok()) << plugin_->err();
  const std::string tenant = k8s::tenant_name_for(gpu0_, {1});
  stop_plugin();
  ASSERT_TRUE(admin_.call({{"op", "delete"}, {"name", tenant}}));
  ASSERT_TRUE(std::filesystem::exists(spec_path(cdi_dir(), tenant)));
  start_plugin();  // returns once registered: the first sync comes before serving
  EXPECT_FALSE(std::filesystem::exists(spec_path(cdi_dir(), tenant))) << plugin_->err();
}

TEST_F(CdiBothTest, ABadModeOrDirectoryStopsThePluginWithOneSentence) {
  const std::vector<std::string> base = {FRACGPU_DEVICE_PLUGIN, "--plugin-dir",
                                         dir_.path() + "/other-plugins", "--broker-run-dir",
                                         run_dir()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, env_, std::chrono::seconds(20));
  };
  auto bad_mode = with({"--cdi", "yes"});
  EXPECT_EQ(bad_mode.exit_code, 2);
  EXPECT_NE(bad_mode.err.find("--cdi must be off, both or only, got \"yes\""), std::string::npos)
      << bad_mode.err;
  const std::string file = dir_.path() + "/not-a-dir";
  std::ofstream(file) << "x";
  auto bad_dir = with({"--cdi-dir", file});
  EXPECT_EQ(bad_dir.exit_code, 2);
  EXPECT_NE(bad_dir.err.find("the CDI directory " + file +
                             " is not a directory (--cdi-dir; or --cdi off)"),
            std::string::npos)
      << bad_dir.err;
}

}  // namespace
}  // namespace fracgpu::testing
