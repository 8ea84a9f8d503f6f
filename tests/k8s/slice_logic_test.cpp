// Unit tests of the device plugin's pure logic: slice IDs and tenant names, best-fit
// packing for GetPreferredAllocation, the config file, and Allocate's quota arithmetic.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "device_plugin/allocation_builder.h"
#include "device_plugin/plugin_config.h"
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
  for (const char* bad : {"GPU-abc", "::3", "GPU-abc::", "GPU-abc::x", "GPU-abc::-1", "GPU-abc::64", "GPU::1 "}) {
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
  for (char c : all) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') << all;
  EXPECT_FALSE(parse_tenant_name("run-1234"));
  EXPECT_FALSE(parse_tenant_name("s-zz-1"));
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
  ASSERT_TRUE(load_config_file(write("# slices\nslices = 4\nslices.node-b=2\nfuture=1\n"), "node-a", config));
  EXPECT_EQ(config.slices, 4);
  ASSERT_TRUE(load_config_file(write("slices.node-b=2\nslices=4\n"), "node-b", config));
  EXPECT_EQ(config.slices, 2);
}

TEST_F(ConfigFile, JsonWithPerNodeOverride) {
  PluginConfig config;
  ASSERT_TRUE(load_config_file(write(R"({"slices": 10, "nodes": {"n1": {"slices": 5}}})"), "n1", config));
  EXPECT_EQ(config.slices, 5);
  ASSERT_TRUE(load_config_file(write(R"({"slices": 10, "nodes": {"n1": {"slices": 5}}})"), "n2", config));
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

TEST(AllocationPlan, QuotaFollowsSlices) {
  SliceInventory inventory(8);
  inventory.apply({{0, "GPU-a", "Fake", 80 * kGiB, 80 * kGiB}, {1, "GPU-b", "Fake", 16 * kGiB, 15 * kGiB}});
  auto plan = plan_allocation(ids("GPU-a", {6, 1}), inventory);
  ASSERT_TRUE(plan) << plan.error();
  EXPECT_EQ(plan->memory_limit, 20 * kGiB);
  EXPECT_EQ(plan->compute, 25);
  EXPECT_EQ(plan->tenant, tenant_name_for("GPU-a", {1, 6}));
  EXPECT_EQ(plan->slices, (std::vector<int>{1, 6}));
  // The broker's capacity (total minus --reserve) is what is divided.
  auto small = plan_allocation(ids("GPU-b", {0, 1, 2, 3, 4, 5, 6, 7}), inventory);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->memory_limit, 15 * kGiB);
  EXPECT_EQ(small->compute, 100);
}

TEST(AllocationPlan, RefusesSpanningUnknownAndUnhealthy) {
  SliceInventory inventory(4);
  inventory.apply({{0, "GPU-a", "Fake", 16 * kGiB, 16 * kGiB}, {1, "GPU-b", "Fake", 16 * kGiB, 16 * kGiB}});
  auto spanning = plan_allocation({"GPU-a::0", "GPU-b::0"}, inventory);
  ASSERT_FALSE(spanning);
  EXPECT_NE(spanning.error().find("different GPUs"), std::string::npos) << spanning.error();
  EXPECT_FALSE(plan_allocation({"GPU-zz::0"}, inventory));
  EXPECT_FALSE(plan_allocation({"GPU-a::4"}, inventory));  // beyond N
  EXPECT_FALSE(plan_allocation({"junk"}, inventory));
  EXPECT_FALSE(plan_allocation({}, inventory));
  inventory.apply({{0, "GPU-a", "Fake", 16 * kGiB, 16 * kGiB}});  // GPU-b gone
  auto unhealthy = plan_allocation({"GPU-b::0"}, inventory);
  ASSERT_FALSE(unhealthy);
  EXPECT_NE(unhealthy.error().find("unhealthy"), std::string::npos);
}

TEST(SliceInventory, MissingGpuTurnsUnhealthyAndBumpsTheGeneration) {
  SliceInventory inventory(2);
  EXPECT_TRUE(inventory.apply({{0, "GPU-a", "", 1, 1}, {1, "GPU-b", "", 1, 1}}));
  const auto before = inventory.generation();
  EXPECT_FALSE(inventory.apply({{0, "GPU-a", "", 1, 1}, {1, "GPU-b", "", 1, 1}}));
  EXPECT_TRUE(inventory.apply({{0, "GPU-a", "", 1, 1}}));
  EXPECT_GT(inventory.generation(), before);
  auto slices = inventory.slices();
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_TRUE(slices[0].healthy);
  EXPECT_FALSE(slices[2].healthy);
  EXPECT_EQ(slices[3].id, "GPU-b::1");
}

}  // namespace
}  // namespace fracgpu::k8s
