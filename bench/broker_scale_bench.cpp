// fracgpu_broker_scale_bench: a real fracgpu-broker at node scale (default 1,000 tenants on
// the simulated GPU and NVML), measured from outside. Prints one JSON object:
//   idle_cpu_percent          broker CPU (utime + stime) over --seconds with no process
//   idle_cpu_busy_percent     the same with --exit-processes registered, doing nothing
//   status_ms / status_cpu_ms `fracgpu status` (the CLI binary): wall time and the CPU of
//                             the CLI plus the broker's CPU spent answering it (median of 5)
//   register_ms               --register processes registering at once in one tenant, from
//                             the first fork to the last reply
//   exit_admin_p50/p99/max_ms the admin socket's latency (op "gpus", one client in a loop)
//                             while --exit-processes registered processes spread over the
//                             tenants are killed at once; exit_drain_ms: until the broker
//                             logged every death
// Tenants are written to tenants.json before the broker starts (as a restarted broker
// finds them): creating 1,000 one by one rewrites the file 1,000 times.
//   fracgpu_broker_scale_bench [--tenants N] [--seconds S] [--register K] [--exit-processes M]
//                              [--broker PATH]
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/admin_client.h"
#include "client/broker_launcher.h"
#include "core/state_store.h"
#include "core/tenant_spec.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int tenants = 1000;
  int seconds = 10;
  int register_count = 256;
  int exit_processes = 2000;
  std::string broker = FRACGPU_BROKER;  // another build of the broker, to compare
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// utime + stime of `pid`, seconds.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// A child that registers on `socket` (as the shim does, protocol 2), says so on `ready`
// and then waits to be killed.
pid_t spawn_registered(const std::string& socket, int ready) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
  char ok = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const char request[] = "{\"op\":\"register\",\"protocol\":2}\n";
    if (::write(fd, request, sizeof request - 1) == sizeof request - 1) {
      char reply[4096];
      const ssize_t n = ::recv(fd, reply, sizeof reply, 0);  // the descriptor is dropped
      ok = n > 0 &&
           std::string(reply, static_cast<std::size_t>(n)).find("\"ok\":true") != std::string::npos;
    }
  }
  if (::write(ready, &ok, 1) != 1) ::_exit(1);
  for (;;) ::pause();
}

// Waits for `count` children's bytes on `ready`; the number that registered.
int await_registered(int ready, int count) {
  int ok = 0;
  for (int i = 0; i < count; ++i) {
    char c = 0;
    if (::read(ready, &c, 1) != 1) break;
    ok += c != 0;
  }
  return ok;
}

void kill_all(std::vector<pid_t>& children) {
  for (pid_t pid : children) ::kill(pid, SIGKILL);
  for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
  children.clear();
}

std::size_t count_in_file(const std::filesystem::path& file, const std::string& needle) {
  std::ifstream in(file);
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) n += line.find(needle) != std::string::npos;
  return n;
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {
    char dir_template[] = "/tmp/fracgpu-scale-bench-XXXXXX";
    dir_ = ::mkdtemp(dir_template);
  }
  ~Bench() {
    kill_all(children_);
    broker_.kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  bool start() {
    std::vector<fracgpu::broker::TenantSpec> specs(o_.tenants);
    std::vector<const fracgpu::broker::TenantSpec*> list;
    for (int i = 0; i < o_.tenants; ++i) {
      specs[i].name = "t" + std::to_string(i);
      specs[i].devices = {fracgpu::broker::DeviceSpec{0, 1ull << 30, 0, 100, 0,
                                                      fracgpu::PriorityClass::kNormal, ""}};
      specs[i].owners = {static_cast<uint32_t>(::getuid())};
      list.push_back(&specs[i]);
    }
    std::filesystem::create_directories(dir_ / "state");
    if (auto s = fracgpu::broker::StateStore(dir_ / "state").save(list); !s)
      return std::fprintf(stderr, "state: %s\n", s.error().c_str()), false;
    env_ = fracgpu::client::current_environment();
    env_["FAKECUDA_SHM_NAME"] = "/fracgpu-scale-bench-" + std::to_string(::getpid());
    env_["FAKECUDA_MEMORY"] = "1024GiB";
    env_["FRACGPU_RUN_DIR"] = (dir_ / "run").string();
    fracgpu::client::BrokerLaunch launch;
    launch.program = {o_.broker};
    launch.run_dir = dir_ / "run";
    launch.state_dir = dir_ / "state";
    launch.args = {"--driver",    FRACGPU_FAKECUDA_DIR "/libcuda.so.1",
                   "--nvml",      FRACGPU_FAKENVML_DIR "/libnvidia-ml.so.1",
                   "--log-level", "info"};
    launch.environment = env_;
    launch.log_file = log_ = dir_ / "broker.log";
    launch.ready_timeout = std::chrono::seconds(120);
    if (auto s = broker_.start(launch); !s)
      return std::fprintf(stderr, "broker: %s\n", s.error().c_str()), false;
    auto admin = fracgpu::client::AdminClient::connect(dir_ / "run");
    if (!admin) return std::fprintf(stderr, "%s\n", admin.error().c_str()), false;
    auto tenants = admin->call({{"op", "list"}});
    if (!tenants) return std::fprintf(stderr, "list: %s\n", tenants.error().c_str()), false;
    for (const auto& t : (*tenants)["tenants"]) sockets_.push_back(t.value("socket", ""));
    return static_cast<int>(sockets_.size()) == o_.tenants;
  }

  double idle_cpu_percent() {
    std::this_thread::sleep_for(std::chrono::seconds(1));  // settle
    const double cpu0 = cpu_seconds(broker_.pid());
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(o_.seconds));
    return 100.0 * (cpu_seconds(broker_.pid()) - cpu0) / (ms_since(t0) / 1000.0);
  }

  // `fracgpu status`: median wall and CPU (CLI + broker) of 5 runs.
  std::pair<double, double> status() {
    std::vector<double> wall, cpu;
    for (int i = 0; i < 5; ++i) {
      const double broker0 = cpu_seconds(broker_.pid());
      const auto t0 = Clock::now();
      const pid_t pid = ::fork();
      if (pid == 0) {
        for (const auto& [k, v] : env_) ::setenv(k.c_str(), v.c_str(), 1);
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::execl(FRACGPU_CLI, FRACGPU_CLI, "status", nullptr);
        ::_exit(127);
      }
      int status = 0;
      rusage usage{};
      ::wait4(pid, &status, 0, &usage);
      wall.push_back(ms_since(t0));
      const double cli = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
                         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
      cpu.push_back(cli + 1e3 * (cpu_seconds(broker_.pid()) - broker0));
    }
    return {percentile(wall, 0.5), percentile(cpu, 0.5)};
  }

  double register_ms() {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) return -1;
    const auto t0 = Clock::now();
    for (int i = 0; i < o_.register_count; ++i)
      children_.push_back(spawn_registered(sockets_.at(0), pipe_fds[1]));
    const int ok = await_registered(pipe_fds[0], o_.register_count);
    const double ms = ms_since(t0);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    kill_all(children_);
    if (ok != o_.register_count) std::fprintf(stderr, "only %d registered\n", ok);
    return ms;
  }

  bool register_spread() {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) return false;
    for (int i = 0; i < o_.exit_processes; ++i)
      children_.push_back(spawn_registered(sockets_.at(i % sockets_.size()), pipe_fds[1]));
    const int ok = await_registered(pipe_fds[0], o_.exit_processes);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    if (ok != o_.exit_processes) std::fprintf(stderr, "only %d registered\n", ok);
    return ok == o_.exit_processes;
  }

  struct ExitFigures {
    double p50 = 0, p99 = 0, max = 0, drain_ms = 0;
    std::size_t calls = 0;
  };
  ExitFigures mass_exit() {
    const std::string needle = "exited; memory reclaimed";
    const std::size_t deaths0 = count_in_file(log_, needle);
    const std::size_t expected = deaths0 + children_.size();
    std::atomic<bool> stop{false};
    std::vector<double> latencies;
    std::thread pinger([&] {
      auto admin = fracgpu::client::AdminClient::connect(dir_ / "run");
      if (!admin) return;
      while (!stop.load()) {
        const auto t0 = Clock::now();
        if (!admin->call({{"op", "gpus"}})) break;
        latencies.push_back(ms_since(t0));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::size_t before = latencies.size();
    const auto t0 = Clock::now();
    for (pid_t pid : children_) ::kill(pid, SIGKILL);
    ExitFigures f;
    while (count_in_file(log_, needle) < expected && ms_since(t0) < 60000)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    f.drain_ms = ms_since(t0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
    pinger.join();
    for (pid_t pid : children_) ::waitpid(pid, nullptr, 0);
    children_.clear();
    std::vector<double> during(latencies.begin() + static_cast<std::ptrdiff_t>(before),
                               latencies.end());
    f.calls = during.size();
    f.p50 = percentile(during, 0.5);
    f.p99 = percentile(during, 0.99);
    f.max = during.empty() ? 0 : *std::max_element(during.begin(), during.end());
    return f;
  }

 private:
  Options o_;
  std::filesystem::path dir_, log_;
  fracgpu::client::Environment env_;
  fracgpu::client::BrokerProcess broker_;
  std::vector<std::string> sockets_;
  std::vector<pid_t> children_;
};

int run(const Options& o) {
  Bench bench(o);
  if (!bench.start()) return 1;
  const double idle = bench.idle_cpu_percent();
  const auto [status_ms, status_cpu_ms] = bench.status();
  const double register_ms = bench.register_ms();
  if (!bench.register_spread()) return 1;
  const double idle_busy = bench.idle_cpu_percent();
  const auto exit = bench.mass_exit();
  std::printf(
      "{\"tenants\":%d,\"idle_cpu_percent\":%.3f,\"idle_cpu_busy_percent\":%.3f,"
      "\"status_ms\":%.1f,\"status_cpu_ms\":%.1f,\"register_processes\":%d,"
      "\"register_ms\":%.1f,\"exit_processes\":%d,\"exit_admin_calls\":%zu,"
      "\"exit_admin_p50_ms\":%.2f,\"exit_admin_p99_ms\":%.2f,\"exit_admin_max_ms\":%.2f,"
      "\"exit_drain_ms\":%.1f}\n",
      o.tenants, idle, idle_busy, status_ms, status_cpu_ms, o.register_count, register_ms,
      o.exit_processes, exit.calls, exit.p50, exit.p99, exit.max, exit.drain_ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--broker")
      o.broker = argv[i + 1];
    else if (flag == "--tenants")
      o.tenants = value;
    else if (flag == "--seconds")
      o.seconds = value;
    else if (flag == "--register")
      o.register_count = value;
    else if (flag == "--exit-processes")
      o.exit_processes = value;
    else
      return std::fprintf(stderr, "unknown flag %s\n", argv[i]), 2;
  }
  rlimit lim{};  // thousands of children and their sockets
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  return run(o);
}
