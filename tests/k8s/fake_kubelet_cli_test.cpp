// The fracgpu-fake-kubelet command (fake_kubelet_cli.cpp) against the real plugin over the
// real broker on two simulated GPUs (plugin_fixture.h, --slices 8 --high-slices 2). The
// GPU runs of the pod path (tests/gpu/k8s/run_pod_checks.sh) trust its JSON, so CI checks
// that it is the plugin's own answer: the fixture's in-process kubelet goes away, the
// command serves a new kubelet.sock, the plugin registers both resources with it again,
// and what it prints must match the slices listed, the broker's tenant and the class's
// priority; its failures must be one line and a non-zero status.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "device_plugin/plugin_config.h"
#include "plugin_fixture.h"

namespace fracgpu::testing {
namespace {

class FakeKubeletCliTest : public PluginNodeTest {
 protected:
  FakeKubeletCliTest() {
    slices_ = 8;
    extra_args_ = {"--high-slices", "2"};
    registrations_per_start_ = 2;
  }

  // Runs the command in place of the fixture's kubelet (whose server is stopped first,
  // leaving its socket file behind as a dead kubelet would).
  ProcessResult run_cli(const std::vector<std::string>& args) {
    kubelet_.reset();
    std::vector<std::string> argv = {FRACGPU_FAKE_KUBELET, "--plugin-dir", plugin_dir()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv, env_, std::chrono::seconds(30));
  }
};

TEST_F(FakeKubeletCliTest, AllocatesThePreferredSlicesAndPrintsTheResponse) {
  for (const auto& [resource, count, priority] :
       {std::tuple<std::string, int, std::string>{"fracgpu.io/gpu-slice", 2, "normal"},
        std::tuple<std::string, int, std::string>{"fracgpu.io/gpu-slice-high", 1, "high"}}) {
    SCOPED_TRACE(resource);
    ProcessResult r = run_cli({"--resource", resource, "--count", std::to_string(count),
                               "--registrations", "2", "--timeout-s", "15"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err << "\nplugin log:\n" << plugin_->err();
    ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;  // ONE JSON object
    const auto out = nlohmann::json::parse(r.out);
    EXPECT_EQ(out["resource"], resource);
    EXPECT_EQ(out["endpoint"],
              resource == "fracgpu.io/gpu-slice" ? "fracgpu.sock" : "fracgpu-high.sock");
    EXPECT_EQ(out["devices"].size(),
              resource == "fracgpu.io/gpu-slice" ? 12u : 4u);  // 6 or 2 per GPU
    ASSERT_EQ(out["preferred"].size(), static_cast<std::size_t>(count));
    const std::set<std::string> listed(out["devices"].begin(), out["devices"].end());
    for (const auto& id : out["preferred"]) EXPECT_TRUE(listed.count(id.get<std::string>())) << id;

    const auto& allocate = out["allocate"];
    std::set<std::string> paths;
    for (const auto& m : allocate["mounts"]) paths.insert(m["container_path"].get<std::string>());
    EXPECT_EQ(paths, (std::set<std::string>{k8s::kContainerShimPath, "/etc/ld.so.preload",
                                            "/run/fracgpu"}));
    EXPECT_EQ(allocate["envs"]["FRACGPU_SOCKET"], "/run/fracgpu/broker.sock");
    EXPECT_EQ(allocate["annotations"]["fracgpu.io/slices"], std::to_string(count) + "/8");
    EXPECT_EQ(allocate["annotations"]["fracgpu.io/slice-class"], priority);
    auto t = tenant(allocate["annotations"]["fracgpu.io/tenant"].get<std::string>());
    ASSERT_FALSE(t.is_null()) << out.dump();
    ASSERT_EQ(t["devices"].size(), 1u);
    EXPECT_EQ(t["devices"][0]["priority"], priority) << t.dump();
    const int gpu = t["devices"][0]["gpu"].get<int>();
    EXPECT_EQ(allocate["envs"]["NVIDIA_VISIBLE_DEVICES"], gpu == 0 ? gpu0_ : gpu1_) << t.dump();
  }
}

// --in-use leaves slices other containers hold out of the offer (two pods get disjoint
// slices, as the kubelet offers only unallocated ones); --pre-start no defers
// PreStartContainer to a later run with only:IDS, as the kubelet calls it right before the
// container's creation (the runtime test restarts the plugin in between).
TEST_F(FakeKubeletCliTest, InUseSlicesAreLeftOutAndPreStartCanComeLater) {
  const std::vector<std::string> common = {"--resource", "fracgpu.io/gpu-slice", "--registrations",
                                           "2",          "--timeout-s",          "15"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return run_cli(args);
  };
  ProcessResult first = with({"--count", "2", "--pre-start", "no"});
  ASSERT_EQ(first.exit_code, 0) << first.err << "\nplugin log:\n" << plugin_->err();
  const auto a = nlohmann::json::parse(first.out)["preferred"];
  ASSERT_EQ(a.size(), 2u);
  const std::string in_use = a[0].get<std::string>() + "," + a[1].get<std::string>();
  ProcessResult second = with({"--count", "2", "--in-use", in_use});
  ASSERT_EQ(second.exit_code, 0) << second.err << "\nplugin log:\n" << plugin_->err();
  const auto out = nlohmann::json::parse(second.out);
  EXPECT_EQ(out["devices"].size(), 10u) << out.dump();  // 12 listed, 2 in use
  for (const auto& id : out["preferred"]) {
    EXPECT_NE(id, a[0]);
    EXPECT_NE(id, a[1]);
  }
  ProcessResult later = with({"--pre-start", "only:" + in_use});
  ASSERT_EQ(later.exit_code, 0) << later.err << "\nplugin log:\n" << plugin_->err();
  EXPECT_EQ(nlohmann::json::parse(later.out)["pre_started"], a) << later.out;
  EXPECT_NE(plugin_->err().find("PreStartContainer"), std::string::npos) << plugin_->err();
  ProcessResult bad = run_cli({"--resource", "fracgpu.io/gpu-slice", "--pre-start", "only:"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

TEST_F(FakeKubeletCliTest, FailuresAreOneLineAndANonZeroStatus) {
  ProcessResult none = run_cli({"--resource", "fracgpu.io/no-such", "--count", "1",
                                "--registrations", "2", "--timeout-s", "15"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.out, "");
  EXPECT_NE(none.err.find("no registration for resource fracgpu.io/no-such; registered: "),
            std::string::npos)
      << none.err;

  ProcessResult too_many = run_cli({"--resource", "fracgpu.io/gpu-slice-high", "--count", "5",
                                    "--registrations", "2", "--timeout-s", "15"});
  EXPECT_EQ(too_many.exit_code, 1);
  EXPECT_NE(too_many.err.find("4 healthy slice(s) listed, 5 wanted"), std::string::npos)
      << too_many.err;

  ProcessResult late = run_cli({"--resource", "fracgpu.io/gpu-slice", "--count", "1",
                                "--registrations", "3", "--timeout-s", "3"});
  EXPECT_EQ(late.exit_code, 1);
  EXPECT_NE(late.err.find("timed out after 3 s waiting for 3 registration(s)"), std::string::npos)
      << late.err;
  EXPECT_EQ(std::count(late.err.begin(), late.err.end(), '\n'), 1) << late.err;

  ProcessResult bad = run_cli({"--resource", "fracgpu.io/gpu-slice", "--count", "0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

}  // namespace
}  // namespace fracgpu::testing
