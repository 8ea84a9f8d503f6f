// `fracgpu run` keeps its descendants (issue 27, row 5), the decisions: stop_descendants
// over a fake process table with fake time (SIGTERM, the grace, SIGKILL, a signal that
// cuts the grace, a process that forks meanwhile); descendants_of over a /proc-like
// table (orphans reparented to the subreaper, an excluded private broker, zombies); and
// plan_run_cgroup over mountinfo/cgroup texts of cgroup v2, hybrid and v1 nodes.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>

#include "cli/descendant_stopper.h"
#include "cli/process_tree.h"
#include "cli/run_cgroup.h"

namespace fracgpu::cli {
namespace {

using std::chrono::milliseconds;

class FakeTree : public DescendantPort {
 public:
  struct Proc {
    uint64_t start = 0;
    bool ignores_term = false;  // a daemon that traps SIGTERM
    int dies_after_term_ms = 0;
    std::vector<int> signals;
    Clock::time_point term_at{};
    bool alive = true;
  };
  std::vector<LiveProcess> alive() override {
    std::vector<LiveProcess> out;
    for (auto& [pid, p] : procs) {
      if (p.alive && !p.ignores_term && p.term_at != Clock::time_point{} &&
          clock >= p.term_at + milliseconds(p.dies_after_term_ms))
        p.alive = false;
      if (p.alive) out.push_back({pid, p.start});
    }
    return out;
  }
  bool signal(const LiveProcess& lp, int sig) override {
    auto it = procs.find(lp.pid);
    if (it == procs.end() || !it->second.alive || it->second.start != lp.start_time) return false;
    it->second.signals.push_back(sig);
    if (sig == SIGKILL) it->second.alive = false;
    if (sig == SIGTERM && it->second.term_at == Clock::time_point{}) it->second.term_at = clock;
    if (sig == SIGTERM && on_term) on_term(lp.pid);
    return true;
  }
  Clock::time_point now() override { return clock; }
  void pause(milliseconds d) override {
    clock += d;
    paused += d;
    if (hurry_at.count() > 0 && paused >= hurry_at) hurried = true;
  }
  bool hurry() override { return hurried; }

  std::map<pid_t, Proc> procs;
  Clock::time_point clock{std::chrono::seconds(1000)};
  milliseconds paused{0};
  milliseconds hurry_at{0};
  bool hurried = false;
  std::function<void(pid_t)> on_term;
};

TEST(StopDescendants, NothingLeftNothingDone) {
  FakeTree tree;
  const StopOutcome out = stop_descendants(tree, milliseconds(5000));
  EXPECT_FALSE(out.any());
  EXPECT_EQ(tree.paused.count(), 0);
}

TEST(StopDescendants, ThoseThatHeedSigtermExitWithinTheGrace) {
  FakeTree tree;
  tree.procs[10] = {1, false, 120, {}, {}, true};
  tree.procs[11] = {2, false, 300, {}, {}, true};
  const StopOutcome out = stop_descendants(tree, milliseconds(5000));
  EXPECT_EQ(out.terminated, 2u);
  EXPECT_EQ(out.killed, 0u);
  EXPECT_TRUE(out.left.empty());
  EXPECT_EQ(tree.procs[10].signals, std::vector<int>{SIGTERM});
  EXPECT_LE(tree.paused.count(), 350) << "no waiting beyond the last exit";
}

TEST(StopDescendants, OneThatIgnoresSigtermIsKilledWhenTheGraceEnds) {
  FakeTree tree;
  tree.procs[10] = {1, true, 0, {}, {}, true};
  tree.procs[11] = {2, false, 100, {}, {}, true};
  const StopOutcome out = stop_descendants(tree, milliseconds(2000));
  EXPECT_EQ(out.terminated, 1u);
  EXPECT_EQ(out.killed, 1u);
  EXPECT_TRUE(out.left.empty());
  EXPECT_EQ(tree.procs[10].signals, (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_GE(tree.paused.count(), 2000);
  EXPECT_LE(tree.paused.count(), 2000 + kStopPoll.count());
}

TEST(StopDescendants, ASignalToFracgpuRunEndsTheGraceAtOnce) {
  FakeTree tree;
  tree.procs[10] = {1, true, 0, {}, {}, true};
  tree.hurry_at = milliseconds(200);
  const StopOutcome out = stop_descendants(tree, milliseconds(60000));
  EXPECT_EQ(out.killed, 1u);
  EXPECT_LE(tree.paused.count(), 300);
}

TEST(StopDescendants, AChildForkedDuringTheGraceIsStoppedToo) {
  FakeTree tree;
  tree.procs[10] = {1, true, 0, {}, {}, true};
  tree.on_term = [&](pid_t pid) {
    if (pid == 10) tree.procs[12] = {3, true, 0, {}, {}, true};  // its SIGTERM handler forks
  };
  const StopOutcome out = stop_descendants(tree, milliseconds(500));
  EXPECT_EQ(out.killed, 2u);
  EXPECT_EQ(tree.procs[12].signals, (std::vector<int>{SIGTERM, SIGKILL}));
}

TEST(StopDescendants, ZeroGraceStillSaysSigtermFirst) {
  FakeTree tree;
  tree.procs[10] = {1, true, 0, {}, {}, true};
  const StopOutcome out = stop_descendants(tree, milliseconds(0));
  EXPECT_EQ(out.killed, 1u);
  EXPECT_EQ(tree.procs[10].signals, (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_LE(tree.paused.count(), kStopPoll.count()) << "no grace: one look that it is gone";
}

// A /proc table as the subreaper sees it after `sh -c 'setsid sh -c "(cmd &)&"'`: the
// shells exited, cmd (pid 40) was reparented to fracgpu run (pid 10).
TEST(DescendantsOf, OrphansReparentedToTheSubreaperAreDescendants) {
  const std::vector<ProcEntry> table = {
      {1, 0, 'S', 1},     {10, 5, 'S', 100},  {20, 10, 'Z', 0},  // the command, exited
      {40, 10, 'S', 400},                                        // the escaped grandchild
      {41, 40, 'S', 410},                                        // its own child
      {30, 10, 'S', 300}, {31, 30, 'S', 310},                    // the private broker + child
      {50, 1, 'S', 500},                                         // a stranger
  };
  const std::vector<LiveProcess> got = descendants_of(10, table, {30});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].pid, 40);
  EXPECT_EQ(got[0].start_time, 400u);
  EXPECT_EQ(got[1].pid, 41);
}

TEST(PlanRunCgroup, CgroupV2MountedAtTheUsualPlace) {
  const std::string mountinfo =
      "22 1 0:21 / /proc rw - proc proc rw\n"
      "35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
  const CgroupPlan plan =
      plan_run_cgroup(mountinfo, "0::/user.slice/user-1000.slice/user@1000.service/app.slice\n");
  EXPECT_EQ(plan.dir, "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice");
  EXPECT_EQ(plan.why_not, "");
}

TEST(PlanRunCgroup, HybridNodeWithTheUnifiedHierarchyAside) {
  const std::string mountinfo =
      "40 31 0:37 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(plan_run_cgroup(mountinfo, "4:memory:/process_api/1a\n0::/\n").dir,
            "/sys/fs/cgroup/unified");
}

TEST(PlanRunCgroup, AContainersNamespacedMountAndEscapedPaths) {
  // A mount of part of the hierarchy: paths are relative to its root.
  const std::string mountinfo =
      "50 40 0:30 /kubepods/pod1/c1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n"
      "51 40 0:30 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(plan_run_cgroup(mountinfo, "0::/kubepods/pod1/c1/sub").dir, "/sys/fs/cgroup/sub");
  EXPECT_EQ(plan_run_cgroup(mountinfo, "0::/elsewhere").dir, "/mnt/with space/elsewhere");
}

TEST(PlanRunCgroup, ACgroupV1NodeHasNone) {
  const std::string mountinfo = "40 31 0:37 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
  const CgroupPlan v1 = plan_run_cgroup(mountinfo, "4:memory:/user.slice\n1:name=systemd:/x\n");
  EXPECT_EQ(v1.dir, "");
  EXPECT_NE(v1.why_not.find("no cgroup v2"), std::string::npos) << v1.why_not;
  const CgroupPlan unmounted = plan_run_cgroup(mountinfo, "4:memory:/user.slice\n0::/\n");
  EXPECT_EQ(unmounted.dir, "");
  EXPECT_NE(unmounted.why_not.find("no cgroup2 file system"), std::string::npos)
      << unmounted.why_not;
}

TEST(RunCgroupMode, OffSaysSoAndAttributesByAncestry) {
  RunCgroup off = RunCgroup::enter(RunCgroup::Mode::kOff);
  EXPECT_FALSE(off.active());
  EXPECT_EQ(off.attribution(),
            "ancestry only (fracgpu run is the child subreaper; no cgroup of its own: --cgroup "
            "off)");
}

}  // namespace
}  // namespace fracgpu::cli
