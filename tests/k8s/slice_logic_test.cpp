// Unit tests of the device plugin's pure logic: slice IDs and tenant names, best-fit
// packing for GetPreferredAllocation, the config file, the slice classes (which indices
// each resource owns, its endpoint, its quota) and Allocate's quota arithmetic.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "device_plugin/allocation_builder.h"
#include "device_plugin/plugin_config.h"
#include "device_plugin/resource_class.h"
#include "device_plugin/slice_ids.h"
#include "device_plugin/slice_inventory.h"
#include "device_plugin/slice_packer.h"

namespace fracgpu::k8s {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::vector<std::string> ids(const std::string& uuid, std::initializer_list<int> indices) {
  std::vector<std::string> out;
  for (int i : indices) out.push_back(format_slice_id(uuid, i));
  return out;
}

// The one class of `config` advertised under `resource`.
ResourceClass class_named(const PluginConfig& config, const std::string& resource) {
  for (const auto& cls : resource_classes(config)) {
    if (cls.resource_name == resource) return cls;
  }
  ADD_FAILURE() << resource << " is not advertised";
  return {};
}

ResourceClass normal_class(int slices) {
  PluginConfig config;
  config.slices = slices;
  return class_named(config, kResourceName);
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(SliceIds, RoundTripAndRejectGarbage) {
  auto parsed = parse_slice_id("GPU-abc::7");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->gpu_uuid, "GPU-abc");
  EXPECT_EQ(parsed->index, 7);
  EXPECT_EQ(format_slice_id("GPU-abc", 7), "GPU-abc::7");
  for (const char* bad :
       {"GPU-abc", "::3", "GPU-abc::", "GPU-abc::x", "GPU-abc::-1", "GPU-abc::64", "GPU::1 "}) {
    EXPECT_FALSE(parse_slice_id(bad)) << bad;
  }
}

TEST(SliceIds, TenantNameIsDeterministicAndDecodable) {
  const std::string a = tenant_name_for("GPU-1", {3, 1});
  EXPECT_EQ(a, tenant_name_for("GPU-1", {1, 3}));
  EXPECT_NE(a, tenant_name_for("GPU-2", {1, 3}));
  EXPECT_NE(a, tenant_name_for("GPU-1", {1, 2}));
  auto decoded = parse_tenant_name(a);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->gpu_tag, gpu_tag("GPU-1"));
  EXPECT_EQ(decoded->mask, 0b1010u);
  // Valid broker tenant names: [a-z0-9][a-z0-9._-]{0,62}.
  const std::string all = tenant_name_for("GPU-1", [] {
    std::vector<int> v;
    for (int i = 0; i < 64; ++i) v.push_back(i);
    return v;
  }());
  EXPECT_LE(all.size(), 63u);
  for (char c : all)
    EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') << all;
  EXPECT_FALSE(parse_tenant_name("run-1234"));
  EXPECT_FALSE(parse_tenant_name("s-zz-1"));
}

TEST(SliceIds, EachClassHasItsOwnTenantPrefix) {
  const std::string normal = tenant_name_for("GPU-1", {3});
  const std::string high = tenant_name_for("GPU-1", {3}, kHighTenantPrefix);
  const std::string besteffort = tenant_name_for("GPU-1", {3}, kBestEffortTenantPrefix);
  EXPECT_EQ(normal.substr(0, 2), "s-");
  EXPECT_EQ(high.substr(0, 2), "h-");
  EXPECT_EQ(besteffort.substr(0, 2), "b-");
  EXPECT_NE(normal, high);
  EXPECT_NE(high, besteffort);
  for (const auto& name : {normal, high, besteffort}) {
    auto decoded = parse_tenant_name(name);
    ASSERT_TRUE(decoded) << name;
    EXPECT_EQ(decoded->prefix, name.substr(0, 2));
    EXPECT_EQ(decoded->mask, 0b1000u);
  }
  EXPECT_FALSE(parse_tenant_name("x-" + gpu_tag("GPU-1") + "-8"));
}

TEST(SlicePacker, BestFitPicksTheFullestGpuThatFits) {
  const auto a = ids("GPU-a", {0, 1, 2, 3});  // 4 free
  const auto b = ids("GPU-b", {5, 6});        // 2 free
  EXPECT_EQ(prefer_slices(concat(a, b), {}, 2), ids("GPU-b", {5, 6}));
  EXPECT_EQ(prefer_slices(concat(b, a), {}, 3), ids("GPU-a", {0, 1, 2}));
  EXPECT_EQ(prefer_slices(concat(a, b), {}, 1), ids("GPU-b", {5}));
}

TEST(SlicePacker, MustIncludePinsTheGpu) {
  const auto a = ids("GPU-a", {0, 1, 2, 3});
  const auto b = ids("GPU-b", {5, 6});
  auto chosen = prefer_slices(concat(a, b), ids("GPU-a", {2}), 2);
  EXPECT_EQ(chosen, (std::vector<std::string>{"GPU-a::2", "GPU-a::0"}));
}

TEST(SlicePacker, NoSingleGpuFitsStillAnswersTheRequestedCount) {
  const auto a = ids("GPU-a", {0, 1});
  const auto b = ids("GPU-b", {0, 1, 2});
  auto chosen = prefer_slices(concat(a, b), {}, 4);
  ASSERT_EQ(chosen.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(chosen.begin(), chosen.begin() + 3), b);  // most free first
}

class ConfigFile : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_ = ::testing::TempDir() + "/fracgpu-plugin-config-" + std::to_string(::getpid());
};

TEST_F(ConfigFile, KeyValueWithPerNodeOverride) {
  PluginConfig config;
  ASSERT_TRUE(load_config_file(write("# slices\nslices = 4\nslices.node-b=2\nfuture=1\n"), "node-a",
                               config));
  EXPECT_EQ(config.slices, 4);
  ASSERT_TRUE(load_config_file(write("slices.node-b=2\nslices=4\n"), "node-b", config));
  EXPECT_EQ(config.slices, 2);
}

TEST_F(ConfigFile, JsonWithPerNodeOverride) {
  PluginConfig config;
  ASSERT_TRUE(
      load_config_file(write(R"({"slices": 10, "nodes": {"n1": {"slices": 5}}})"), "n1", config));
  EXPECT_EQ(config.slices, 5);
  ASSERT_TRUE(
      load_config_file(write(R"({"slices": 10, "nodes": {"n1": {"slices": 5}}})"), "n2", config));
  EXPECT_EQ(config.slices, 10);
}

TEST_F(ConfigFile, BadInputIsOneSentenceNotACrash) {
  PluginConfig config;
  auto bad_number = load_config_file(write("slices=eight\n"), "", config);
  ASSERT_FALSE(bad_number);
  EXPECT_NE(bad_number.error().find("whole number"), std::string::npos) << bad_number.error();
  EXPECT_FALSE(load_config_file(write("slices\n"), "", config));
  EXPECT_FALSE(load_config_file(write(R"({"slices": "8"})"), "", config));
  EXPECT_FALSE(load_config_file(write("{not json"), "", config));
  EXPECT_FALSE(load_config_file("/nonexistent/fracgpu.conf", "", config));
  config.slices = 0;
  EXPECT_FALSE(validate(config));
  config.slices = 65;
  EXPECT_FALSE(validate(config));
  config.slices = 8;
  EXPECT_TRUE(validate(config));
}

TEST_F(ConfigFile, ClassSizesWithPerNodeOverrides) {
  PluginConfig config;
  ASSERT_TRUE(load_config_file(write("slices=8\nhigh-slices=2\nbesteffort-slices=4\nhigh-slices."
                                     "node-b=3\nbesteffort-slices.node-b=0\n"),
                               "node-a", config));
  EXPECT_EQ(config.slices, 8);
  EXPECT_EQ(config.high_slices, 2);
  EXPECT_EQ(config.besteffort_slices, 4);
  ASSERT_TRUE(load_config_file(write("slices=8\nhigh-slices=2\nbesteffort-slices=4\nhigh-slices."
                                     "node-b=3\nbesteffort-slices.node-b=0\n"),
                               "node-b", config));
  EXPECT_EQ(config.high_slices, 3);
  EXPECT_EQ(config.besteffort_slices, 0);
  PluginConfig json;
  ASSERT_TRUE(load_config_file(
      write(R"({"slices": 10, "high-slices": 1, "nodes": {"n1": {"besteffort-slices": 6}}})"), "n1",
      json));
  EXPECT_EQ(json.slices, 10);
  EXPECT_EQ(json.high_slices, 1);
  EXPECT_EQ(json.besteffort_slices, 6);
  auto garbage = load_config_file(write("besteffort-slices=some\n"), "", json);
  ASSERT_FALSE(garbage);
  EXPECT_NE(garbage.error().find("besteffort-slices must be a whole number"), std::string::npos)
      << garbage.error();
  EXPECT_FALSE(load_config_file(write(R"({"high-slices": 1.5})"), "", json));
}

TEST(ConfigValidation, ClassSizesMustFitTheGpu) {
  PluginConfig config;
  config.slices = 8;
  config.high_slices = 9;
  auto too_many = validate(config);
  ASSERT_FALSE(too_many);
  EXPECT_NE(too_many.error().find("high-slices must be between 0 and slices (8)"),
            std::string::npos)
      << too_many.error();
  config.high_slices = -1;
  EXPECT_FALSE(validate(config));
  config.high_slices = 8;  // every slice high: allowed, the normal resource is then not registered
  EXPECT_TRUE(validate(config));
  config.high_slices = 2;
  config.besteffort_slices = -1;
  EXPECT_FALSE(validate(config));
  config.besteffort_slices = 57;  // 8 + 57 > 64: the indices would not fit a tenant name's mask
  auto beyond = validate(config);
  ASSERT_FALSE(beyond);
  EXPECT_NE(beyond.error().find("besteffort-slices must be between 0 and 56"), std::string::npos)
      << beyond.error();
  config.besteffort_slices = 56;
  EXPECT_TRUE(validate(config));
}

TEST(ResourceClasses, HighIsCarvedOutOfNAndBestEffortIsExtra) {
  PluginConfig config;
  config.slices = 8;
  auto only_normal = resource_classes(config);
  ASSERT_EQ(only_normal.size(), 1u);  // defaults: one resource, exactly as before classes
  EXPECT_EQ(only_normal[0].resource_name, "fracgpu.io/gpu-slice");
  EXPECT_EQ(only_normal[0].endpoint_name, "fracgpu.sock");
  EXPECT_EQ(only_normal[0].first_index, 0);
  EXPECT_EQ(only_normal[0].count, 8);

  config.high_slices = 2;
  config.besteffort_slices = 4;
  auto classes = resource_classes(config);
  ASSERT_EQ(classes.size(), 3u);
  const auto& normal = classes[0];
  const auto& high = classes[1];
  const auto& besteffort = classes[2];
  EXPECT_EQ(normal.resource_name, "fracgpu.io/gpu-slice");
  EXPECT_EQ(high.resource_name, "fracgpu.io/gpu-slice-high");
  EXPECT_EQ(besteffort.resource_name, "fracgpu.io/gpu-slice-besteffort");
  EXPECT_EQ(high.endpoint_name, "fracgpu-high.sock");
  EXPECT_EQ(besteffort.endpoint_name, "fracgpu-besteffort.sock");
  EXPECT_EQ((std::pair{normal.first_index, normal.count}), (std::pair{0, 6}));
  EXPECT_EQ((std::pair{high.first_index, high.count}), (std::pair{6, 2}));
  EXPECT_EQ((std::pair{besteffort.first_index, besteffort.count}), (std::pair{8, 4}));
  EXPECT_EQ(normal.priority, "normal");
  EXPECT_EQ(high.priority, "high");
  EXPECT_EQ(besteffort.priority, "low");
  EXPECT_TRUE(high.guaranteed);
  EXPECT_FALSE(besteffort.guaranteed);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(normal.owns(i) + high.owns(i) + besteffort.owns(i), 1) << "index " << i;
  }

  config.high_slices = 8;  // all high: the normal resource has nothing and is not registered
  config.besteffort_slices = 0;
  auto all_high = resource_classes(config);
  ASSERT_EQ(all_high.size(), 1u);
  EXPECT_EQ(all_high[0].resource_name, "fracgpu.io/gpu-slice-high");
  EXPECT_EQ(class_endpoint("custom", SliceClass::high), "custom-high");
  EXPECT_EQ(class_endpoint("node.sock", SliceClass::besteffort), "node-besteffort.sock");
}

TEST(ResourceClasses, EachClassGetsItsQuota) {
  PluginConfig config;
  config.slices = 8;
  config.high_slices = 2;
  config.besteffort_slices = 12;
  const auto high = quota_for(class_named(config, kHighResourceName), 80 * kGiB, 1);
  EXPECT_EQ(high.memory_limit, 10 * kGiB);
  EXPECT_EQ(high.memory_request, 10 * kGiB);
  EXPECT_EQ(high.compute, 12);
  const auto besteffort = quota_for(class_named(config, kBestEffortResourceName), 80 * kGiB, 2);
  EXPECT_EQ(besteffort.memory_limit, 20 * kGiB);  // the same slice size as the other classes
  EXPECT_EQ(besteffort.memory_request, 0u);       // but nothing guaranteed
  EXPECT_EQ(besteffort.compute, 25);
  // More best-effort slices than N: capped at the whole GPU (the broker refuses more).
  const auto big = quota_for(class_named(config, kBestEffortResourceName), 80 * kGiB, 12);
  EXPECT_EQ(big.memory_limit, 80 * kGiB);
  EXPECT_EQ(big.compute, 100);
}

TEST(AllocationPlan, QuotaFollowsSlices) {
  SliceInventory inventory;
  inventory.apply(
      {{0, "GPU-a", "Fake", 80 * kGiB, 80 * kGiB}, {1, "GPU-b", "Fake", 16 * kGiB, 15 * kGiB}});
  const auto cls = normal_class(8);
  auto plan = plan_allocation(ids("GPU-a", {6, 1}), inventory, cls);
  ASSERT_TRUE(plan) << plan.error();
  EXPECT_EQ(plan->memory_limit, 20 * kGiB);
  EXPECT_EQ(plan->memory_request, 20 * kGiB);
  EXPECT_EQ(plan->compute, 25);
  EXPECT_EQ(plan->priority, "normal");
  EXPECT_EQ(plan->tenant, tenant_name_for("GPU-a", {1, 6}));
  EXPECT_EQ(plan->slices, (std::vector<int>{1, 6}));
  // The broker's capacity (total minus --reserve) is what is divided.
  auto small = plan_allocation(ids("GPU-b", {0, 1, 2, 3, 4, 5, 6, 7}), inventory, cls);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->memory_limit, 15 * kGiB);
  EXPECT_EQ(small->compute, 100);
}

TEST(AllocationPlan, EachClassMakesItsOwnTenantAndAcceptsOnlyItsOwnSlices) {
  SliceInventory inventory;
  inventory.apply({{0, "GPU-a", "Fake", 16 * kGiB, 16 * kGiB}});
  PluginConfig config;
  config.slices = 8;
  config.high_slices = 2;
  config.besteffort_slices = 4;
  const auto high = class_named(config, kHighResourceName);
  const auto besteffort = class_named(config, kBestEffortResourceName);
  auto h = plan_allocation({"GPU-a::7"}, inventory, high);
  ASSERT_TRUE(h) << h.error();
  EXPECT_EQ(h->tenant, tenant_name_for("GPU-a", {7}, kHighTenantPrefix));
  EXPECT_EQ(h->priority, "high");
  EXPECT_EQ(h->memory_request, 2 * kGiB);
  auto b = plan_allocation({"GPU-a::11", "GPU-a::8"}, inventory, besteffort);
  ASSERT_TRUE(b) << b.error();
  EXPECT_EQ(b->tenant, tenant_name_for("GPU-a", {8, 11}, kBestEffortTenantPrefix));
  EXPECT_EQ(b->priority, "low");
  EXPECT_EQ(b->memory_limit, 4 * kGiB);
  EXPECT_EQ(b->memory_request, 0u);
  EXPECT_EQ(tenant_definition(*b)["devices"][0]["memory_request"], 0);
  EXPECT_EQ(tenant_definition(*b)["devices"][0]["priority"], "low");
  auto wrong = plan_allocation({"GPU-a::5"}, inventory, high);  // a normal slice
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().find("is not a fracgpu.io/gpu-slice-high slice"), std::string::npos)
      << wrong.error();
  EXPECT_FALSE(plan_allocation({"GPU-a::12"}, inventory, besteffort));  // beyond N + best effort
  EXPECT_FALSE(plan_allocation({"GPU-a::6"}, inventory, class_named(config, kResourceName)));
}

TEST(AllocationPlan, RefusesSpanningUnknownAndUnhealthy) {
  SliceInventory inventory;
  inventory.apply(
      {{0, "GPU-a", "Fake", 16 * kGiB, 16 * kGiB}, {1, "GPU-b", "Fake", 16 * kGiB, 16 * kGiB}});
  const auto cls = normal_class(4);
  auto spanning = plan_allocation({"GPU-a::0", "GPU-b::0"}, inventory, cls);
  ASSERT_FALSE(spanning);
  EXPECT_NE(spanning.error().find("different GPUs"), std::string::npos) << spanning.error();
  EXPECT_FALSE(plan_allocation({"GPU-zz::0"}, inventory, cls));
  EXPECT_FALSE(plan_allocation({"GPU-a::4"}, inventory, cls));  // beyond N
  EXPECT_FALSE(plan_allocation({"junk"}, inventory, cls));
  EXPECT_FALSE(plan_allocation({}, inventory, cls));
  inventory.apply({{0, "GPU-a", "Fake", 16 * kGiB, 16 * kGiB}});  // GPU-b gone
  auto unhealthy = plan_allocation({"GPU-b::0"}, inventory, cls);
  ASSERT_FALSE(unhealthy);
  EXPECT_NE(unhealthy.error().find("unhealthy"), std::string::npos);
}

TEST(SliceInventory, MissingGpuTurnsUnhealthyAndBumpsTheGeneration) {
  SliceInventory inventory;
  EXPECT_TRUE(inventory.apply({{0, "GPU-a", "", 1, 1}, {1, "GPU-b", "", 1, 1}}));
  const auto before = inventory.generation();
  EXPECT_FALSE(inventory.apply({{0, "GPU-a", "", 1, 1}, {1, "GPU-b", "", 1, 1}}));
  EXPECT_TRUE(inventory.apply({{0, "GPU-a", "", 1, 1}}));
  EXPECT_GT(inventory.generation(), before);
  auto slices = inventory.slices(normal_class(2));
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_TRUE(slices[0].healthy);
  EXPECT_FALSE(slices[2].healthy);
  EXPECT_EQ(slices[3].id, "GPU-b::1");
}

// The container's run directory is the one the broker reports for the tenant (mounted
// read-only), checked before it goes into a mount: absolute, no "." or "..", ending in
// the tenant's name.
TEST(TenantDirFromReply, TakesTheBrokersDirectoryAndRefusesOddOnes) {
  const std::string name = "fgpu-abc-s3";
  auto reply = [&](const std::string& dir) {
    return nlohmann::json{{"ok", true}, {"tenant", {{"name", name}, {"run_dir", dir}}}};
  };
  auto ok = tenant_dir_from_reply(reply("/run/fracgpu/pods/" + name), name);
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(*ok, "/run/fracgpu/pods/" + name);
  auto bare = tenant_dir_from_reply(reply("/run/fracgpu/pods/" + name)["tenant"], name);
  EXPECT_TRUE(bare.ok()) << bare.error();
  for (const std::string& bad :
       {std::string("run/fracgpu/pods/") + name, "/run/fracgpu/pods/" + name + "/..",
        "/run/fracgpu/pods/../../etc/" + name, std::string("/run/fracgpu/pods/other"),
        "/run/./fracgpu/pods/" + name, std::string("")}) {
    auto r = tenant_dir_from_reply(reply(bad), name);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_FALSE(tenant_dir_from_reply({{"ok", true}, {"tenant", {{"name", name}}}}, name).ok());
  EXPECT_FALSE(tenant_dir_from_reply({{"ok", true}, {"tenant", {{"run_dir", 7}}}}, name).ok());
  EXPECT_FALSE(tenant_dir_from_reply(nlohmann::json::array(), name).ok());
}

}  // namespace
}  // namespace fracgpu::k8s
