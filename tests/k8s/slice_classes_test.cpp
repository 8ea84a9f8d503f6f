// The slice classes against the fake kubelet: the real plugin started with
// `--slices 8 --high-slices 2 --besteffort-slices 4` over the real broker on two
// simulated 16 GiB GPUs (plugin_fixture.h). It must register three resources, each on its
// own endpoint; split each GPU's IDs between them without overlap; give a high slice's
// container a guaranteed high-priority tenant and a best-effort slice's container a low
// one with no guarantee, which then gets only memory no one else is guaranteed; register
// all three again after a kubelet restart; and refuse bad class settings at start.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "plugin_fixture.h"

namespace fracgpu::testing {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kContext = 64ull << 20;  // the simulated context footprint
const std::string kNormal = "fracgpu.io/gpu-slice";
const std::string kHigh = "fracgpu.io/gpu-slice-high";
const std::string kBestEffort = "fracgpu.io/gpu-slice-besteffort";

class SliceClassTest : public PluginNodeTest {
 protected:
  SliceClassTest() {
    slices_ = 8;
    extra_args_ = {"--high-slices", "2", "--besteffort-slices", "4"};
    registrations_per_start_ = 3;
  }

  std::set<std::string> listed_ids(const std::string& resource) {
    std::set<std::string> ids;
    const auto list = first_list(&stub(resource));  // kept: devices() is a view into it
    for (const auto& device : list.devices()) {
      EXPECT_EQ(device.health(), "Healthy") << device.id();
      ids.insert(device.id());
    }
    return ids;
  }

  std::set<std::string> expected_ids(int first, int count) {
    std::set<std::string> ids;
    for (const auto& gpu : {gpu0_, gpu1_}) {
      for (int k = first; k < first + count; ++k) ids.insert(k8s::format_slice_id(gpu, k));
    }
    return ids;
  }

  // The one device entry of tenant `name` in the broker.
  nlohmann::json device_of(const std::string& name) {
    auto t = tenant(name);
    if (t.is_null() || t["devices"].size() != 1) {
      ADD_FAILURE() << "tenant " << name << " missing or not on one GPU: " << t.dump();
      return nlohmann::json::object();
    }
    return t["devices"][0];
  }
};

TEST_F(SliceClassTest, RegistersOneResourcePerClassEachWithItsOwnEndpoint) {
  auto registrations = kubelet_->registration().wait_for(3, std::chrono::seconds(1));
  ASSERT_EQ(registrations.size(), 3u);
  std::map<std::string, std::string> endpoints;
  for (const auto& r : registrations) {
    EXPECT_EQ(r.version(), "v1beta1");
    EXPECT_TRUE(r.options().get_preferred_allocation_available());
    endpoints[r.resource_name()] = r.endpoint();
    struct stat st {};
    ASSERT_EQ(stat((plugin_dir() + "/" + r.endpoint()).c_str(), &st), 0) << r.endpoint();
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
  }
  EXPECT_EQ(endpoints,
            (std::map<std::string, std::string>{{kNormal, "fracgpu.sock"},
                                                {kHigh, "fracgpu-high.sock"},
                                                {kBestEffort, "fracgpu-besteffort.sock"}}));
  for (const auto& resource : {kNormal, kHigh, kBestEffort}) {
    grpc::ClientContext context;
    v1beta1::DevicePluginOptions options;
    ASSERT_TRUE(stub(resource).GetDevicePluginOptions(&context, v1beta1::Empty(), &options).ok())
        << resource;
  }
}

TEST_F(SliceClassTest, ListAndWatchSplitsEachGpuBetweenTheClassesWithoutOverlap) {
  const auto normal = listed_ids(kNormal);
  const auto high = listed_ids(kHigh);
  const auto besteffort = listed_ids(kBestEffort);
  EXPECT_EQ(normal, expected_ids(0, 6));      // 6 of each GPU's 8 slices
  EXPECT_EQ(high, expected_ids(6, 2));        // the other 2: carved out, not added
  EXPECT_EQ(besteffort, expected_ids(8, 4));  // 4 extra per GPU
  std::set<std::string> all(normal);
  all.insert(high.begin(), high.end());
  all.insert(besteffort.begin(), besteffort.end());
  EXPECT_EQ(all.size(), normal.size() + high.size() + besteffort.size());
}

TEST_F(SliceClassTest, AHighSliceMakesAGuaranteedHighPriorityTenant) {
  v1beta1::AllocateResponse response;
  auto status = allocate(slice_ids(gpu1_, {7}), response, &stub(kHigh));
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->err();
  const std::string name = k8s::tenant_name_for(gpu1_, {7}, k8s::kHighTenantPrefix);
  EXPECT_EQ(name.substr(0, 2), "h-");
  const auto& container = response.container_responses(0);
  EXPECT_EQ(container.annotations().at("fracgpu.io/tenant"), name);
  EXPECT_EQ(container.annotations().at("fracgpu.io/slice-class"), "high");
  EXPECT_EQ(container.envs().at("NVIDIA_VISIBLE_DEVICES"), gpu1_);
  const auto d = device_of(name);
  EXPECT_EQ(d["gpu"], 1);
  EXPECT_EQ(d["priority"], "high");
  EXPECT_EQ(d["memory_limit"].get<uint64_t>(), 2 * kGiB);  // 1 of 8 slices of 16 GiB
  EXPECT_EQ(d["memory_request"].get<uint64_t>(), 2 * kGiB);
  EXPECT_EQ(d["compute"], 12);       // a weight (100·1/8)...
  EXPECT_EQ(d["compute_limit"], 0);  // ...never a ceiling, which the broker refuses for high

  // Each endpoint accepts only its own class's IDs.
  v1beta1::AllocateResponse wrong;
  auto normal_id_on_high = allocate(slice_ids(gpu1_, {0}), wrong, &stub(kHigh));
  EXPECT_EQ(normal_id_on_high.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(normal_id_on_high.error_message().find("is not a fracgpu.io/gpu-slice-high slice"),
            std::string::npos)
      << normal_id_on_high.error_message();
  auto high_id_on_normal = allocate(slice_ids(gpu1_, {6}), wrong);
  EXPECT_EQ(high_id_on_normal.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << high_id_on_normal.error_message();

  // The cross-GPU refusal holds per resource, naming it.
  auto spanning = allocate({k8s::format_slice_id(gpu0_, 6), k8s::format_slice_id(gpu1_, 6)}, wrong,
                           &stub(kHigh));
  EXPECT_EQ(spanning.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(
      spanning.error_message().find("request at most 2 fracgpu.io/gpu-slice-high per container"),
      std::string::npos)
      << spanning.error_message();

  // A restarted container gets the same IDs again: the same tenant, not a second one.
  v1beta1::AllocateResponse again;
  ASSERT_TRUE(allocate(slice_ids(gpu1_, {7}), again, &stub(kHigh)).ok());
  EXPECT_EQ(again.container_responses(0).annotations().at("fracgpu.io/tenant"), name);
  EXPECT_EQ(admin_.tenant_names()->size(), 1u);
}

TEST_F(SliceClassTest, ABestEffortSliceMakesALowPriorityTenantWithNoGuarantee) {
  v1beta1::AllocateResponse response;
  auto status = allocate(slice_ids(gpu0_, {9, 8}), response, &stub(kBestEffort));
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << plugin_->err();
  const std::string name = k8s::tenant_name_for(gpu0_, {8, 9}, k8s::kBestEffortTenantPrefix);
  EXPECT_EQ(name.substr(0, 2), "b-");
  EXPECT_EQ(response.container_responses(0).annotations().at("fracgpu.io/slice-class"),
            "besteffort");
  const auto d = device_of(name);
  EXPECT_EQ(d["gpu"], 0);
  EXPECT_EQ(d["priority"], "low");
  EXPECT_EQ(d["memory_limit"].get<uint64_t>(),
            4 * kGiB);  // 2 slices of capacity/8, as for any class
  EXPECT_EQ(d["memory_request"].get<uint64_t>(), 0u);
  EXPECT_EQ(d["compute"], 25);

  // Having no guarantee, it never stands in the way of one: all 8 guaranteed slices of
  // GPU 0 (normal and high) are still admitted next to it.
  v1beta1::AllocateResponse normal, high;
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {0, 1, 2, 3, 4, 5}), normal).ok());
  auto high_status = allocate(slice_ids(gpu0_, {6, 7}), high, &stub(kHigh));
  EXPECT_TRUE(high_status.ok()) << high_status.error_message();
}

// The broker's overcommit: 14 GiB of GPU 0's 16 are guaranteed to a normal and a high
// tenant (neither has to use it), so a best-effort tenant with a 4 GiB cap gets the 2 GiB
// no one is guaranteed and is refused beyond it.
TEST_F(SliceClassTest, ABestEffortTenantGetsOnlyMemoryNoOneIsGuaranteed) {
  v1beta1::AllocateResponse normal, high, besteffort;
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {0, 1, 2, 3, 4, 5}), normal).ok());  // 12 GiB guaranteed
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {6}), high, &stub(kHigh)).ok());     // 2 GiB guaranteed
  ASSERT_TRUE(allocate(slice_ids(gpu0_, {8, 9}), besteffort, &stub(kBestEffort)).ok());
  ProcessResult r;
  auto result =
      run_in_allocation(besteffort.container_responses(0),
                        {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(64ull << 20)}, r);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_TRUE(result.is_object()) << r.out;
  EXPECT_EQ(result["info_total"].get<uint64_t>(), 4 * kGiB);  // it sees its cap...
  EXPECT_EQ(result["refused_with"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(result["allocated"].get<uint64_t>(),
            2 * kGiB - kContext);  // ...but gets only the unguaranteed 2 GiB
  // The guarantees are intact: both tenants are still admitted at their full request.
  EXPECT_EQ(
      device_of(k8s::tenant_name_for(gpu0_, {0, 1, 2, 3, 4, 5}))["memory_request"].get<uint64_t>(),
      12 * kGiB);
  EXPECT_EQ(device_of(k8s::tenant_name_for(gpu0_, {6}, k8s::kHighTenantPrefix))["memory_request"]
                .get<uint64_t>(),
            2 * kGiB);
}

TEST_F(SliceClassTest, AKubeletRestartRegistersEveryResourceAgain) {
  kubelet_->restart();  // removes all three sockets and recreates kubelet.sock
  auto registrations = kubelet_->registration().wait_for(6, std::chrono::seconds(10));
  ASSERT_EQ(registrations.size(), 6u) << plugin_->err();
  std::set<std::string> again;
  for (std::size_t i = 3; i < registrations.size(); ++i) {
    again.insert(registrations[i].resource_name());
    auto fresh = kubelet_->dial(registrations[i].endpoint());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto stream = fresh->ListAndWatch(&context, v1beta1::Empty());
    v1beta1::ListAndWatchResponse list;
    ASSERT_TRUE(stream->Read(&list)) << registrations[i].resource_name();
    const int per_gpu = registrations[i].resource_name() == kNormal ? 6
                        : registrations[i].resource_name() == kHigh ? 2
                                                                    : 4;
    EXPECT_EQ(list.devices_size(), 2 * per_gpu) << registrations[i].resource_name();
    context.TryCancel();
  }
  EXPECT_EQ(again, (std::set<std::string>{kNormal, kHigh, kBestEffort}));
}

TEST_F(SliceClassTest, ClassSizesComeFromTheConfigFileWithPerNodeEntries) {
  stop_plugin();
  std::ofstream(dir_.path() + "/plugin.conf") << "slices=8\nhigh-slices=1\nbesteffort-slices=3\n"
                                                 "besteffort-slices.gpu-node-7=2\n";
  start_plugin({"--config", dir_.path() + "/plugin.conf"}, {{"NODE_NAME", "gpu-node-7"}});
  EXPECT_EQ(listed_ids(kNormal), expected_ids(0, 7));
  EXPECT_EQ(listed_ids(kHigh), expected_ids(7, 1));
  EXPECT_EQ(listed_ids(kBestEffort), expected_ids(8, 2));
}

// Bad class settings stop the plugin at start with one clear line and exit status 2,
// before it touches the kubelet's directory.
TEST(SliceClassFlags, BadClassSettingsAreRefusedClearly) {
  TempDir dir{"k8s-class-flags"};
  const std::string d = dir.path();
  std::ofstream(d + "/garbage.conf") << "high-slices=two\n";
  std::ofstream(d + "/too-many.conf") << "slices=4\nhigh-slices=5\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--slices", "8", "--high-slices", "9"}, "high-slices must be between 0 and slices (8)"},
      {{"--slices", "8", "--high-slices", "-1"}, "high-slices must be between 0 and slices (8)"},
      {{"--config", d + "/too-many.conf"}, "high-slices must be between 0 and slices (4)"},
      {{"--config", d + "/garbage.conf"}, "high-slices must be a whole number, got \"two\""},
      {{"--slices", "8", "--besteffort-slices", "-2"},
       "besteffort-slices must be between 0 and 56"},
      {{"--slices", "8", "--besteffort-slices", "57"},
       "besteffort-slices must be between 0 and 56"},
      {{"--high-slices", "lots"}, "--high-slices"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> argv = {FRACGPU_DEVICE_PLUGIN, "--plugin-dir", d, "--broker-run-dir",
                                     d};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessResult r = run_process(argv, clean_environment(), std::chrono::seconds(10));
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_NE((r.err + r.out).find(message), std::string::npos)
        << args.back() << ": " << r.err << r.out;
    for (const char* socket : {"fracgpu.sock", "fracgpu-high.sock", "fracgpu-besteffort.sock"}) {
      EXPECT_FALSE(std::filesystem::exists(d + "/" + socket)) << socket;
    }
  }
}

}  // namespace
}  // namespace fracgpu::testing
