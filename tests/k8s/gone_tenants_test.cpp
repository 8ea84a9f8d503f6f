// GoneTenants (k8s/device_plugin/gone_tenants.h) with a fake clock: a tenant of the plugin
// that the kubelet stops listing is deleted after three readings spanning the span, never
// while it runs a process, waits for its container's start or is listed again, and names
// the plugin did not make are never touched.
#include "device_plugin/gone_tenants.h"

#include <gtest/gtest.h>

#include <set>

#include "device_plugin/slice_ids.h"

namespace fracgpu::k8s {
namespace {

using Clock = GoneTenants::Clock;
using nlohmann::json;
using std::chrono::seconds;

const std::string kGpu = "GPU-00000000-0000-0000-0000-000000000001";

json tenant(const std::string& name, bool running = false) {
  json t = {{"name", name}, {"processes", json::array()}};
  if (running) t["processes"].push_back({{"pid", 42}});
  return t;
}

class Gone : public ::testing::Test {
 protected:
  std::vector<std::string> at(int s, const std::map<std::string, PodIdentity>& listed = {}) {
    return gone.pass(listed, broker, awaiting, Clock::time_point{} + seconds(s));
  }
  GoneTenants gone{3, std::chrono::milliseconds(20000)};
  const std::string a = tenant_name_for(kGpu, {0, 1});
  const std::string b = tenant_name_for(kGpu, {2});
  json broker = json::array({tenant(a), tenant(b), tenant("team-a-notebook")});
  std::function<bool(const std::string&)> awaiting = [](const std::string&) { return false; };
};

TEST_F(Gone, ATenantTheKubeletStopsListingGoesAfterThreeReadingsAndTheSpan) {
  const std::map<std::string, PodIdentity> both = {{a, {"ml", "p", "c"}}, {b, {"ml", "q", "c"}}};
  EXPECT_TRUE(at(0, both).empty());
  const std::map<std::string, PodIdentity> only_b = {{b, {"ml", "q", "c"}}};
  EXPECT_TRUE(at(10, only_b).empty());
  EXPECT_TRUE(at(11, only_b).empty());
  EXPECT_TRUE(at(12, only_b).empty()) << "three readings, but 2 s of the 20";
  EXPECT_TRUE(at(29, only_b).empty());
  EXPECT_EQ(at(30, only_b), std::vector<std::string>{a});
  EXPECT_EQ(gone.watched(), 0u) << "returned once, then forgotten";
}

TEST_F(Gone, ListedAgainStartsTheCountAgain) {
  const std::map<std::string, PodIdentity> listed = {{a, {"ml", "p", "c"}}, {b, {"ml", "q", "c"}}};
  at(0, {{b, {"ml", "q", "c"}}});
  at(15, {{b, {"ml", "q", "c"}}});
  at(16, listed);  // one reading that missed it: a kubelet restarting
  EXPECT_TRUE(at(25, {{b, {"ml", "q", "c"}}}).empty());
  EXPECT_TRUE(at(40, {{b, {"ml", "q", "c"}}}).empty());
  EXPECT_EQ(at(45, {{b, {"ml", "q", "c"}}}), std::vector<std::string>{a});
}

TEST_F(Gone, NeverWhileItRunsAProcessOrWaitsForItsStart) {
  broker = json::array({tenant(a, /*running=*/true), tenant(b)});
  awaiting = [&](const std::string& name) { return name == b; };
  for (int s = 0; s <= 100; s += 10) EXPECT_TRUE(at(s).empty()) << s;
  broker = json::array({tenant(a), tenant(b)});  // its process exits
  EXPECT_TRUE(at(110).empty());
  EXPECT_TRUE(at(120).empty());
  EXPECT_EQ(at(130), std::vector<std::string>{a});
}

TEST_F(Gone, NamesThePluginDidNotMakeAndGarbageAreLeftAlone) {
  broker = json::array(
      {tenant("team-a-notebook"), json("garbage"), json::object(), json{{"name", 7}}, tenant(b)});
  std::set<std::string> returned;
  for (int s = 0; s <= 60; s += 10)
    for (const auto& name : at(s)) returned.insert(name);
  EXPECT_EQ(returned, std::set<std::string>{b});
  EXPECT_TRUE(gone.pass({}, json("not a list"), awaiting, Clock::time_point{}).empty());
}

}  // namespace
}  // namespace fracgpu::k8s
