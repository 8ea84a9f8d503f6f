// signal_exact_process (issue 27, row 6): the audit's kill and `fracgpu run`'s stop go to
// the process that was checked, never to a later one that reuses its pid. A fake process
// table recycles the pid between any two steps of the sequence; real processes check the
// system calls themselves.
#include "common/pidfd_signal.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <map>

#include "common/proc_stat.h"

namespace fracgpu::broker {
namespace {

// A pid table of "processes" (ids), each with a start time. A pidfd pins the process that
// held the pid when it was opened, as the kernel's does. `recycle_after` runs a hook after
// the named step: "open" or "start_time".
class RecyclingOps : public PidfdOps {
 public:
  struct Process {
    uint64_t start = 0;
    bool alive = true;
    std::vector<int> signals;
  };
  int spawn(pid_t pid, uint64_t start) {
    processes.push_back({start, true, {}});
    pid_table[pid] = static_cast<int>(processes.size()) - 1;
    return pid_table[pid];
  }
  // The process at `pid` exits and a newcomer takes the pid.
  void recycle(pid_t pid, uint64_t new_start) {
    processes[static_cast<std::size_t>(pid_table.at(pid))].alive = false;
    newcomer = spawn(pid, new_start);
  }

  int open(pid_t pid) override {
    auto it = pid_table.find(pid);
    if (it == pid_table.end() || !processes[static_cast<std::size_t>(it->second)].alive) return -1;
    pidfds[next_fd] = it->second;
    step("open");
    return next_fd++;
  }
  std::optional<uint64_t> start_time(pid_t pid) override {
    auto it = pid_table.find(pid);
    std::optional<uint64_t> out;
    if (it != pid_table.end() && processes[static_cast<std::size_t>(it->second)].alive)
      out = processes[static_cast<std::size_t>(it->second)].start;
    step("start_time");
    return out;
  }
  int send_signal(int pidfd, int sig) override {
    Process& p = processes[static_cast<std::size_t>(pidfds.at(pidfd))];
    if (!p.alive) {
      errno = ESRCH;
      return -1;
    }
    p.signals.push_back(sig);
    return 0;
  }
  void close(int pidfd) override { pidfds.erase(pidfd); }

  void step(const std::string& name) {
    if (name == recycle_after && hook) {
      auto h = std::move(hook);
      hook = nullptr;
      h();
    }
  }

  std::vector<Process> processes;
  std::map<pid_t, int> pid_table;
  std::map<int, int> pidfds;
  int next_fd = 100;
  int newcomer = -1;
  std::string recycle_after;
  std::function<void()> hook;
};

TEST(PidfdSignal, TheCheckedProcessIsSignalled) {
  RecyclingOps ops;
  const int p = ops.spawn(4242, 1000);
  EXPECT_TRUE(signal_exact_process(ops, 4242, 1000, SIGKILL));
  EXPECT_EQ(ops.processes[static_cast<std::size_t>(p)].signals, std::vector<int>{SIGKILL});
  EXPECT_TRUE(ops.pidfds.empty()) << "the pidfd is closed";
}

TEST(PidfdSignal, APidAlreadyReusedIsNotSignalled) {
  RecyclingOps ops;
  ops.spawn(4242, 1000);
  ops.recycle(4242, 2000);
  EXPECT_FALSE(signal_exact_process(ops, 4242, 1000, SIGKILL));
  EXPECT_TRUE(ops.processes[static_cast<std::size_t>(ops.newcomer)].signals.empty());
}

// The race of d28724a's kill: the start time was checked, then kill(pid) sent to whoever
// held the pid by then. Here the pid is recycled after each step in turn.
TEST(PidfdSignal, APidRecycledBetweenAnyTwoStepsNeverReachesTheNewcomer) {
  for (const std::string after : {"open", "start_time"}) {
    RecyclingOps ops;
    const int old = ops.spawn(4242, 1000);
    ops.recycle_after = after;
    ops.hook = [&] { ops.recycle(4242, 2000); };
    EXPECT_FALSE(signal_exact_process(ops, 4242, 1000, SIGKILL)) << "recycled after " << after;
    ASSERT_GE(ops.newcomer, 0) << after;
    EXPECT_TRUE(ops.processes[static_cast<std::size_t>(ops.newcomer)].signals.empty())
        << "the newcomer was signalled (recycled after " << after << ")";
    EXPECT_TRUE(ops.processes[static_cast<std::size_t>(old)].signals.empty());
  }
}

TEST(PidfdSignal, NeverPidOneOrBelow) {
  RecyclingOps ops;
  ops.spawn(1, 5);
  EXPECT_FALSE(signal_exact_process(ops, 1, 5, SIGKILL));
  EXPECT_FALSE(signal_exact_process(ops, 0, 0, SIGKILL));
  EXPECT_TRUE(ops.processes[0].signals.empty());
}

TEST(PidfdSignal, StartTimeParsing) {
  const std::string stat =
      "77 (a (weird) name) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
  EXPECT_EQ(parse_stat_start_time(stat), 123456u);
  EXPECT_EQ(parse_stat_start_time("77 (zombie) Z 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0"),
            std::nullopt);
  EXPECT_EQ(parse_stat_start_time("77 (short) S 1"), std::nullopt);
}

// The one /proc/<pid>/stat reader (common/proc_stat.h): a comm a tenant chose, holding
// ") Z 9 " and a newline, cannot pass for the fields after it; a malformed field is refused.
TEST(ProcStat, FieldsAreReadAfterTheLastParenthesis) {
  const auto s = parse_proc_stat(
      "42 (evil) Z 9 x\n) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->ppid, 7);
  EXPECT_EQ(s->start_time, 98765u);
  EXPECT_FALSE(s->gone());
  EXPECT_TRUE(parse_proc_stat("1 (z) Z 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0")->gone());
  for (const char* bad :
       {"", "no parenthesis", "1 (x) S", "1 (x) S x 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5",
        "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5x 0", "1 (x) SS 1"})
    EXPECT_EQ(parse_proc_stat(bad), std::nullopt) << bad;
  const auto self = read_proc_stat(::getpid());
  ASSERT_TRUE(self);
  EXPECT_EQ(self->ppid, ::getppid());
  EXPECT_EQ(read_proc_stat(0), std::nullopt);
}

// The real system calls against a real child: a wrong start time leaves it running, the
// right one stops it.
TEST(PidfdSignal, RealProcesses) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  SystemPidfdOps ops;
  const auto start = ops.start_time(child);
  ASSERT_TRUE(start.has_value());
  EXPECT_FALSE(signal_exact_process(ops, child, *start + 1, SIGKILL));
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, WNOHANG), 0) << "a wrong start time stops nothing";
  EXPECT_TRUE(signal_exact_process(ops, child, *start, SIGKILL));
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_FALSE(signal_exact_process(ops, child, *start, SIGKILL)) << "reaped: nothing to signal";
}

}  // namespace
}  // namespace fracgpu::broker
