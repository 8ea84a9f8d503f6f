// cgroup_identity (issue 27, row 5): the cgroup that identifies a process's container on
// cgroup v2, hybrid and v1 nodes, and nothing for the root of every hierarchy.
#include "core/cgroup_identity.h"

#include <gtest/gtest.h>

namespace fracgpu::broker {
namespace {

TEST(CgroupIdentity, V2IsTheUnifiedPath) {
  EXPECT_EQ(cgroup_identity("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope"),
            "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope");
  EXPECT_EQ(cgroup_identity("0::/user.slice/user-1000.slice/session-2.scope\n"),
            "0::/user.slice/user-1000.slice/session-2.scope");
}

TEST(CgroupIdentity, TheRootOfEveryHierarchySaysNothing) {
  EXPECT_EQ(cgroup_identity("0::/"), "");
  EXPECT_EQ(cgroup_identity(""), "");
  EXPECT_EQ(cgroup_identity("9:name=systemd:/\n8:pids:/\n4:memory:/\n1:cpu,cpuacct:/\n0::/"), "");
  EXPECT_EQ(cgroup_identity("garbage\nno colons here"), "");
}

TEST(CgroupIdentity, OnV1TheMemoryHierarchyComesFirstThenPidsThenSystemd) {
  const std::string v1 =
      "12:pids:/kubepods/burstable/pod-a/c1\n11:cpu,cpuacct:/kubepods/burstable/pod-a/c1\n"
      "4:memory:/kubepods/burstable/pod-a/c1\n1:name=systemd:/kubepods/burstable/pod-a/c1\n0::/";
  EXPECT_EQ(cgroup_identity(v1), "memory:/kubepods/burstable/pod-a/c1");
  EXPECT_EQ(cgroup_identity("12:pids:/docker/abc\n4:memory:/\n1:name=systemd:/docker/abc\n0::/"),
            "pids:/docker/abc");
  EXPECT_EQ(cgroup_identity("4:memory:/\n1:name=systemd:/system.slice/x.service\n0::/"),
            "name=systemd:/system.slice/x.service");
  EXPECT_EQ(cgroup_identity("7:freezer:/lxc/c1\n4:memory:/\n0::/"), "freezer:/lxc/c1");
}

TEST(CgroupIdentity, AHybridNodePrefersTheUnifiedPath) {
  EXPECT_EQ(cgroup_identity("4:memory:/process_api/1a\n1:name=systemd:/\n0::/fracgpu-run-7"),
            "0::/fracgpu-run-7");
  // This very machine's shape: only the memory controller says anything.
  EXPECT_EQ(cgroup_identity("9:name=systemd:/\n8:pids:/\n4:memory:/process_api/1a\n0::/"),
            "memory:/process_api/1a");
}

TEST(CgroupIdentity, HierarchiesNeverMixUp) {
  EXPECT_NE(cgroup_identity("4:memory:/a\n0::/"), cgroup_identity("8:pids:/a\n0::/"));
  EXPECT_NE(cgroup_identity("0::/a"), cgroup_identity("4:memory:/a"));
  // A path may contain ':'.
  EXPECT_EQ(cgroup_identity("0::/machine.slice/libpod-x:y.scope"),
            "0::/machine.slice/libpod-x:y.scope");
}

}  // namespace
}  // namespace fracgpu::broker
