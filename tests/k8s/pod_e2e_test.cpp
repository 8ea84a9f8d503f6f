// End-to-end "pod" test without a cluster: the fake kubelet asks the real device plugin
// (over the real broker and two simulated 16 GiB GPUs, plugin_fixture.h) for 2 of the 8
// slices of GPU 1, then starts a CUDA program the way a container runtime would from the
// AllocateResponse: fracgpu-test-container-run puts it in a private mount namespace,
// bind-mounts every returned Mount (read-only ones remounted read-only), and the program
// gets exactly the returned Envs plus what any container has — PATH, the simulated
// driver's FAKECUDA_* variables and LD_LIBRARY_PATH to it (standing in for the NVIDIA
// container toolkit injecting libcuda), and CUDA_VISIBLE_DEVICES set from
// NVIDIA_VISIBLE_DEVICES (the toolkit exposes only that GPU; the simulated driver reads
// CUDA_VISIBLE_DEVICES instead). There is no LD_PRELOAD: the shim is loaded only because
// ld.so reads the /etc/ld.so.preload mounted from the response. The host's /etc is never
// written: inside the namespace /etc becomes a tmpfs of symlinks to the real entries (so
// /etc/ld.so.cache stays reachable) plus an empty ld.so.preload to bind over — see
// container_run.cpp — and every test checks that the host's /etc/ld.so.preload is as it
// was. Where no mount namespace can be had, even in a user namespace, the tests skip
// and say why.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "device_plugin/plugin_config.h"
#include "plugin_fixture.h"

namespace fracgpu::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kFootprint =
    64 * kMiB;  // FAKECUDA_CONTEXT_FOOTPRINT and the broker's --context-footprint
constexpr const char* kHostPreload = "/etc/ld.so.preload";

// The helper's probe, run once: exit 0 and the kind of namespace it got ("root", or
// "user" where only an unprivileged user namespace could be had), or exit 77 and why not.
const ProcessResult& namespace_probe() {
  static const ProcessResult probe = run_process({FRACGPU_CONTAINER_RUN, "--probe"},
                                                 clean_environment(), std::chrono::seconds(10));
  return probe;
}

std::optional<std::string> host_preload() {
  if (!std::filesystem::exists(kHostPreload)) return std::nullopt;
  return read_text(kHostPreload);
}

// The last JSON object a fracgpu-alloc-client printed.
nlohmann::json last_json(const std::string& out) {
  const auto at = out.rfind('{');
  return at == std::string::npos ? nlohmann::json()
                                 : nlohmann::json::parse(out.substr(at), nullptr, false);
}

class PodTest : public PluginNodeTest {
 protected:
  PodTest() {
    slices_ = 8;
    shim_host_path_ = FRACGPU_SHIM_PATH;
    preload_host_path_ = dir_.path() + "/fracgpu/ld.so.preload";
  }

  void SetUp() override {
    const ProcessResult& probe = namespace_probe();
    if (probe.exit_code == 77)
      GTEST_SKIP() << "no mount namespace for the container: " << probe.err;
    ASSERT_EQ(probe.exit_code, 0) << "the namespace probe failed: " << probe.out << probe.err;
    RecordProperty("namespace", probe.out.substr(0, probe.out.find('\n')));
    host_preload_before_ = host_preload();
    // What the DaemonSet's installer writes on the host: the shim's path in the container.
    std::filesystem::create_directories(dir_.path() + "/fracgpu");
    std::filesystem::create_directories(dir_.path() + "/scratch");
    std::ofstream(preload_host_path_) << k8s::kContainerShimPath << '\n';
    PluginNodeTest::SetUp();
    if (HasFatalFailure()) return;
    ids_ = slice_ids(gpu1_, {5, 2});
    name_ = k8s::tenant_name_for(gpu1_, {2, 5});
    ASSERT_TRUE(allocate(ids_, response_).ok()) << plugin_->err();
    ASSERT_EQ(response_.container_responses_size(), 1);
    auto gpus = admin_.gpus();
    ASSERT_TRUE(gpus) << gpus.error();
    cap_ = (*gpus)[1].memory_capacity * 2 / 8;  // the plugin's rule: capacity · k / N
    gpu_memory_ = (*gpus)[1].memory_total;
  }

  void TearDown() override {
    if (IsSkipped()) return;
    PluginNodeTest::TearDown();
    EXPECT_EQ(host_preload(), host_preload_before_) << "the host's " << kHostPreload << " changed";
  }

  const v1beta1::ContainerAllocateResponse& container() const {
    return response_.container_responses(0);
  }

  // The runtime's argv: the helper with the response's mounts, then the command.
  std::vector<std::string> in_container(const std::vector<std::string>& command) const {
    std::vector<std::string> argv = {FRACGPU_CONTAINER_RUN, "--scratch", dir_.path() + "/scratch"};
    for (const auto& m : container().mounts()) {
      argv.insert(argv.end(),
                  {"--mount", m.host_path(), m.container_path(), m.read_only() ? "ro" : "rw"});
    }
    argv.push_back("--");
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
  }

  // The container's whole environment (see the banner).
  Environment container_env() const {
    Environment env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
                       {"LD_LIBRARY_PATH", FRACGPU_FAKECUDA_DIR}};
    for (const auto& [key, value] : env_) {
      if (key.rfind("FAKECUDA_", 0) == 0) env[key] = value;
    }
    for (const auto& [key, value] : container().envs()) env[key] = value;
    env["CUDA_VISIBLE_DEVICES"] = container().envs().at("NVIDIA_VISIBLE_DEVICES");
    return env;
  }

  ProcessResult run_in_container(const std::vector<std::string>& command) const {
    return run_process(in_container(command), container_env(), std::chrono::seconds(40));
  }

  // Starts `fracgpu-alloc-client hold` in a container; returns once it holds the memory.
  std::unique_ptr<BackgroundProcess> start_holder(uint64_t bytes, const std::string& tag) {
    auto holder = std::make_unique<BackgroundProcess>(
        in_container({FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(bytes)}),
        container_env(), dir_.path() + "/" + tag);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (holder->out().find("holding") == std::string::npos && holder->running() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_NE(holder->out().find("holding"), std::string::npos) << holder->out() << holder->err();
    return holder;
  }

  std::vector<int> tenant_pids() {
    std::vector<int> pids;
    auto t = tenant(name_);
    if (t.is_null()) return pids;
    for (const auto& p : t["processes"]) pids.push_back(p["pid"].get<int>());
    return pids;
  }

  std::vector<std::string> ids_;  // 2 of GPU 1's 8 slices, in the kubelet's (unsorted) order
  std::string name_;              // the tenant those slices make
  v1beta1::AllocateResponse response_;
  uint64_t cap_ = 0, gpu_memory_ = 0;
  std::optional<std::string> host_preload_before_;
};

// The container sees a GPU of its quota's size (the context's footprint counts against
// it), is refused 1 MiB past it and may fill it exactly, and its process is the tenant's.
TEST_F(PodTest, AContainerOnTwoOfEightSlicesIsCappedAndRunsAsItsTenant) {
  EXPECT_EQ(container().annotations().at("fracgpu.io/tenant"), name_);
  EXPECT_EQ(cap_, 4 * kGiB);  // 2/8 of 16 GiB
  EXPECT_EQ(container_env().count("LD_PRELOAD"), 0u);

  ProcessResult info = run_in_container({FRACGPU_ALLOC_CLIENT, "info"});
  ASSERT_EQ(info.exit_code, 0) << info.out << info.err;
  auto seen = last_json(info.out);
  EXPECT_EQ(seen["total"].get<uint64_t>(), cap_) << info.out;
  EXPECT_EQ(seen["device_total"].get<uint64_t>(), cap_) << info.out;
  EXPECT_EQ(seen["free"].get<uint64_t>(), cap_ - kFootprint) << info.out;

  ProcessResult over = run_in_container(
      {FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(cap_ - kFootprint + kMiB)});
  EXPECT_EQ(over.signal, 0);
  EXPECT_EQ(over.exit_code, 1) << over.out << over.err;
  EXPECT_NE(over.out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << over.out << over.err;

  auto holder = start_holder(cap_ - kFootprint, "holder");
  ASSERT_FALSE(HasFailure());
  auto t = tenant(name_);
  ASSERT_FALSE(t.is_null());
  EXPECT_EQ(tenant_pids(), std::vector<int>{holder->pid()});  // the helper exec'd: same PID
  ASSERT_EQ(t["devices"].size(), 1u);
  const auto& d = t["devices"][0];
  EXPECT_EQ(d["gpu"], 1);
  EXPECT_EQ(d["memory_limit"].get<uint64_t>(), cap_);
  EXPECT_EQ(d["memory_used"].get<uint64_t>(), cap_);  // the allocation plus the context
  EXPECT_EQ(d["compute"], 100 * 2 / 8);
}

// The kubelet allocates the same slices again when a container restarts: the new
// container's process joins the same tenant, and no second tenant appears.
TEST_F(PodTest, ARestartedContainerFindsTheSameTenant) {
  auto first = start_holder(256 * kMiB, "first");
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(tenant_pids(), std::vector<int>{first->pid()});
  first->kill_now(SIGKILL);
  first->wait(std::chrono::seconds(5));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!tenant_pids().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(tenant_pids().empty());

  response_.Clear();
  ASSERT_TRUE(allocate(slice_ids(gpu1_, {2, 5}), response_).ok()) << plugin_->err();
  EXPECT_EQ(container().annotations().at("fracgpu.io/tenant"), name_);
  auto second = start_holder(256 * kMiB, "second");
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(tenant_pids(), std::vector<int>{second->pid()});
  auto listed = admin_.call({{"op", "list"}});
  ASSERT_TRUE(listed) << listed.error();
  EXPECT_EQ((*listed)["tenants"].size(), 1u);
}

// Inside: the response's files at their container paths, the shim mapped without
// LD_PRELOAD, every mount read-only — the tenant's run directory too — and nothing on
// stderr (the shim is silent in a process that never calls CUDA). Writability is asked
// with access(2), which answers EROFS even to root: nothing is written, because were a
// mount missing, a write would land on the host's /etc. Outside, at the same time: a
// host process with the container's environment does not load the shim and sees the
// whole GPU.
TEST_F(PodTest, OnlyProcessesInTheContainerLoadTheShim) {
  const std::string script =
      "cat /etc/ld.so.preload; "
      "test -f /etc/ld.so.cache && echo cache-reachable; "
      "test -S /run/fracgpu/broker.sock && echo socket; "
      "grep -q /usr/local/fracgpu/lib/libfracgpu.so /proc/self/maps && echo shim-loaded; "
      "test -w /etc/ld.so.preload || echo preload-read-only; "
      "test -w /usr/local/fracgpu/lib/libfracgpu.so || echo shim-read-only; "
      "test -w /run/fracgpu || echo run-read-only";
  ProcessResult inside = run_in_container({"/bin/sh", "-c", script});
  EXPECT_EQ(inside.exit_code, 0) << inside.err;
  EXPECT_EQ(inside.out, std::string(k8s::kContainerShimPath) +
                            "\ncache-reachable\nsocket\nshim-loaded\npreload-read-only\nshim-read-"
                            "only\nrun-read-only\n");
  EXPECT_EQ(inside.err, "");

  auto holder = start_holder(256 * kMiB, "holder");
  ASSERT_FALSE(HasFailure());
  ProcessResult host_maps =
      run_process({"/bin/grep", "-c", "libfracgpu", "/proc/self/maps"}, container_env());
  EXPECT_EQ(host_maps.out, "0\n");
  ProcessResult host =
      run_process({FRACGPU_ALLOC_CLIENT, "info"}, container_env(), std::chrono::seconds(30));
  ASSERT_EQ(host.exit_code, 0) << host.out << host.err;
  EXPECT_EQ(last_json(host.out)["total"].get<uint64_t>(), gpu_memory_) << host.out;
  EXPECT_EQ(last_json(host.out)["device_total"].get<uint64_t>(), gpu_memory_) << host.out;
  EXPECT_EQ(tenant_pids(), std::vector<int>{holder->pid()});
}

// The attack: a pod runs as root and its tenant directory used to be mounted
// read-write, so rewriting memory_limit in the quota lifted the cap. Now the directory is
// a read-only mount: root in the container gets EROFS opening the quota for writing
// (by its path, and by the /proc map_files link of a process that maps it, where the
// namespace allows that look), cannot create anything there, and finds no ledger in
// it (the ledger comes as a descriptor over the socket). Its workloads still register
// and are capped, at the unchanged limit. (This mini runtime does not pivot_root, so the
// host's paths stay visible inside; in a real container only the mounts are there.)
TEST_F(PodTest, RootInTheContainerCannotRewriteItsQuotaNorReachItsLedger) {
  auto holder = start_holder(256 * kMiB, "holder");
  ASSERT_FALSE(HasFailure());
  const std::string script =
      "id -u; ls -A /run/fracgpu; "
      "test -e /run/fracgpu/ledger || echo no-ledger-path; "
      "(exec 3<> /run/fracgpu/quota) 2>&1 | grep -q 'Read-only file system' && "
      "echo quota-rdwr-erofs; "
      "(printf 'x' >> /run/fracgpu/quota) 2>&1 | grep -q 'Read-only file system' && "
      "echo quota-append-erofs; "
      "(: > /run/fracgpu/quota) 2>&1 | grep -q 'Read-only file system' && "
      "echo quota-truncate-erofs; "
      "(: > /run/fracgpu/ledger) 2>&1 | grep -q 'Read-only file system' && "
      "echo create-erofs; "
      "(rm -f /run/fracgpu/quota) 2>&1 | grep -q 'Read-only file system' && echo unlink-erofs; "
      "(mkdir /run/fracgpu/d) 2>&1 | grep -q 'Read-only file system' && echo mkdir-erofs; "
      "for f in /proc/" +
      std::to_string(holder->pid()) +
      "/map_files/*; do "
      "  case $(readlink $f 2>/dev/null) in */quota) "
      "    (exec 3<> $f) 2>&1 | grep -q 'Read-only file system' && echo map-files-erofs;; "
      "  esac; "
      "done; true";
  ProcessResult inside = run_in_container({"/bin/sh", "-c", script});
  ASSERT_EQ(inside.exit_code, 0) << inside.out << inside.err;
  std::istringstream lines(inside.out);
  std::string uid;
  std::getline(lines, uid);
  EXPECT_EQ(uid, "0");  // root in the container (mapped root where only a user namespace is had)
  std::vector<std::string> entries;
  for (std::string line; std::getline(lines, line) && line.rfind("no-", 0) != 0;)
    entries.push_back(line);
  // The sockets (registration, the compute doorbell) and the quota; no ledger.
  EXPECT_EQ(entries, (std::vector<std::string>{"broker.sock", "doorbell", "quota"})) << inside.out;
  for (const char* expected :
       {"no-ledger-path", "quota-rdwr-erofs", "quota-append-erofs", "quota-truncate-erofs",
        "create-erofs", "unlink-erofs", "mkdir-erofs"}) {
    EXPECT_NE(inside.out.find(std::string(expected) + "\n"), std::string::npos)
        << expected << " missing in:\n"
        << inside.out << inside.err;
  }
  if (namespace_probe().out.rfind("root", 0) == 0) {  // map_files needs CAP_SYS_ADMIN
    EXPECT_NE(inside.out.find("map-files-erofs\n"), std::string::npos) << inside.out;
  }

  // Nothing changed: the limit is the plugin's, and a new workload is capped by it.
  auto t = tenant(name_);
  ASSERT_FALSE(t.is_null());
  EXPECT_EQ(t["devices"][0]["memory_limit"].get<uint64_t>(), cap_);
  ProcessResult over = run_in_container(
      {FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(cap_ - kFootprint + kMiB)});
  EXPECT_EQ(over.exit_code, 1) << over.out << over.err;
  EXPECT_NE(over.out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << over.out << over.err;
  EXPECT_EQ(tenant_pids(), std::vector<int>{holder->pid()});
}

// Garbage in the preload file: ld.so says it ignores each entry it cannot load, and the
// program runs as if fracgpu were absent (the whole GPU, no crash).
TEST_F(PodTest, GarbageInThePreloadFileIsIgnoredByTheLoader) {
  // Rewritten in place: the bind mount holds the file's inode.
  std::ofstream(preload_host_path_, std::ios::trunc) << "/no/such/libfracgpu.so \x01\x7f garbage\n";
  ProcessResult r = run_in_container({FRACGPU_ALLOC_CLIENT, "info"});
  EXPECT_EQ(r.signal, 0);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(last_json(r.out)["total"].get<uint64_t>(), gpu_memory_) << r.out;
  EXPECT_NE(r.err.find("/no/such/libfracgpu.so"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("from /etc/ld.so.preload cannot be preloaded"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ignored"), std::string::npos) << r.err;
  EXPECT_TRUE(tenant_pids().empty());
}

// With the broker gone the shim fails closed (docs/design.md, "Failure behaviour"): after
// trying the tenant socket for 10 s, CUDA answers as if there were no driver — cuInit
// returns CUDA_ERROR_NO_DEVICE (100) — with one error line; the program is not killed and
// handles the error itself. fracgpu-test-client prints the numeric code: with no driver
// behind the shim, cuGetErrorName cannot name it.
TEST_F(PodTest, WithTheBrokerGoneCudaIsUnavailableButTheProgramRuns) {
  kill_broker();
  ProcessResult r = run_in_container({FRACGPU_TEST_CLIENT, "--route", "direct"});
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // the client's own exit on a CUDA error
  EXPECT_NE(r.out.find("\"api.cuInit(0) failed: ? (100)\""), std::string::npos) << r.out << r.err;
  EXPECT_NE(
      r.err.find("error: cannot register with the fracgpu broker at /run/fracgpu/broker.sock"),
      std::string::npos)
      << r.err;
  std::size_t error_lines = 0;
  for (std::size_t at = r.err.find(" error: "); at != std::string::npos;
       at = r.err.find(" error: ", at + 1)) {
    ++error_lines;
  }
  EXPECT_EQ(error_lines, 1u) << r.err;
}

}  // namespace
}  // namespace fracgpu::testing
