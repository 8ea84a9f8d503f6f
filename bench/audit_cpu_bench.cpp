// fracgpu_audit_cpu_bench: what the audit backstop (issue 12) costs the broker. Starts a
// broker with N idle tenants (default 100) and measures the broker's CPU time (utime +
// stime of /proc/<pid>/stat) over S seconds (default 10), with the NVML audit on
// (--audit-interval 500) and off (0; the books check runs in both), plus the time the
// broker itself counted in each part (fracgpu_audit_duration_seconds_total). Prints one
// JSON line per run. The shim is not involved: the audit never touches it.
//
//   fracgpu_audit_cpu_bench [--tenants N] [--seconds S] [--nvml PATH] [--driver PATH]
//                           [--busy K]   (K processes holding memory on GPU 0, through the
//                                         shim, in the first K tenants: the audit then has
//                                         processes to attribute each pass)
//                           [--broker PATH] [--shim PATH] [--alloc-client PATH] (a packed copy)
// Defaults use the simulated GPU and NVML of this build (a private simulated device); on a
// GPU machine pass --driver libcuda.so.1 --nvml libnvidia-ml.so.1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/admin_client.h"
#include "client/broker_launcher.h"

namespace {

struct Options {
  int tenants = 100;
  int seconds = 10;
  int busy = 0;
  std::string nvml = FRACGPU_FAKENVML_DIR "/libnvidia-ml.so.1";
  std::string driver = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
  std::string broker = FRACGPU_BROKER;  // the binaries, for a packed copy elsewhere
  std::string shim = FRACGPU_SHIM_PATH;
  std::string alloc_client = FRACGPU_ALLOC_CLIENT;
};

// utime + stime of `pid` in seconds.
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

// The value of a metric line starting with `prefix`, or -1.
double metric(const std::string& text, const std::string& prefix) {
  const auto at = text.find(prefix);
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + prefix.size());
}

std::string http_metrics(int port);

int run(const Options& o, int interval_ms, int port) {
  char dir_template[] = "/tmp/fracgpu-audit-bench-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  fracgpu::client::Environment env = fracgpu::client::current_environment();
  const std::string shm = "/fracgpu-audit-bench-" + std::to_string(::getpid());
  env["FAKECUDA_SHM_NAME"] = shm;
  env["FAKECUDA_MEMORY"] = "128GiB";
  env["FAKECUDA_CONTEXT_FOOTPRINT"] = "64MiB";
  fracgpu::client::BrokerLaunch launch;
  launch.program = {o.broker};
  launch.run_dir = dir + "/run";
  launch.state_dir = dir + "/state";
  launch.args = {"--driver",         o.driver,
                 "--nvml",           o.nvml,
                 "--audit-interval", std::to_string(interval_ms),
                 "--metrics-listen", "127.0.0.1:" + std::to_string(port),
                 "--log-level",      "warn"};
  launch.environment = env;
  launch.log_file = dir + "/broker.log";
  fracgpu::client::BrokerProcess broker;
  if (auto s = broker.start(launch); !s) {
    std::fprintf(stderr, "broker: %s\n", s.error().c_str());
    return 1;
  }
  auto admin = fracgpu::client::AdminClient::connect(launch.run_dir);
  if (!admin) return std::fprintf(stderr, "%s\n", admin.error().c_str()), 1;
  for (int i = 0; i < o.tenants; ++i) {
    auto r = admin->call({{"op", "create"},
                          {"tenant",
                           {{"name", "t" + std::to_string(i)},
                            {"devices", {{{"gpu", 0}, {"memory_limit", 1ull << 30}}}}}}});
    if (!r) return std::fprintf(stderr, "create: %s\n", r.error().c_str()), 1;
  }
  std::vector<pid_t> holders;
  for (int i = 0; i < o.busy && i < o.tenants; ++i) {
    auto t = admin->call({{"op", "list"}});
    const std::string socket = (*t)["tenants"][i].value("socket", "");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("LD_PRELOAD", o.shim.c_str(), 1);
      // A path names the simulated driver; a bare name is the system's, found by the shim.
      if (o.driver.find('/') != std::string::npos)
        ::setenv("FRACGPU_REAL_DRIVER", o.driver.c_str(), 1);
      ::setenv("FRACGPU_SOCKET", socket.c_str(), 1);
      ::setenv("FAKECUDA_SHM_NAME", shm.c_str(), 1);
      ::execl(o.alloc_client.c_str(), o.alloc_client.c_str(), "hold", "--bytes", "67108864",
              nullptr);
      ::_exit(127);
    }
    holders.push_back(pid);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // settle: tenants created, holders in
  const std::string before = http_metrics(port);
  const double cpu0 = cpu_seconds(broker.pid());
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
  const double cpu1 = cpu_seconds(broker.pid());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string after = http_metrics(port);
  auto delta = [&](const std::string& name) { return metric(after, name) - metric(before, name); };
  const double nvml_s = delta("fracgpu_audit_duration_seconds_total{part=\"nvml\"} ");
  const double books_s = delta("fracgpu_audit_duration_seconds_total{part=\"books\"} ");
  const double nvml_n = delta("fracgpu_audit_passes_total{part=\"nvml\"} ");
  const double books_n = delta("fracgpu_audit_passes_total{part=\"books\"} ");
  std::printf(
      "{\"tenants\":%d,\"busy_processes\":%d,\"audit_interval_ms\":%d,\"seconds\":%.2f,"
      "\"broker_cpu_percent\":%.3f,\"nvml_pass_us\":%.1f,\"books_pass_us\":%.1f,"
      "\"nvml_passes\":%.0f,\"books_passes\":%.0f}\n",
      o.tenants, static_cast<int>(holders.size()), interval_ms, wall, 100.0 * (cpu1 - cpu0) / wall,
      nvml_n > 0 ? 1e6 * nvml_s / nvml_n : 0.0, books_n > 0 ? 1e6 * books_s / books_n : 0.0, nvml_n,
      books_n);
  std::fflush(stdout);
  for (pid_t pid : holders) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  broker.kill();
  ::shm_unlink(shm.c_str());
  std::system(("rm -rf " + dir).c_str());
  return 0;
}

std::string http_metrics(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string text;
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buffer[65536];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  }
  ::close(fd);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--tenants")
      o.tenants = std::atoi(value.c_str());
    else if (flag == "--seconds")
      o.seconds = std::atoi(value.c_str());
    else if (flag == "--busy")
      o.busy = std::atoi(value.c_str());
    else if (flag == "--nvml")
      o.nvml = value;
    else if (flag == "--driver")
      o.driver = value;
    else if (flag == "--broker")
      o.broker = value;
    else if (flag == "--shim")
      o.shim = value;
    else if (flag == "--alloc-client")
      o.alloc_client = value;
    else
      return std::fprintf(stderr, "unknown flag %s\n", flag.c_str()), 2;
  }
  const int port = 19400 + ::getpid() % 500;
  if (run(o, 500, port) != 0) return 1;
  return run(o, 0, port + 1);
}
