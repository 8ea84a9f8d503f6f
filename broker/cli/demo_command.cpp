// `fracgpu demo`: a private broker over fracgpu's simulated GPU (16 GiB), three tenants
// whose caps add up to more than the GPU, and real processes (the test workload
// fracgpu-alloc-client, with the shim preloaded) that fill their slices. It shows that
// each process sees its cap as the GPU, that guarantees hold under overcommit, and that
// memory a tenant gives back becomes available to others at once. Everything it uses
// lives in the build tree next to the fracgpu binary.
#include "demo_command.h"

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
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "command_runner.h"
#include "private_broker.h"
#include "run_command.h"
#include "status_command.h"

namespace fracgpu::cli {
namespace {

namespace fs = std::filesystem;

struct DemoPaths {
  fs::path self, fake_driver, workload, shim;
};

bool locate(DemoPaths* paths, std::string* problem) {
  std::error_code ec;
  paths->self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path bin = paths->self.parent_path();
  paths->fake_driver = bin / ".." / "fakecuda" / "libcuda.so.1";
  paths->workload = bin / "fracgpu-alloc-client";
  auto shim = locate_shim();
  if (!shim) {
    *problem = shim.error();
    return false;
  }
  paths->shim = *shim;
  for (const fs::path& p : {paths->fake_driver, paths->workload}) {
    if (!fs::exists(p)) {
      *problem = "the demo runs on fracgpu's simulated GPU from a build tree; " + p.string() + " is missing";
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
                        const std::vector<std::string>& args) {
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
    setenv("FRACGPU_SOCKET", (run_dir / "tenants" / tenant / "broker.sock").c_str(), 1);
    std::vector<std::string> argv = {paths.workload.string()};
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
double fill(const DemoPaths& paths, const fs::path& run_dir, const std::string& tenant, Workload* keep) {
  Workload w = start_workload(paths, run_dir, tenant, {"fill", "--chunk", "268435456", "--hold", keep ? "1" : "0"});
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

void say(const char* text) { std::printf("%s\n", text), std::fflush(stdout); }

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
  PrivateBroker broker;
  if (auto started = broker.start(); !started) {
    std::fprintf(stderr, "fracgpu demo: %s\n", started.error().c_str());
    return kExitFailure;
  }
  const fs::path run_dir = broker.run_dir();
  say("fracgpu demo: a simulated 16 GiB GPU shared by three tenants whose caps add up to 20 GiB.\n"
      "  training   cap 10 GiB, guaranteed 8 GiB\n"
      "  inference  cap  6 GiB, guaranteed 4 GiB\n"
      "  notebook   cap  4 GiB, guaranteed 2 GiB   (guarantees: 14 GiB; 2 GiB can be lent)\n");
  cli(paths, run_dir, {"tenant", "create", "training", "--memory", "10GiB", "--memory-request", "8GiB"});
  cli(paths, run_dir, {"tenant", "create", "inference", "--memory", "6GiB", "--memory-request", "4GiB"});
  cli(paths, run_dir, {"tenant", "create", "notebook", "--memory", "4GiB", "--memory-request", "2GiB"});

  say("1. Each tenant's process asks CUDA how big its GPU is (cuMemGetInfo):");
  for (const char* tenant : {"training", "inference", "notebook"}) {
    Workload w = start_workload(paths, run_dir, tenant, {"info"});
    std::printf("   %-10s sees a %.0f GiB GPU\n", tenant, gib(first_line(w), "total"));
    waitpid(w.pid, nullptr, 0);
    close(w.out);
  }
  Workload training, inference;
  say("\n2. training allocates until refused, and keeps it:");
  std::printf("   training   holds %.1f GiB — its 8 GiB guarantee plus the 2 GiB no one is guaranteed\n",
              fill(paths, run_dir, "training", &training));
  say("\n3. inference does the same while training holds its memory:");
  std::printf("   inference  holds %.1f GiB — exactly its guarantee: the lendable memory is taken\n",
              fill(paths, run_dir, "inference", &inference));
  say("\n4. notebook fills up:");
  std::printf("   notebook   got   %.1f GiB — its guarantee, never less\n",
              fill(paths, run_dir, "notebook", nullptr));
  say("\n   fracgpu status:");
  show_status(run_dir.string(), false);
  say("\n5. training exits (its memory returns at once); notebook tries again:");
  stop(training);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the broker takes back training's loan
  std::printf("   notebook   got   %.1f GiB — its cap: guarantee plus the memory training no longer borrows\n",
              fill(paths, run_dir, "notebook", nullptr));
  stop(inference);
  broker.stop();
  shm_unlink(shm.c_str());
  say("\nOn a machine with an NVIDIA GPU: fracgpu run --memory 8GiB -- python train.py");
  return 0;
}

}  // namespace fracgpu::cli
