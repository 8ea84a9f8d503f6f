// `fracgpu demo`: a private broker over fracgpu's simulated GPU (16 GiB), three tenants
// whose caps add up to more than the GPU, and real processes (the test workloads
// fracgpu-alloc-client and fracgpu-spin-client, with the shim preloaded).
//  - Memory (~3 s): each process sees its cap as the GPU, guarantees hold under
//    overcommit, and memory a tenant gives back becomes available to others at once.
//  - Compute (~22 s): the tenants get weights 60/30/10 (`fracgpu set`), each runs a
//    process launching 1 ms kernels nonstop, and the broker's measured shares are
//    printed once a second: first all three, then with notebook stopped (its time is
//    lent to the others at once), then after `fracgpu set inference --compute 90`.
// Everything it uses lives in the build tree next to the fracgpu binary (the simulated
// GPU, built from fakecuda/, in <build>/fakecuda). Without the spin client the compute
// part is skipped with a one-line reason (the memory part still counts as the demo).
#include "cli/demo_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/command_runner.h"
#include "cli/run_command.h"
#include "cli/status_command.h"
#include "client/admin_client.h"
#include "client/private_broker.h"
#include "client/run_paths.h"

namespace fracgpu::cli {

using client::AdminClient;

namespace {

namespace fs = std::filesystem;

struct DemoPaths {
  fs::path self, fake_driver, workload, spin, shim;
};

bool locate(DemoPaths* paths, std::string* problem) {
  std::error_code ec;
  paths->self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path bin = paths->self.parent_path();
  paths->fake_driver = bin / ".." / "fakecuda" / "libcuda.so.1";
  paths->workload = bin / "fracgpu-alloc-client";
  paths->spin = bin / "fracgpu-spin-client";
  auto shim = locate_shim();
  if (!shim) {
    *problem = shim.error();
    return false;
  }
  paths->shim = *shim;
  for (const fs::path& p : {paths->fake_driver, paths->workload}) {
    if (!fs::exists(p)) {
      *problem = "the demo runs on fracgpu's simulated GPU from a build tree; " + p.string() +
                 " is missing";
      return false;
    }
  }
  return true;
}

// A workload process of a tenant, started in the background; its first stdout line
// (one JSON object) is read back.
struct Workload {
  pid_t pid = -1;
  int out = -1;
};

Workload start_workload(const DemoPaths& paths, const fs::path& run_dir, const std::string& tenant,
                        const std::vector<std::string>& args, const fs::path& program = {}) {
  int pipe_fds[2];
  Workload w;
  if (pipe(pipe_fds) != 0) return w;
  w.pid = fork();
  if (w.pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    close(pipe_fds[0]);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDERR_FILENO);  // the shim's "memory cap" lines would clutter the demo
    setenv("LD_PRELOAD", paths.shim.c_str(), 1);
    setenv("FRACGPU_SOCKET",
           client::tenant_socket_path(run_dir, tenant, /*has_owners=*/false).c_str(), 1);
    std::vector<std::string> argv = {program.empty() ? paths.workload.string() : program.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c_argv;
    for (auto& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    execv(c_argv[0], c_argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  w.out = pipe_fds[0];
  return w;
}

nlohmann::json first_line(const Workload& w) {
  std::string line;
  char c;
  while (read(w.out, &c, 1) == 1 && c != '\n') line += c;
  return nlohmann::json::parse(line, nullptr, false);
}

void stop(Workload& w) {
  if (w.pid > 0) {
    kill(w.pid, SIGKILL);
    waitpid(w.pid, nullptr, 0);
  }
  if (w.out >= 0) close(w.out);
  w = Workload{};
}

double gib(const nlohmann::json& doc, const char* key) {
  return doc.contains(key) && doc[key].is_number() ? doc[key].get<double>() / (1u << 30) : -1.0;
}

int cli(const DemoPaths& paths, const fs::path& run_dir, std::vector<std::string> args) {
  args.insert(args.begin(), {paths.self.string(), "--run-dir", run_dir.string()});
  return run_command(args, {}).exit_status;
}

// What the workload reports after filling its slice (and holding it when asked).
double fill(const DemoPaths& paths, const fs::path& run_dir, const std::string& tenant,
            Workload* keep) {
  Workload w = start_workload(paths, run_dir, tenant,
                              {"fill", "--chunk", "268435456", "--hold", keep ? "1" : "0"});
  nlohmann::json result = first_line(w);
  const double got = gib(result, "allocated") + 0.5;  // + the CUDA context's own 512 MiB
  if (keep != nullptr) {
    *keep = w;
  } else {
    waitpid(w.pid, nullptr, 0);
    close(w.out);
  }
  return got;
}

void say(const char* text) {
  std::printf("%s\n", text), std::fflush(stdout);
}

// A `fracgpu` command whose own output is not shown (the demo prints what it ran).
int quiet_cli(const DemoPaths& paths, const fs::path& run_dir, std::vector<std::string> args) {
  std::fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  const int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (saved < 0 || devnull < 0) return cli(paths, run_dir, std::move(args));
  dup2(devnull, STDOUT_FILENO);
  close(devnull);
  const int status = cli(paths, run_dir, std::move(args));
  dup2(saved, STDOUT_FILENO);
  close(saved);
  return status;
}

// ---- compute part ----

const std::vector<std::string> kComputeTenants = {"training", "inference", "notebook"};

// Each tenant's compute_measured_share on GPU 0 (absent: the broker does not measure).
std::map<std::string, double> measured_shares(const fs::path& run_dir) {
  std::map<std::string, double> shares;
  auto client = AdminClient::connect(run_dir, std::chrono::seconds(5));
  if (!client) return shares;
  auto list = client->call({{"op", "list"}});
  if (!list) return shares;
  for (const auto& t : list->value("tenants", nlohmann::json::array())) {
    for (const auto& d : t.value("devices", nlohmann::json::array())) {
      if (d.value("gpu", 99u) == 0 && d.contains("compute_measured_share") &&
          d["compute_measured_share"].is_number()) {
        shares[t.value("name", "")] = d["compute_measured_share"].get<double>();
      }
    }
  }
  return shares;
}

// True when every demo tenant has a registered process.
bool all_registered(const fs::path& run_dir) {
  auto client = AdminClient::connect(run_dir, std::chrono::seconds(5));
  if (!client) return false;
  auto list = client->call({{"op", "list"}});
  if (!list) return false;
  std::size_t running = 0;
  for (const auto& t : list->value("tenants", nlohmann::json::array())) {
    if (!t.value("processes", nlohmann::json::array()).empty()) ++running;
  }
  return running >= kComputeTenants.size();
}

// True while the spin process runs; says so once when it has ended early.
bool still_running(Workload& w, const std::string& tenant) {
  if (w.pid <= 0) return false;
  int status = 0;
  if (waitpid(w.pid, &status, WNOHANG) != w.pid) return true;
  std::printf("   (%s's process ended early: %s %d)\n", tenant.c_str(),
              WIFEXITED(status) ? "exit status" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  close(w.out);
  w = Workload{};
  return false;
}

// SIGTERM (the spin client finishes its launches in flight and exits), SIGKILL after 3 s.
void finish(Workload& w) {
  if (w.pid <= 0) return;
  kill(w.pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (waitpid(w.pid, nullptr, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(w.pid, SIGKILL);
      waitpid(w.pid, nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  close(w.out);
  w = Workload{};
}

// One line per second for `seconds` seconds: every tenant's measured share of the GPU.
// Returns false when a process that should run has ended.
bool watch(const fs::path& run_dir, std::map<std::string, Workload>& workers, int seconds,
           int* clock) {
  bool all_ran = true;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; i <= seconds; ++i) {
    std::this_thread::sleep_until(start + std::chrono::seconds(i));
    const auto shares = measured_shares(run_dir);
    std::string line;
    char buf[96];
    std::snprintf(buf, sizeof buf, "   %3ds ", ++*clock);
    line += buf;
    for (const std::string& tenant : kComputeTenants) {
      auto it = shares.find(tenant);
      if (it == shares.end()) {
        std::snprintf(buf, sizeof buf, "  %-9s    -  ", tenant.c_str());
      } else {
        std::snprintf(buf, sizeof buf, "  %-9s %5.1f%%", tenant.c_str(), it->second * 100.0);
      }
      line += buf;
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    for (auto& [tenant, w] : workers) {
      if (w.pid > 0 && !still_running(w, tenant)) all_ran = false;
    }
  }
  return all_ran;
}

void skip_compute(const std::string& why) {
  std::printf("\n6. Compute shares: skipped — %s\n", why.c_str());
  std::fflush(stdout);
}

// Returns the demo's exit status: 0 when it ran or was skipped for a stated reason.
int compute_part(const DemoPaths& paths, const fs::path& run_dir) {
  if (!fs::exists(paths.spin)) {
    skip_compute(paths.spin.string() +
                 " is missing (build it: ninja -C build fracgpu_spin_client)");
    return 0;
  }
  {
    auto client = AdminClient::connect(run_dir, std::chrono::seconds(5));
    auto list =
        client ? client->call({{"op", "list"}}) : Result<nlohmann::json>::failure(client.error());
    if (!list) {
      skip_compute("the broker does not answer: " + list.error());
      return kExitFailure;
    }
    const auto& tenants = (*list)["tenants"];
    if (tenants.empty() || !tenants[0]["devices"][0].contains("compute_measured_share")) {
      skip_compute("the broker reports no measured compute share for the demo's tenants");
      return kExitFailure;
    }
  }
  say("\n6. Compute: each tenant runs a process that launches 1 ms kernels nonstop. Weights:");
  const std::vector<std::pair<std::string, std::string>> weights = {
      {"training", "60"}, {"inference", "30"}, {"notebook", "10"}};
  for (const auto& [tenant, weight] : weights) {
    std::printf("   $ fracgpu set %-9s --compute %s\n", tenant.c_str(), weight.c_str());
    if (quiet_cli(paths, run_dir, {"set", tenant, "--compute", weight}) != 0) {
      std::fprintf(stderr, "fracgpu demo: fracgpu set %s failed\n", tenant.c_str());
      return kExitFailure;
    }
  }
  std::map<std::string, Workload> workers;
  for (const std::string& tenant : kComputeTenants) {
    workers[tenant] = start_workload(paths, run_dir, tenant,
                                     {"--kernel-us", "1000", "--seconds", "120"}, paths.spin);
  }
  auto stop_all = [&] {
    for (auto& [tenant, w] : workers) finish(w);
  };
  // Until every process has registered and run for a full measurement window (~2 s).
  const auto warm = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < warm && !all_registered(run_dir)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  int clock = 0;
  say("   Measured share of the GPU's time (the broker's last ~2 s), once a second —\n"
      "   all three busy: expect about 60% / 30% / 10%");
  bool ok = watch(run_dir, workers, 7, &clock);
  say("\n   notebook stops: its time is lent to the others at once — expect about 67% / 33% / 0%");
  finish(workers["notebook"]);
  ok = watch(run_dir, workers, 5, &clock) && ok;
  say("\n   inference's weight is raised while everything runs:\n   $ fracgpu set inference "
      "--compute 90");
  if (cli(paths, run_dir, {"set", "inference", "--compute", "90"}) != 0) {
    stop_all();
    std::fprintf(stderr, "fracgpu demo: fracgpu set inference failed\n");
    return kExitFailure;
  }
  say("   expect about 40% / 60% within a second or two: 60:90 between the two busy tenants\n"
      "   (SHARE above also counts notebook's weight; an idle tenant's time is lent)");
  ok = watch(run_dir, workers, 6, &clock) && ok;
  stop_all();
  if (!ok) {
    std::fprintf(stderr, "fracgpu demo: a tenant's kernel loop ended early; see above\n");
    return kExitFailure;
  }
  say("\n   Shares are weights of GPU time actually held; an idle tenant's time goes to the "
      "others;\n"
      "   a ceiling (--compute-limit) caps a tenant even on an idle GPU; --priority high "
      "preempts.");
  return 0;
}

}  // namespace

int run_demo() {
  DemoPaths paths;
  std::string problem;
  if (!locate(&paths, &problem)) {
    std::fprintf(stderr, "fracgpu demo: %s\n", problem.c_str());
    return kExitFailure;
  }
  const std::string shm = "/fracgpu-demo-" + std::to_string(getpid());
  setenv("FAKECUDA_SHM_NAME", shm.c_str(), 1);
  setenv("FAKECUDA_MEMORY", "16GiB", 1);
  setenv("FAKECUDA_CONTEXT_FOOTPRINT", "512MiB", 1);
  setenv("FRACGPU_REAL_DRIVER", paths.fake_driver.c_str(), 1);
  client::PrivateBroker broker;
  if (auto started = broker.start(); !started) {
    std::fprintf(stderr, "fracgpu demo: %s\n", started.error().c_str());
    return kExitFailure;
  }
  const fs::path run_dir = broker.run_dir();
  say("fracgpu demo: a simulated 16 GiB GPU shared by three tenants whose caps add up to 20 GiB.\n"
      "  training   cap 10 GiB, guaranteed 8 GiB\n"
      "  inference  cap  6 GiB, guaranteed 4 GiB\n"
      "  notebook   cap  4 GiB, guaranteed 2 GiB   (guarantees: 14 GiB; 2 GiB can be lent)\n");
  cli(paths, run_dir,
      {"tenant", "create", "training", "--memory", "10GiB", "--memory-request", "8GiB"});
  cli(paths, run_dir,
      {"tenant", "create", "inference", "--memory", "6GiB", "--memory-request", "4GiB"});
  cli(paths, run_dir,
      {"tenant", "create", "notebook", "--memory", "4GiB", "--memory-request", "2GiB"});

  say("1. Each tenant's process asks CUDA how big its GPU is (cuMemGetInfo):");
  for (const char* tenant : {"training", "inference", "notebook"}) {
    Workload w = start_workload(paths, run_dir, tenant, {"info"});
    std::printf("   %-10s sees a %.0f GiB GPU\n", tenant, gib(first_line(w), "total"));
    waitpid(w.pid, nullptr, 0);
    close(w.out);
  }
  Workload training, inference;
  say("\n2. training allocates until refused, and keeps it:");
  std::printf(
      "   training   holds %.1f GiB — its 8 GiB guarantee plus the 2 GiB no one is guaranteed\n",
      fill(paths, run_dir, "training", &training));
  say("\n3. inference does the same while training holds its memory:");
  std::printf(
      "   inference  holds %.1f GiB — exactly its guarantee: the lendable memory is taken\n",
      fill(paths, run_dir, "inference", &inference));
  say("\n4. notebook fills up:");
  std::printf("   notebook   got   %.1f GiB — its guarantee, never less\n",
              fill(paths, run_dir, "notebook", nullptr));
  say("\n   fracgpu status:");
  show_status(run_dir.string(), false);
  say("\n5. training exits (its memory returns at once); notebook tries again:");
  stop(training);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(1500));  // the broker takes back training's loan
  std::printf(
      "   notebook   got   %.1f GiB — its cap: guarantee plus the memory training no longer "
      "borrows\n",
      fill(paths, run_dir, "notebook", nullptr));
  stop(inference);
  const int status = compute_part(paths, run_dir);
  broker.stop();
  shm_unlink(shm.c_str());
  say("\nOn a machine with an NVIDIA GPU: fracgpu run --memory 8GiB --compute 30 -- python "
      "train.py");
  return status;
}

}  // namespace fracgpu::cli
