// The rules that decide how much of FRACGPU_DISABLE / FRACGPU_SOCKET counts
// (core/injection_policy.h), fed invented facts: a pod's socket, a node broker, the node's
// preload file, and who owns each directory on the way to a named socket.
#include "core/injection_policy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

namespace fracgpu {
namespace {

using Action = InjectionPlan::Action;

ShimConfig config(bool disabled, const std::string& socket = "") {
  ShimConfig c;
  c.disabled = disabled;
  if (!socket.empty()) {
    c.socket_path = socket;
    c.socket_explicit = true;
  }
  return c;
}

NodeFacts pod() {
  NodeFacts f;
  f.pod_socket = true;
  return f;
}

NodeFacts node_broker(uid_t uid = 0) {
  NodeFacts f;
  f.node_broker_uid = uid;
  return f;
}

bool mentions(const std::vector<std::string>& lines, const std::string& fragment) {
  for (const auto& l : lines)
    if (l.find(fragment) != std::string::npos) return true;
  return false;
}

TEST(InjectionPolicy, PlainHostKeepsTheUsersChoices) {
  EXPECT_EQ(plan_injection(config(false), NodeFacts{}).action, Action::kNoTenant);
  EXPECT_EQ(plan_injection(config(true), NodeFacts{}).action, Action::kPassThrough);
  EXPECT_EQ(plan_injection(config(true, "/tmp/b/broker.sock"), NodeFacts{}).action,
            Action::kPassThrough);
  InjectionPlan p = plan_injection(config(false, "/tmp/b/broker.sock"), NodeFacts{});
  EXPECT_EQ(p.action, Action::kRegister);
  EXPECT_EQ(p.socket_path, "/tmp/b/broker.sock");
  EXPECT_FALSE(p.node_broker_uid);
  EXPECT_TRUE(p.warnings.empty());
}

TEST(InjectionPolicy, PodIgnoresDisableAndSocketWithOneWarningEach) {
  InjectionPlan p = plan_injection(config(true, "/tmp/fake/broker.sock"), pod());
  EXPECT_EQ(p.action, Action::kRegister);
  EXPECT_EQ(p.socket_path, paths::kDefaultTenantSocket);
  EXPECT_FALSE(p.node_broker_uid);
  ASSERT_EQ(p.warnings.size(), 2u);
  EXPECT_TRUE(mentions(p.warnings, "FRACGPU_DISABLE is ignored"));
  EXPECT_TRUE(mentions(p.warnings, "FRACGPU_SOCKET=/tmp/fake/broker.sock is ignored"));
}

TEST(InjectionPolicy, PodWithTheDevicePluginsOwnEnvironmentIsQuiet) {
  // The device plugin sets FRACGPU_SOCKET to the default path: nothing to warn about.
  InjectionPlan p = plan_injection(config(false, paths::kDefaultTenantSocket), pod());
  EXPECT_EQ(p.action, Action::kRegister);
  EXPECT_TRUE(p.warnings.empty());
  p = plan_injection(config(false), pod());
  EXPECT_EQ(p.action, Action::kRegister);
  EXPECT_EQ(p.socket_path, paths::kDefaultTenantSocket);
  EXPECT_TRUE(p.warnings.empty());
}

TEST(InjectionPolicy, NodeBrokerHostChecksANamedSocketAndIgnoresDisable) {
  InjectionPlan p =
      plan_injection(config(true, "/run/fracgpu/tenants/a/broker.sock"), node_broker(0));
  EXPECT_EQ(p.action, Action::kRegister);
  EXPECT_EQ(p.socket_path, "/run/fracgpu/tenants/a/broker.sock");
  ASSERT_TRUE(p.node_broker_uid);
  EXPECT_EQ(*p.node_broker_uid, 0u);
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_TRUE(mentions(p.warnings, "FRACGPU_DISABLE is ignored"));

  p = plan_injection(config(false, "/tmp/x.sock"), node_broker(990));
  EXPECT_EQ(p.action, Action::kRegister);
  EXPECT_EQ(*p.node_broker_uid, 990u);
  EXPECT_TRUE(p.warnings.empty());
}

TEST(InjectionPolicy, NodeBrokerHostWithoutASocketHasNothingToEscape) {
  EXPECT_EQ(plan_injection(config(true), node_broker()).action, Action::kPassThrough);
  EXPECT_EQ(plan_injection(config(false), node_broker()).action, Action::kNoTenant);
}

TEST(InjectionPolicy, NodePreloadIgnoresDisableWhenThereIsATenant) {
  NodeFacts f;
  f.preloaded_by_node = true;
  InjectionPlan p = plan_injection(config(true, "/tmp/b/broker.sock"), f);
  EXPECT_EQ(p.action, Action::kRegister);
  EXPECT_TRUE(mentions(p.warnings, "FRACGPU_DISABLE is ignored"));
  EXPECT_TRUE(mentions(p.warnings, "ld.so.preload"));
  // No tenant to join: nothing to escape, the user's DISABLE stands (silently).
  p = plan_injection(config(true), f);
  EXPECT_EQ(p.action, Action::kPassThrough);
  EXPECT_TRUE(p.warnings.empty());
  // In a pod the pod rule decides.
  f.pod_socket = true;
  EXPECT_EQ(plan_injection(config(true), f).socket_path, paths::kDefaultTenantSocket);
}

TEST(InjectionPolicy, ServersOtherThanRootOrTheBrokerAreRefusedByName) {
  EXPECT_FALSE(untrusted_server("/s", 0, 0));
  EXPECT_FALSE(untrusted_server("/s", 990, 990));
  EXPECT_FALSE(untrusted_server("/s", 0, 990));
  auto refusal = untrusted_server("/tmp/fake/broker.sock", 1234, 0);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->find("/tmp/fake/broker.sock"), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("uid 1234"), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("CUDA is unavailable"), std::string::npos) << *refusal;
  refusal = untrusted_server("/s", 1234, 990);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->find("uid 990"), std::string::npos) << *refusal;
}

PathEntry dir(const std::string& path, uid_t uid, mode_t mode) {
  return {path, uid, static_cast<mode_t>(S_IFDIR | mode)};
}
PathEntry sock(const std::string& path, uid_t uid, mode_t mode = 0600) {
  return {path, uid, static_cast<mode_t>(S_IFSOCK | mode)};
}

TEST(InjectionPolicy, NodeTenantSocketPathIsSafe) {
  // The layout of fracgpu/paths.h; a one-owner socket belongs to its owner.
  std::vector<PathEntry> e = {dir("/", 0, 0755),
                              dir("/run", 0, 0755),
                              dir("/run/fracgpu", 0, 0755),
                              dir("/run/fracgpu/tenants", 0, 0711),
                              dir("/run/fracgpu/tenants/a", 0, 0711),
                              sock("/run/fracgpu/tenants/a/broker.sock", 1000)};
  EXPECT_FALSE(unsafe_socket_path(e, 0));
  // A broker running as its own uid owns its run directory.
  e[2].uid = e[3].uid = e[4].uid = 990;
  EXPECT_FALSE(unsafe_socket_path(e, 990));
  EXPECT_TRUE(unsafe_socket_path(e, 0));
}

TEST(InjectionPolicy, RootsPrivateBrokerUnderStickyTmpIsSafe) {
  std::vector<PathEntry> e = {dir("/", 0, 0755), dir("/tmp", 0, 01777),
                              dir("/tmp/fracgpu-x", 0, 0700), dir("/tmp/fracgpu-x/run", 0, 0755),
                              sock("/tmp/fracgpu-x/run/broker.sock", 0)};
  EXPECT_FALSE(unsafe_socket_path(e, 0));
}

TEST(InjectionPolicy, PathsAnotherUidCanChangeAreUnsafe) {
  // A directory of another user (its fake broker's).
  std::vector<PathEntry> e = {dir("/", 0, 0755), dir("/tmp", 0, 01777),
                              dir("/tmp/evil", 1234, 0755), sock("/tmp/evil/broker.sock", 1234)};
  auto why = unsafe_socket_path(e, 0);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("/tmp/evil"), std::string::npos) << *why;
  EXPECT_NE(why->find("uid 1234"), std::string::npos) << *why;
  // A socket of another user's directly in /tmp: sticky, but the entry is theirs.
  e = {dir("/", 0, 0755), dir("/tmp", 0, 01777), sock("/tmp/broker.sock", 1234)};
  why = unsafe_socket_path(e, 0);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("shared directory /tmp"), std::string::npos) << *why;
  // A root directory that anyone may write to, without the sticky bit.
  e = {dir("/", 0, 0755), dir("/srv", 0, 0777), dir("/srv/r", 0, 0755), sock("/srv/r/b.sock", 0)};
  why = unsafe_socket_path(e, 0);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("/srv is writable by other users"), std::string::npos) << *why;
  // Group-writable counts as writable by others.
  e[1].mode = S_IFDIR | 0775;
  EXPECT_TRUE(unsafe_socket_path(e, 0));
  EXPECT_TRUE(unsafe_socket_path({}, 0));
}

// A refusal beside a stale node layout must say why the host counts as a node: the lock
// file a stopped broker leaves behind, with its owner.
TEST(InjectionPolicy, RefusalsNameTheLockThatMakesTheHostANode) {
  const std::string evidence = node_broker_evidence("/run/fracgpu", 990);
  EXPECT_NE(evidence.find("/run/fracgpu/broker.lock exists (owned by uid 990)"), std::string::npos)
      << evidence;
  EXPECT_NE(evidence.find("until root removes /run/fracgpu"), std::string::npos) << evidence;
  EXPECT_NE(node_broker_evidence("/x", 0).find("/x/broker.lock"), std::string::npos);
}

}  // namespace
}  // namespace fracgpu
