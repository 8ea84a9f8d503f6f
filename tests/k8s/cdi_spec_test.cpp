// Unit tests of fracgpu's CDI specs (k8s/cdi/) and of the plugin's use of them
// (cdi_publisher.h): the spec is what CDI 0.4.0 defines and nothing else (runtimes' loaders
// refuse unknown fields), it carries exactly the container edits of the Allocate response,
// files are replaced atomically (a reader never sees a part), removed alone, and a bad
// directory, kind, name or mode is one clear sentence. Real files in a temporary directory.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "../broker/temp_dir.h"
#include "cdi/spec_dir.h"
#include "device_plugin/allocation_builder.h"
#include "device_plugin/cdi_publisher.h"

namespace fracgpu::k8s {
namespace {

using broker::testing::TempDir;

constexpr const char* kTenant = "s-3fa01c22-c";

cdi::ContainerEdits sample_edits(const std::string& tenant_dir = "/run/fracgpu/pods/s-1") {
  cdi::ContainerEdits edits;
  edits.env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-1"}, {"FRACGPU_SOCKET", "/run/fracgpu/broker.sock"}};
  edits.mounts = {
      {"/var/lib/fracgpu/lib/libfracgpu.so", "/usr/local/fracgpu/lib/libfracgpu.so", true},
      {tenant_dir, "/run/fracgpu", true}};
  return edits;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<std::string> keys(const nlohmann::json& object) {
  std::set<std::string> out;
  for (const auto& [key, value] : object.items()) out.insert(key);
  return out;
}

AllocationPlan sample_plan() {
  AllocationPlan plan;
  plan.tenant = kTenant;
  plan.gpu.uuid = "GPU-5d3f";
  plan.slices = {2, 3};
  plan.slices_per_gpu = 8;
  plan.class_label = "normal";
  return plan;
}

TEST(CdiSpec, IsACdi040SpecWithOnlyTheFieldsThatVersionDefines) {
  auto spec = cdi::device_spec(kCdiKind, kTenant, sample_edits());
  ASSERT_TRUE(spec) << spec.error();
  // Loaders fail on unknown fields and on a version lower than the fields need: the exact
  // key sets of spec 0.4.0 (mount "type" is what needs 0.4.0).
  EXPECT_EQ(keys(*spec), (std::set<std::string>{"cdiVersion", "kind", "devices"}));
  EXPECT_EQ((*spec)["cdiVersion"], "0.4.0");
  EXPECT_EQ((*spec)["kind"], "fracgpu.io/gpu-slice");
  ASSERT_EQ((*spec)["devices"].size(), 1u);
  const auto& device = (*spec)["devices"][0];
  EXPECT_EQ(keys(device), (std::set<std::string>{"name", "containerEdits"}));
  EXPECT_EQ(device["name"], kTenant);
  const auto& edits = device["containerEdits"];
  EXPECT_EQ(keys(edits), (std::set<std::string>{"env", "mounts"}));
  EXPECT_EQ(edits["env"], nlohmann::json({"NVIDIA_VISIBLE_DEVICES=GPU-1",
                                          "FRACGPU_SOCKET=/run/fracgpu/broker.sock"}));
  ASSERT_EQ(edits["mounts"].size(), 2u);
  for (const auto& m : edits["mounts"]) {
    EXPECT_EQ(keys(m), (std::set<std::string>{"hostPath", "containerPath", "type", "options"}));
    EXPECT_EQ(m["type"], "bind");
    EXPECT_EQ(m["options"], nlohmann::json({"rbind", "nosuid", "nodev", "ro"}));
  }
  EXPECT_EQ(edits["mounts"][1]["hostPath"], "/run/fracgpu/pods/s-1");
  EXPECT_EQ(edits["mounts"][1]["containerPath"], "/run/fracgpu");
  EXPECT_EQ(cdi::qualified_name(kCdiKind, kTenant), "fracgpu.io/gpu-slice=s-3fa01c22-c");
}

TEST(CdiSpec, NamesKindsAndEditsOutsideTheSpecAreRefusedClearly) {
  EXPECT_TRUE(cdi::validate_kind("fracgpu.io/gpu-slice"));
  EXPECT_EQ(cdi::validate_kind("fracgpu.io").error(),
            "the CDI kind \"fracgpu.io\" is not <vendor>/<class>");
  EXPECT_EQ(cdi::validate_kind("fracgpu.io/gpu.slice").error(),
            "the CDI class \"gpu.slice\" has a '.' (allowed: letters, digits and \"-_\")");
  EXPECT_FALSE(cdi::validate_kind("a/b/c"));
  EXPECT_TRUE(cdi::validate_device_name("h-3fa01c22-c0"));
  EXPECT_EQ(cdi::validate_device_name("3fa").error(),
            "the CDI device name \"3fa\" does not start with a letter");
  EXPECT_EQ(cdi::validate_device_name("s-1-").error(),
            "the CDI device name \"s-1-\" does not end with a letter or digit");
  EXPECT_FALSE(cdi::validate_device_name("s/1"));
  auto relative = sample_edits();
  relative.mounts[0].container_path = "usr/lib/x.so";
  EXPECT_EQ(cdi::device_spec(kCdiKind, kTenant, relative).error(),
            "the CDI mount's container path \"usr/lib/x.so\" is not an absolute path");
  auto bad_env = sample_edits();
  bad_env.env.emplace_back("A=B", "c");
  EXPECT_EQ(cdi::device_spec(kCdiKind, kTenant, bad_env).error(),
            "the CDI environment variable name \"A=B\" is not valid");
  EXPECT_FALSE(cdi::device_spec(kCdiKind, kTenant, cdi::ContainerEdits{}));
}

TEST(CdiSpec, FileNamesRoundTripAndOtherWritersFilesAreNotOurs) {
  EXPECT_EQ(cdi::spec_file_name(kCdiKind, kTenant), "fracgpu.io-gpu-slice_s-3fa01c22-c.json");
  EXPECT_EQ(cdi::device_of_file(kCdiKind, "fracgpu.io-gpu-slice_s-3fa01c22-c.json"), kTenant);
  for (const char* other : {"nvidia.com-gpu.json", "fracgpu.io-gpu-slice_.json",
                            ".fracgpu.io-gpu-slice_s-1.json.Ab12.tmp",
                            "fracgpu.io-gpu-slice_s-1.yaml", "fracgpu.io-gpu-slice_s-1.json~"})
    EXPECT_EQ(cdi::device_of_file(kCdiKind, other), "") << other;
}

// The response's mounts and envs and the spec's edits are one list (container_edits).
TEST(CdiSpec, TheSpecCarriesExactlyTheEditsOfTheAllocateResponse) {
  TempDir tmp;
  PluginConfig config;
  config.shim_host_path = "/var/lib/fracgpu/lib/libfracgpu.so";
  config.preload_host_path = "/var/lib/fracgpu/ld.so.preload";
  const AllocationPlan plan = sample_plan();
  const std::string tenant_dir = "/run/fracgpu/pods/" + plan.tenant;
  v1beta1::ContainerAllocateResponse response;
  fill_container_response(plan, tenant_dir, config, response);

  auto dir = cdi::SpecDir::open(tmp.path().string(), kCdiKind);
  ASSERT_TRUE(dir) << dir.error();
  ASSERT_TRUE(publish_cdi_device(*dir, CdiMode::both, plan, tenant_dir, config, &response));
  ASSERT_EQ(response.cdi_devices_size(), 1);
  EXPECT_EQ(response.cdi_devices(0).name(), "fracgpu.io/gpu-slice=" + plan.tenant);
  const auto spec = nlohmann::json::parse(read_file(dir->path_of(plan.tenant)));
  const auto& edits = spec["devices"][0]["containerEdits"];

  std::set<std::tuple<std::string, std::string, bool>> from_response, from_spec;
  for (const auto& m : response.mounts())
    from_response.insert({m.host_path(), m.container_path(), m.read_only()});
  for (const auto& m : edits["mounts"]) {
    const auto& options = m["options"];
    const bool ro = std::find(options.begin(), options.end(), "ro") != options.end();
    from_spec.insert({m["hostPath"], m["containerPath"], ro});
  }
  EXPECT_EQ(from_response.size(), 3u);
  EXPECT_EQ(from_spec, from_response);
  std::set<std::string> env_response, env_spec;
  for (const auto& [key, value] : response.envs()) env_response.insert(key + "=" + value);
  for (const auto& e : edits["env"]) env_spec.insert(e.get<std::string>());
  EXPECT_EQ(env_response.size(), 2u);
  EXPECT_EQ(env_spec, env_response);

  // `only`: the response carries no edits of its own, the spec the same ones.
  config.cdi_mode = CdiMode::only;
  v1beta1::ContainerAllocateResponse only;
  fill_container_response(plan, tenant_dir, config, only);
  EXPECT_EQ(only.mounts_size(), 0);
  EXPECT_EQ(only.envs_size(), 0);
  EXPECT_EQ(only.annotations().at("fracgpu.io/tenant"), plan.tenant);
}

TEST(CdiSpecDir, AWriteReplacesTheFileWholeWithMode0644AndLeavesNoTemporaryFile) {
  TempDir tmp;
  auto dir = cdi::SpecDir::open(tmp.path().string(), kCdiKind);
  ASSERT_TRUE(dir) << dir.error();
  auto small = sample_edits();
  auto large = sample_edits();
  for (int i = 0; i < 200; ++i)
    large.env.emplace_back("PAD" + std::to_string(i), std::string(40, 'x'));
  ASSERT_TRUE(dir->write(kTenant, small));
  struct stat st {};
  ASSERT_EQ(::stat(dir->path_of(kTenant).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  // A reader that opens the file while it is rewritten again and again, alternately short
  // and long: it must always read one whole spec (an in-place rewrite shows it empty or cut).
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, broken{0};
  std::thread reader([&] {
    while (!done) {
      const std::string text = read_file(dir->path_of(kTenant));
      const auto parsed = nlohmann::json::parse(text, nullptr, false);
      if (!parsed.is_object() || !parsed.contains("devices")) ++broken;
      ++reads;
    }
  });
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(dir->write(kTenant, i % 2 ? small : large));
  done = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(broken.load(), 0) << "of " << reads.load() << " reads";
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path()))
    names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"fracgpu.io-gpu-slice_s-3fa01c22-c.json"});
  ASSERT_EQ(::stat(dir->path_of(kTenant).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST(CdiSpecDir, RemovalTakesOnlyTheGoneDevicesFiles) {
  TempDir tmp;
  auto dir = cdi::SpecDir::open(tmp.path().string(), kCdiKind);
  ASSERT_TRUE(dir) << dir.error();
  ASSERT_TRUE(dir->write("s-1-1", sample_edits()));
  ASSERT_TRUE(dir->write("s-1-2", sample_edits()));
  ASSERT_TRUE(dir->write("h-1-4", sample_edits()));
  std::ofstream(tmp.path() / "nvidia.com-gpu.json") << "{}";  // another writer's
  ASSERT_TRUE(dir->remove("s-1-2"));
  EXPECT_FALSE(std::filesystem::exists(dir->path_of("s-1-2")));
  EXPECT_TRUE(dir->remove("s-1-2")) << "already gone is not an error";

  // The broker lists h-1-4 only; the listing began after both files were written.
  auto removed = dir->reconcile({"h-1-4", "s-9-9"}, cdi::wall_clock_ns() + 1);
  ASSERT_TRUE(removed) << removed.error();
  EXPECT_EQ(*removed, std::vector<std::string>{"s-1-1"});
  EXPECT_FALSE(std::filesystem::exists(dir->path_of("s-1-1")));
  EXPECT_TRUE(std::filesystem::exists(dir->path_of("h-1-4")));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "nvidia.com-gpu.json"));
  // A listing that began before the file was written does not remove it.
  ASSERT_TRUE(dir->write("s-1-1", sample_edits()));
  removed = dir->reconcile({}, cdi::wall_clock_ns() - 60'000'000'000);
  ASSERT_TRUE(removed);
  EXPECT_TRUE(removed->empty());
}

TEST(CdiSpecDir, StaleMeansAbsentFromAListingBegunAfterTheWrite) {
  const std::vector<cdi::SpecFile> files = {{"a", 100}, {"b", 200}, {"c", 300}, {"d", 100}};
  EXPECT_EQ(cdi::stale_devices(files, {"d"}, 250), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cdi::stale_devices(files, {}, 200), (std::vector<std::string>{"a", "d"}));
  EXPECT_TRUE(cdi::stale_devices(files, {"a", "b", "c", "d"}, 1000).empty());
  EXPECT_TRUE(cdi::stale_devices(files, {}, 100).empty());
}

TEST(CdiSpecDir, ABadDirectoryIsOneClearSentence) {
  TempDir tmp;
  const std::string file = (tmp.path() / "a-file").string();
  std::ofstream(file) << "x";
  EXPECT_EQ(cdi::SpecDir::open(file, kCdiKind).error(),
            "the CDI directory " + file + " is not a directory");
  auto under_file = cdi::SpecDir::open(file + "/cdi", kCdiKind);
  ASSERT_FALSE(under_file);
  EXPECT_EQ(under_file.error().rfind("cannot create the CDI directory " + file + "/cdi: ", 0), 0u)
      << under_file.error();
  EXPECT_EQ(cdi::SpecDir::open("var/run/cdi", kCdiKind).error(),
            "the CDI directory \"var/run/cdi\" is not an absolute path");
  EXPECT_FALSE(cdi::SpecDir::open(tmp.path().string(), "no-slash"));
  // Missing: made, with its parents.
  auto made = cdi::SpecDir::open((tmp.path() / "var/run/cdi").string(), kCdiKind);
  ASSERT_TRUE(made) << made.error();
  EXPECT_TRUE(std::filesystem::is_directory(tmp.path() / "var/run/cdi"));
  // A directory gone after opening: the write says which file it could not make.
  std::filesystem::remove_all(tmp.path() / "var");
  auto write = made->write(kTenant, sample_edits());
  ASSERT_FALSE(write);
  EXPECT_EQ(write.error().rfind("cannot create a file in the CDI directory " + made->dir(), 0), 0u)
      << write.error();
}

// A write that fails fails the Allocate only where the CDI device is the container's only
// way to its tenant.
TEST(CdiPublisher, AFailedWriteFailsOnlyTheOnlyMode) {
  TempDir tmp;
  auto dir = cdi::SpecDir::open((tmp.path() / "cdi").string(), kCdiKind);
  ASSERT_TRUE(dir) << dir.error();
  std::filesystem::remove_all(tmp.path() / "cdi");
  PluginConfig config;
  const AllocationPlan plan = sample_plan();
  v1beta1::ContainerAllocateResponse response;
  EXPECT_TRUE(
      publish_cdi_device(*dir, CdiMode::both, plan, "/run/x/" + plan.tenant, config, &response));
  EXPECT_EQ(response.cdi_devices_size(), 0) << "no name for a spec that is not there";
  auto only =
      publish_cdi_device(*dir, CdiMode::only, plan, "/run/x/" + plan.tenant, config, &response);
  ASSERT_FALSE(only);
  EXPECT_NE(only.error().find("cannot create a file in the CDI directory"), std::string::npos);
}

TEST(CdiPublisher, TheModeIsOffBothOrOnlyAndOffOpensNoDirectory) {
  EXPECT_EQ(*parse_cdi_mode("off"), CdiMode::off);
  EXPECT_EQ(*parse_cdi_mode("both"), CdiMode::both);
  EXPECT_EQ(*parse_cdi_mode("only"), CdiMode::only);
  EXPECT_EQ(parse_cdi_mode("yes").error(), "--cdi must be off, both or only, got \"yes\"");
  EXPECT_EQ(PluginConfig{}.cdi_mode, CdiMode::both);
  EXPECT_EQ(PluginConfig{}.cdi_dir, "/var/run/cdi");
  PluginConfig config;
  config.cdi_mode = CdiMode::off;
  config.cdi_dir = "relative";  // never looked at when off
  auto off = open_cdi_dir(config);
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->has_value());
  config.cdi_mode = CdiMode::both;
  EXPECT_EQ(open_cdi_dir(config).error(),
            "the CDI directory \"relative\" is not an absolute path (--cdi-dir; or --cdi off)");
}

}  // namespace
}  // namespace fracgpu::k8s
