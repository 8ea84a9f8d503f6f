// fork/exec/wait for run_command. An exec failure is reported to the parent through a
// close-on-exec pipe (errno), so "command not found" is a clear fracgpu error rather
// than a mysterious exit status.
#include "cli/command_runner.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "cli/process_tree.h"

extern char** environ;

namespace fracgpu::cli {
namespace {

std::atomic<pid_t> g_child{0};
std::atomic<bool> g_stopping{false};  // the command exited: its leftovers are being stopped
std::atomic<bool> g_hurry{false};     // a signal came meanwhile: no more grace
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// Forward only signals sent to us specifically (kill, timeout, systemd). Terminal
// signals (si_code SI_KERNEL) already went to the command, which shares our process
// group; sending them twice would make e.g. Python raise KeyboardInterrupt twice.
// Once the command is gone, any of them (the terminal's too) cuts the stopper's grace.
void forward_signal(int sig, siginfo_t* info, void*) {
  if (g_stopping.load()) {
    g_hurry.store(true);
    return;
  }
  const pid_t child = g_child.load();
  if (child > 0 && info != nullptr && info->si_code != SI_KERNEL) ::kill(child, sig);
}

// Only interrupts waitpid(): the orphan that exited is reaped by the waiting loop.
void note_child_exit(int) {}

// No SA_RESTART: every call between here and restore_default_signals() retries on EINTR
// itself, and a restarted waitpid() would keep a handler that a runtime runs only at its
// next library call (ThreadSanitizer defers signals so) from ever forwarding.
void install_forwarding() {
  struct sigaction sa {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);
}

void restore_default_signals() {
  for (int sig : kForwarded) ::signal(sig, SIG_DFL);
  ::signal(SIGCHLD, SIG_DFL);
}

void install_orphan_reaping() {
  struct sigaction sa {};
  sa.sa_handler = note_child_exit;
  sa.sa_flags = SA_NOCLDSTOP;  // no SA_RESTART: waitpid() returns EINTR
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGCHLD, &sa, nullptr);
}

std::vector<std::string> build_environment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    if (!overrides.count(key)) env.push_back(entry);
  }
  for (const auto& [key, value] : overrides) env.push_back(key + "=" + value);
  return env;
}

[[noreturn]] void exec_child(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, int err_fd) {
  restore_default_signals();
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  ::execvpe(args[0], args.data(), envp.data());
  const int err = errno;
  if (::write(err_fd, &err, sizeof err) < 0) {
  }
  ::_exit(127);
}

// The command's exit status; with `orphans`, the orphans that exit meanwhile (SIGCHLD
// interrupts the wait) are reaped too, never the command itself nor `keep`.
int wait_for(pid_t pid, bool orphans, std::vector<pid_t> keep) {
  keep.push_back(pid);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 125;
    if (orphans) reap_orphans(keep);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 125;
}

}  // namespace

std::string prepend_preload(const std::string& shim, const char* existing) {
  if (existing == nullptr || *existing == '\0') return shim;
  return shim + ":" + existing;
}

CommandResult run_command(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env_overrides,
                          const Supervision& supervision) {
  const std::vector<std::string> env = build_environment(env_overrides);
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0)
    return {125, std::string("pipe: ") + std::strerror(errno), {}};
  const bool keep = supervision.keep_descendants;
  if (keep && ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    const std::string why = std::strerror(errno);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return {125, "cannot become the command's child subreaper: " + why, {}};
  }
  g_stopping.store(false);
  g_hurry.store(false);
  install_forwarding();
  if (keep) install_orphan_reaping();
  const pid_t pid = ::fork();
  if (pid < 0) return {125, std::string("fork: ") + std::strerror(errno), {}};
  if (pid == 0) {
    ::close(err_pipe[0]);
    exec_child(argv, env, err_pipe[1]);
  }
  g_child.store(pid);
  ::close(err_pipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_pipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  const int status = wait_for(pid, keep, supervision.excluded);
  StopOutcome stopped;
  if (keep) {
    g_stopping.store(true);
    g_child.store(0);
    ProcessTree tree(supervision.excluded, supervision.cgroup_pids, g_hurry);
    stopped = stop_descendants(tree, supervision.grace);
    ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  }
  g_child.store(0);
  restore_default_signals();
  g_stopping.store(false);
  if (n == sizeof exec_errno) {
    return {exec_errno == ENOENT ? 127 : 126,
            "cannot run '" + argv[0] + "': " + std::strerror(exec_errno), stopped};
  }
  return {status, "", stopped};
}

}  // namespace fracgpu::cli
