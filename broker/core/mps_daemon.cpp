// Start, supervision and shutdown of the MPS control daemon (see mps_daemon.h). Every
// step runs on the broker's loop thread and none of them blocks it for long: a start is
// a posix_spawn of `control -d` followed by a 20 ms poll for its exit status and the pid
// file; a death arrives on the daemon's pidfd. Only shutdown waits (at most 5 s).
#include "core/mps_daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/process_tracker.h"
#include "fracgpu/monotonic_clock.h"
#include "fracgpu/paths.h"

extern char** environ;

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace fracgpu::broker {
namespace {

constexpr const char* kPidFileName = "nvidia-cuda-mps-control.pid";  // written by the daemon
constexpr const char* kLauncherLog = "broker-launch.log";            // `control -d`'s own output
constexpr int64_t kPollNs = 20'000'000;
constexpr int64_t kStartTimeoutNs = 10'000'000'000;
constexpr int64_t kFirstBackoffNs = 500'000'000;
constexpr int64_t kMaxBackoffNs = 30'000'000'000;
constexpr int64_t kStableUptimeNs = 60'000'000'000;  // a daemon up this long resets the backoff
constexpr int kShutdownWaitMs = 5000;

// Running (a zombie is not: a daemon that exited may wait a while for its reaper).
bool alive(pid_t pid) {
  return pid > 0 && process_start_time(pid).has_value();
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string seconds_text(int64_t ns) {
  std::ostringstream s;
  s << static_cast<double>(ns) / 1e9 << " s";
  return s.str();
}

// The environment of the broker plus the two MPS directories (replacing any given).
std::vector<std::string> daemon_environment(const std::string& pipe, const std::string& log) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("CUDA_MPS_PIPE_DIRECTORY=", 0) == 0 ||
        entry.rfind("CUDA_MPS_LOG_DIRECTORY=", 0) == 0)
      continue;
    env.emplace_back(entry);
  }
  env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + pipe);
  env.push_back("CUDA_MPS_LOG_DIRECTORY=" + log);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Spawns `argv` with the MPS environment; stdin from `stdin_fd` (or /dev/null), stdout
// and stderr to `output` (truncated). Returns the pid, or -errno.
pid_t spawn(std::vector<std::string> argv, const std::string& pipe, const std::string& log,
            const std::string& output, int stdin_fd) {
  std::vector<std::string> env = daemon_environment(pipe, log);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdin_fd >= 0)
    posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
  else
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);  // the broker blocks SIGTERM for its signalfd
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  auto args = pointers(argv);
  auto envp = pointers(env);
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  return rc == 0 ? pid : -rc;
}

std::optional<pid_t> read_pid_file(const std::string& pipe) {
  std::ifstream file(pipe + "/" + kPidFileName);
  long pid = 0;
  if (!(file >> pid) || pid <= 0 || pid > INT32_MAX) return std::nullopt;
  return static_cast<pid_t>(pid);
}

// Waits up to `ms` for a child to exit; its status, or nullopt (still running).
std::optional<int> wait_child(pid_t pid, int ms) {
  for (int waited = 0;; waited += 10) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (waited >= ms) return std::nullopt;
    ::usleep(10'000);
  }
}

}  // namespace

bool is_control_daemon(pid_t pid, const std::string& control) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string argv0;
  if (!std::getline(file, argv0, '\0')) return false;
  return base_name(argv0) == base_name(control);
}

MpsDaemon::MpsDaemon(EventLoop& loop, MpsDaemonOptions options)
    : loop_(loop), options_(std::move(options)) {
  const std::filesystem::path base = std::filesystem::path(options_.run_dir) / paths::kMpsDirName;
  pipe_dir_ = (base / "pipe").string();
  log_dir_ = (base / "log").string();
}

MpsDaemon::~MpsDaemon() {
  disarm_poll();
  if (pidfd_id_ != 0) loop_.remove(pidfd_id_);
  if (pidfd_ >= 0) ::close(pidfd_);
}

Status MpsDaemon::prepare_directories() {
  const std::filesystem::path base = std::filesystem::path(options_.run_dir) / paths::kMpsDirName;
  for (const std::filesystem::path& dir :
       {base, std::filesystem::path(pipe_dir_), std::filesystem::path(log_dir_)}) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || ::chmod(dir.c_str(), paths::kRunDirMode) != 0)
      return Status::failure("cannot create " + dir.string() + ": " +
                             (ec ? ec.message() : std::string(std::strerror(errno))));
  }
  // The daemon's sockets live in the pipe directory; a Unix socket path has 108 bytes,
  // and a daemon whose path is longer exits without a word.
  if (pipe_dir_.size() + std::strlen("/control_privileged") >= 108)
    return Status::failure("the MPS pipe directory " + pipe_dir_ +
                           " is too long for a Unix socket path (use a shorter --run-dir)");
  return {};
}

void MpsDaemon::start_and_wait(int timeout_ms) {
  start();
  for (int waited = 0; state_ == State::kStarting && waited < timeout_ms; waited += 10) {
    ::usleep(10'000);
    poll_launch();
  }
}

void MpsDaemon::start() {
  if (auto s = prepare_directories(); !s) return fail(s.error());
  if (adopt()) return;
  launch();
}

bool MpsDaemon::adopt() {
  const auto pid = read_pid_file(pipe_dir_);
  if (!pid) return false;
  if (!alive(*pid) || !is_control_daemon(*pid, options_.control)) {
    ::unlink((pipe_dir_ + "/" + kPidFileName).c_str());  // a dead daemon's: not ours to trust
    return false;
  }
  if (auto s = watch(*pid); !s) return false;
  spdlog::info("MPS: adopted the control daemon a previous broker started (pid {}, pipe {})", *pid,
               pipe_dir_);
  return true;
}

void MpsDaemon::launch() {
  const std::string output = log_dir_ + "/" + kLauncherLog;
  const pid_t pid = spawn({options_.control, "-d"}, pipe_dir_, log_dir_, output, -1);
  if (pid < 0)
    return fail("cannot run " + options_.control + ": " + std::strerror(static_cast<int>(-pid)));
  if (started_once_) ++restarts_;
  started_once_ = true;
  launcher_ = pid;
  launched_at_ = monotonic_ns();
  set_state(State::kStarting);
  arm_poll();
}

std::string MpsDaemon::launcher_output() const {
  std::ifstream file(log_dir_ + "/" + kLauncherLog);
  std::string line, last;
  while (std::getline(file, line))
    if (!line.empty()) last = line;
  return last.empty() ? "no output" : last.substr(0, 300);
}

void MpsDaemon::poll_launch() {
  const int64_t now = monotonic_ns();
  if (state_ == State::kBackingOff) {
    if (now >= retry_at_) start();
    return;
  }
  if (state_ != State::kStarting) return disarm_poll();
  if (launcher_ > 0) {
    int status = 0;
    if (::waitpid(launcher_, &status, WNOHANG) == launcher_) {
      launcher_ = 0;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return fail(options_.control + " -d failed (" +
                    (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                       : std::string("killed by a signal")) +
                    "): " + launcher_output());
    }
  }
  if (const auto pid = read_pid_file(pipe_dir_); pid && alive(*pid)) {
    if (auto s = watch(*pid); !s) return fail(s.error());
    spdlog::info("MPS: control daemon running (pid {}, pipe {}, log {})", *pid, pipe_dir_,
                 log_dir_);
    return;
  }
  if (now - launched_at_ > kStartTimeoutNs)
    fail("no " + std::string(kPidFileName) + " in " + pipe_dir_ + " " +
         seconds_text(kStartTimeoutNs) + " after starting " + options_.control);
}

Status MpsDaemon::watch(pid_t pid) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0)
    return Status::failure("cannot watch the MPS control daemon (pid " + std::to_string(pid) +
                           "): " + std::strerror(errno));
  const EventLoop::Id id = loop_.add(fd, EPOLLIN, [this](uint32_t) { on_daemon_exit(); });
  if (id == 0) {
    ::close(fd);
    return Status::failure("cannot watch the MPS control daemon's pidfd");
  }
  pidfd_ = fd;
  pidfd_id_ = id;
  pid_ = pid;
  set_state(State::kRunning);
  running_since_ = monotonic_ns();
  failures_ = 0;
  error_.clear();
  disarm_poll();
  return {};
}

void MpsDaemon::on_daemon_exit() {
  loop_.remove(pidfd_id_);
  pidfd_id_ = 0;
  ::close(pidfd_);
  pidfd_ = -1;
  ::waitpid(pid_, nullptr, WNOHANG);  // ours to reap when the broker is its reaper (pid 1)
  const int64_t now = monotonic_ns();
  if (now - running_since_ >= kStableUptimeNs) backoff_ns_ = 0;
  backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(backoff_ns_ * 2, kMaxBackoffNs);
  spdlog::warn(
      "MPS: the control daemon (pid {}) exited; restarting it in {} (new processes "
      "time-slice meanwhile)",
      pid_, seconds_text(backoff_ns_));
  error_ = "the control daemon (pid " + std::to_string(pid_) + ") exited";
  pid_ = 0;
  set_state(State::kBackingOff);
  retry_at_ = now + backoff_ns_;
  arm_poll();
}

void MpsDaemon::fail(const std::string& why) {
  if (launcher_ > 0) {
    ::kill(launcher_, SIGKILL);
    ::waitpid(launcher_, nullptr, 0);
    launcher_ = 0;
  }
  error_ = why;
  ++failures_;
  backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(backoff_ns_ * 2, kMaxBackoffNs);
  if (failures_ == 1)
    spdlog::error("MPS: {}; the GPUs are time-sliced until the daemon starts (retrying in {})", why,
                  seconds_text(backoff_ns_));
  else
    spdlog::warn("MPS: {} (attempt {}, retrying in {})", why, failures_, seconds_text(backoff_ns_));
  set_state(State::kBackingOff);
  retry_at_ = monotonic_ns() + backoff_ns_;
  arm_poll();
}

void MpsDaemon::set_state(State state) {
  const bool was_running = running();
  state_ = state;
  if (was_running != running() && on_change_) on_change_(running());
}

void MpsDaemon::forget_dead_clients() {
  for (auto it = clients_.begin(); it != clients_.end();) {
    const auto start = process_start_time(it->first);
    it = !start || *start != it->second.start_time ? clients_.erase(it) : std::next(it);
  }
}

std::optional<std::string> MpsDaemon::admit_client(pid_t pid, uid_t uid) {
  if (!running())
    return "the MPS control daemon is not running" +
           (error_.empty() ? std::string() : " (" + error_ + ")");
  forget_dead_clients();
  for (const auto& [other, client] : clients_) {
    if (client.uid == uid || other == pid) continue;
    return "the MPS server serves uid " + std::to_string(client.uid) + " (pid " +
           std::to_string(other) + " and maybe others); a client of uid " + std::to_string(uid) +
           " would wait in cuInit until they have all exited";
  }
  const auto start = process_start_time(pid);
  if (start) clients_[pid] = Client{uid, *start};
  return std::nullopt;
}

void MpsDaemon::adopt_client(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    long uid = -1;
    const auto start = process_start_time(pid);
    if (fields >> uid && uid >= 0 && start) clients_[pid] = Client{static_cast<uid_t>(uid), *start};
    return;
  }
}

void MpsDaemon::client_exited(pid_t pid) {
  clients_.erase(pid);
}

void MpsDaemon::arm_poll() {
  if (poll_id_ != 0) return;
  poll_id_ =
      loop_.add_timer(std::chrono::milliseconds(kPollNs / 1'000'000), [this] { poll_launch(); });
}

void MpsDaemon::disarm_poll() {
  if (poll_id_ == 0) return;
  loop_.remove(poll_id_);
  poll_id_ = 0;
}

void MpsDaemon::shutdown(unsigned clients_alive) {
  disarm_poll();
  if (launcher_ > 0) {
    ::kill(launcher_, SIGKILL);
    ::waitpid(launcher_, nullptr, 0);
    launcher_ = 0;
  }
  if (state_ != State::kRunning) return;
  if (clients_alive > 0) {
    spdlog::info(
        "MPS: leaving the control daemon (pid {}) running: {} tenant process(es) may "
        "be its clients; the next broker adopts it",
        pid_, clients_alive);
    return;
  }
  int input[2];
  if (::pipe2(input, O_CLOEXEC) != 0) return;
  const pid_t quitter =
      spawn({options_.control}, pipe_dir_, log_dir_, log_dir_ + "/broker-quit.log", input[0]);
  ::close(input[0]);
  if (quitter > 0) (void)::write(input[1], "quit\n", 5);
  ::close(input[1]);
  if (quitter > 0 && !wait_child(quitter, kShutdownWaitMs / 2)) ::kill(quitter, SIGKILL);
  pollfd entry{pidfd_, POLLIN, 0};
  const bool exited = quitter > 0 && ::poll(&entry, 1, kShutdownWaitMs / 2) == 1;
  ::waitpid(pid_, nullptr, WNOHANG);
  if (exited)
    spdlog::info("MPS: the control daemon (pid {}) quit", pid_);
  else
    spdlog::warn("MPS: the control daemon (pid {}) did not quit within {} ms", pid_,
                 kShutdownWaitMs);
}

nlohmann::json MpsDaemon::status_json() const {
  const char* state = state_ == State::kRunning    ? "running"
                      : state_ == State::kStarting ? "starting"
                                                   : "failed";
  nlohmann::json s = {{"mode", "mps"},         {"state", state},
                      {"restarts", restarts_}, {"pipe_dir", pipe_dir_},
                      {"log_dir", log_dir_},   {"control", options_.control}};
  if (state_ == State::kRunning) s["pid"] = pid_;
  if (state_ != State::kRunning && !error_.empty()) s["error"] = error_;
  return s;
}

}  // namespace fracgpu::broker
