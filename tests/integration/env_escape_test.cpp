// Issue 12, item 3: the environment cannot opt out of a cap the node set. Each test is an
// attack that worked before (FRACGPU_DISABLE=1, FRACGPU_SOCKET at a fake broker or at
// another tenant, a non-root `fracgpu run` starting a private broker beside the node's),
// run on the simulated GPU against a real broker, and expected to fail; most also run the
// same attack where no node broker is set up, to show that it would have worked there.
//
// How a test plays the node: the shim's node paths are constants (/run/fracgpu, its
// broker.sock and broker.lock), deliberately not configurable, so that no tenant can move
// them. Each attacking process therefore runs in a private mount namespace
// (fracgpu-test-mount-run, the pod test's container runtime) in which the test broker's run
// directory is bind-mounted at /run/fracgpu — exactly what a node broker there looks like —
// or, for a pod, one tenant's directory is mounted read-only there, as the device plugin
// does. The real shim and the real CLI then see a node; nothing on the host changes. The
// attacker is a real second user (TestUser) where that matters, dropped to with setpriv
// after the mounts. Needs root (CI runs as root).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "broker_fixture.h"
#include "test_user.h"

namespace fracgpu::testing {
namespace {

struct Mount {
  std::string host, container;
  bool read_only = false;
};

// The program's last JSON line, null (not discarded) when it is not JSON.
nlohmann::json last_json_or_null(const std::string& out) {
  auto doc = last_json_line(out);
  return doc.is_discarded() ? nlohmann::json() : doc;
}

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

constexpr uint64_t kFootprint = 64 * kMiB;  // FAKECUDA_CONTEXT_FOOTPRINT, charged to the tenant

// Names of the files created in the directory `watch` watches, from its pending events.
// ThreadSanitizer's runtime creates (and at once unlinks) $TMPDIR/tsan.rodata.<pid> in
// every instrumented process it starts; that file is the sanitizer's, not fracgpu's.
std::vector<std::string> created_files(int watch) {
  std::vector<std::string> names;
  alignas(inotify_event) char events[4096];
  ssize_t n;
  while ((n = ::read(watch, events, sizeof events)) > 0) {
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(events + at);
      const std::string name = e->len > 0 ? e->name : "";
      if (name.rfind("tsan.rodata.", 0) != 0) names.push_back(name);
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
  if (n < 0 && errno != EAGAIN)
    names.push_back(std::string("(inotify read: ") + std::strerror(errno) + ")");
  return names;
}

class EnvEscape : public BrokerFixture {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (mount namespaces, a second local user)";
    ProcessResult probe = run_process({FRACGPU_MOUNT_RUN, "--probe"}, clean_environment());
    if (probe.exit_code == 77) GTEST_SKIP() << probe.err;
    ASSERT_EQ(probe.out, "root\n") << probe.err;
    ShimFixture::SetUp();
    base_env_["FAKECUDA_MEMORY"] = "16GiB";
    base_env_["FAKECUDA_CONTEXT_FOOTPRINT"] = "64MiB";
    start_broker();
    std::string why;
    user_.emplace(TestUser::create(&why).value());
    // The simulated GPU is shared memory the broker created (0600): the user's processes
    // open it too, as they would open /dev/nvidia*.
    ASSERT_EQ(::chmod(("/dev/shm" + shm_name_).c_str(), 0666), 0) << std::strerror(errno);
    ASSERT_EQ(::stat(run_dir().c_str(), &st_), 0);
    ASSERT_EQ(st_.st_mode & 0777, 0755u) << "the node's run directory must be traversable";
    // A directory of the user's own, for its files and its fake broker.
    char pattern[] = "/tmp/fgesc-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    user_dir_ = pattern;
    ASSERT_EQ(::chown(user_dir_.c_str(), user_->uid(), user_->gid()), 0);
    ASSERT_EQ(::chmod(user_dir_.c_str(), 0755), 0);
    empty_dir_ = dir_.path() + "/empty-run";
    std::filesystem::create_directories(empty_dir_);
    ::chmod(empty_dir_.c_str(), 0755);
  }
  void TearDown() override {
    fake_broker_.reset();
    if (!fake_shm_.empty()) ::shm_unlink(fake_shm_.c_str());
    if (!user_dir_.empty()) std::filesystem::remove_all(user_dir_);
    BrokerFixture::TearDown();
    user_.reset();
  }

  std::string uid() const { return std::to_string(user_->uid()); }

  void create_owned_tenant(const std::string& name, const std::string& memory,
                           const std::string& owners) {
    ProcessResult r = cli({"tenant", "create", name, "--memory", memory, "--owner", owners});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  // The node as a process sees it: the broker's run directory at /run/fracgpu.
  std::vector<Mount> node_view() const { return {{run_dir(), "/run/fracgpu"}}; }
  // No node broker (an empty /run/fracgpu), the same broker reachable elsewhere.
  std::vector<Mount> no_node_view() const {
    return {{empty_dir_, "/run/fracgpu"}, {run_dir(), "/run/fgtest-node"}};
  }
  // A pod of tenant `name` (no owners): its directory, read-only, at /run/fracgpu.
  std::vector<Mount> pod_view(const std::string& name) const {
    return {
        {client::tenant_dir(run_dir(), name, /*has_owners=*/false).string(), "/run/fracgpu", true}};
  }

  std::vector<std::string> in_view(const std::vector<Mount>& mounts,
                                   const std::vector<std::string>& argv, bool as_user) {
    const std::string scratch = dir_.path() + "/scratch-" + std::to_string(++scratches_);
    std::filesystem::create_directories(scratch);
    std::vector<std::string> full = {FRACGPU_MOUNT_RUN, "--scratch", scratch};
    for (const Mount& m : mounts)
      full.insert(full.end(), {"--mount", m.host, m.container, m.read_only ? "ro" : "rw"});
    full.push_back("--");
    if (as_user) {
      full.insert(full.end(), {"setpriv", "--reuid", uid(), "--regid", std::to_string(user_->gid()),
                               "--clear-groups", "--"});
    }
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  }
  ProcessResult run_in(const std::vector<Mount>& mounts, const std::vector<std::string>& argv,
                       const Environment& env, bool as_user = true) {
    return run_process(in_view(mounts, argv, as_user), env, std::chrono::seconds(60));
  }

  // A tenant process's environment (the user cannot write the fixture's stats directory).
  Environment process_env() const {
    Environment env = shim_env();
    env.erase("FRACGPU_HOOK_STATS");
    return env;
  }

  std::vector<std::string> fill() const {
    return {FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(64 * kMiB)};
  }

  // The user's own broker (a real fracgpu broker, run as the user on a simulated GPU of
  // its own), with a 12 GiB tenant "big" the user owns: the "fake broker" of the attacks.
  std::string start_fake_broker() {
    fake_shm_ = "/" + unique_name("fake");
    Environment env = base_env_;
    env["FAKECUDA_SHM_NAME"] = fake_shm_;
    const std::string run = user_dir_ + "/fake/run";
    fake_broker_.emplace(std::vector<std::string>{FRACGPU_BROKER, "--run-dir", run, "--state-dir",
                                                  user_dir_ + "/fake/state", "--driver",
                                                  FRACGPU_FAKECUDA_DIR "/libcuda.so.1",
                                                  "--context-footprint", "auto"},
                         env, dir_.path() + "/fake-broker", user_->run_as());
    const std::string ready = fake_broker_->wait_until_ready(
        [&] { return std::filesystem::exists(run + "/admin.sock"); }, std::chrono::seconds(20));
    EXPECT_EQ(ready, "");
    ProcessResult r = run_process({FRACGPU_CLI, "--run-dir", run, "tenant", "create", "big",
                                   "--memory", "12GiB", "--owner", uid()},
                                  clean_environment());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return run + "/tenants/big/broker.sock";
  }

  std::optional<TestUser> user_;
  std::string user_dir_, empty_dir_, fake_shm_;
  std::optional<BackgroundProcess> fake_broker_;
  struct stat st_ {};
  int scratches_ = 0;
};

// FRACGPU_DISABLE=1 in a tenant gave 8 GiB on a 1 GiB cap: beside a node broker, with
// FRACGPU_SOCKET naming the node's tenant socket, it is ignored, for the user and for root.
TEST_F(EnvEscape, DisableIsIgnoredUnderANodeServedSocket) {
  create_owned_tenant("capped", "1GiB", uid());
  Environment env = process_env();
  env["FRACGPU_DISABLE"] = "1";
  env["FRACGPU_SOCKET"] = "/run/fracgpu/tenants/capped/broker.sock";
  for (bool as_user : {true, false}) {
    ProcessResult r = run_in(node_view(), fill(), env, as_user);
    ASSERT_EQ(r.exit_code, 0) << (as_user ? "user: " : "root: ") << r.out << r.err;
    auto result = last_json_or_null(r.out);
    EXPECT_EQ(result["refused_with"], "CUDA_ERROR_OUT_OF_MEMORY") << r.out;
    EXPECT_EQ(result["allocated"], kGiB - kFootprint) << r.out;
    EXPECT_NE(r.err.find("FRACGPU_DISABLE is ignored"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("memory cap of 1.00 GiB"), std::string::npos) << r.err;
  }
  // Where no node broker is set up, DISABLE is the user's choice, as before: the whole GPU.
  env["FRACGPU_SOCKET"] = "/run/fgtest-node/tenants/capped/broker.sock";
  ProcessResult r = run_in(no_node_view(), fill(), env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GE(last_json_or_null(r.out)["allocated"].get<uint64_t>(), 8 * kGiB) << r.out;
}

// FRACGPU_SOCKET at a fake broker of the user's own gave 12 GiB: beside a node broker the
// process fails closed, one error line naming the socket and the uid serving it.
TEST_F(EnvEscape, SocketServedByAnotherUidFailsClosed) {
  const std::string fake = start_fake_broker();
  Environment env = process_env();
  env["FAKECUDA_SHM_NAME"] = fake_shm_;
  env["FRACGPU_SOCKET"] = fake;
  for (const char* disable : {"0", "1"}) {
    env["FRACGPU_DISABLE"] = disable;
    ProcessResult r = run_in(node_view(), fill(), env);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    // cuInit failed (CUDA answers as if there were no driver, so not even its error name).
    EXPECT_NE(r.out.find("\"error\":\"cuInit"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("allocated"), std::string::npos) << r.out;
    const std::string line = "FRACGPU_SOCKET=" + fake + " is served by uid " + uid() +
                             ", not by this node's fracgpu broker (root)";
    EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
  }
  // Root is not fooled either.
  env["FRACGPU_DISABLE"] = "0";
  ProcessResult r = run_in(node_view(), fill(), env, /*as_user=*/false);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("is served by uid " + uid()), std::string::npos) << r.err;
  // Without a node broker the user's own broker is the user's business: its 12 GiB.
  r = run_in(no_node_view(), fill(), env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(last_json_or_null(r.out)["allocated"], 12 * kGiB - kFootprint) << r.out;
}

// The node's own socket reached through a path another uid controls could be swapped for a
// fake between the check and the registration: refused. Through a symbolic link, the
// real path is checked and used: fine (and capped).
TEST_F(EnvEscape, NodeSocketThroughAnotherUsersDirectoryFailsClosed) {
  create_owned_tenant("capped", "1GiB", uid());
  const std::string node_socket = tenant_socket("capped", /*has_owners=*/true);
  const std::string hard = user_dir_ + "/hard.sock";
  ASSERT_EQ(::link(node_socket.c_str(), hard.c_str()), 0) << std::strerror(errno);
  Environment env = process_env();
  env["FRACGPU_SOCKET"] = hard;
  ProcessResult r = run_in(node_view(), fill(), env);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find(user_dir_ + " belongs to uid " + uid()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CUDA is unavailable"), std::string::npos) << r.err;

  const std::string soft = user_dir_ + "/soft.sock";
  std::filesystem::create_symlink("/run/fracgpu/tenants/capped/broker.sock", soft);
  env["FRACGPU_SOCKET"] = soft;
  r = run_in(node_view(), fill(), env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(last_json_or_null(r.out)["allocated"], kGiB - kFootprint) << r.out;
}

// FRACGPU_SOCKET at another tenant's socket: the broker admits only its owners.
TEST_F(EnvEscape, AnotherTenantsSocketFailsClosed) {
  create_owned_tenant("others", "8GiB", "root,4242");
  Environment env = process_env();
  env["FRACGPU_SOCKET"] = "/run/fracgpu/tenants/others/broker.sock";
  env["FRACGPU_DISABLE"] = "1";
  ProcessResult r = run_in(node_view(), fill(), env);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("\"error\":\"cuInit"), std::string::npos) << r.out;
  // The broker refuses the uid at accept with a sentence and hangs up; the shim's request may
  // meet the hang-up first (EPIPE), so the line names the socket, and the sentence when read.
  EXPECT_NE(r.err.find("cannot register with the fracgpu broker at "
                       "/run/fracgpu/tenants/others/broker.sock"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("CUDA is unavailable to this process"), std::string::npos) << r.err;
}

// In a pod (its tenant's directory mounted read-only at /run/fracgpu) neither variable
// counts: one warning each, and the pod's cap holds — also for root in the pod.
TEST_F(EnvEscape, PodIgnoresDisableAndSocket) {
  create_tenant("pod-a", "1GiB");  // no owners: a Kubernetes tenant
  const std::string fake = start_fake_broker();
  Environment env = process_env();
  env["FRACGPU_DISABLE"] = "1";
  env["FRACGPU_SOCKET"] = fake;
  ProcessResult r = run_in(pod_view("pod-a"), fill(), env, /*as_user=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(last_json_or_null(r.out)["allocated"], kGiB - kFootprint) << r.out;
  EXPECT_NE(r.err.find("FRACGPU_DISABLE is ignored: the node placed this process in a tenant"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("FRACGPU_SOCKET=" + fake + " is ignored"), std::string::npos) << r.err;
}

// A non-root `fracgpu run` beside a root node broker silently started a private broker and
// took memory the node had guaranteed to others. Now it refuses, starts nothing (no
// private directory appears under TMPDIR, the command never runs), and says what to do.
TEST_F(EnvEscape, NonRootRunBesideTheNodeBrokerRefusesAndStartsNothing) {
  const std::string tmp = user_dir_ + "/tmp";
  std::filesystem::create_directories(tmp);
  ASSERT_EQ(::chown(tmp.c_str(), user_->uid(), user_->gid()), 0);
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(::inotify_add_watch(watch, tmp.c_str(), IN_CREATE | IN_MOVED_TO), 0);
  Environment env = clean_environment();
  env["TMPDIR"] = tmp;
  env["FRACGPU_SHIM"] = FRACGPU_SHIM_PATH;
  env["FRACGPU_REAL_DRIVER"] = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
  env["FAKECUDA_SHM_NAME"] = shm_name_;
  const std::string marker = user_dir_ + "/ran";
  ProcessResult r = run_in(
      node_view(),
      {FRACGPU_CLI, "run", "--memory", "15GiB", "--", "/bin/sh", "-c", "touch " + marker}, env);
  EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("does not start a private broker"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ask an administrator for a tenant (fracgpu tenant create NAME --owner"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("fracgpu run --tenant NAME"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
  const std::vector<std::string> created = created_files(watch);
  EXPECT_TRUE(created.empty()) << "created in TMPDIR: " << (created.empty() ? "" : created.front());
  ::close(watch);
  EXPECT_TRUE(std::filesystem::is_empty(tmp));
  // The node broker has no tenant either.
  ProcessResult status = cli({"status", "--json"});
  auto doc = nlohmann::json::parse(status.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << status.out << status.err;
  EXPECT_TRUE(doc["tenants"].empty()) << status.out;
}

// With --tenant of a tenant it owns, the user's command runs in it, capped, with the CLI
// registered in the tenant while the command runs; FRACGPU_DISABLE in its environment
// changes nothing. A tenant it does not own is refused with the broker's sentence.
TEST_F(EnvEscape, RunWithTenantItOwnsRunsCapped) {
  create_owned_tenant("mine", "1GiB", uid());
  create_owned_tenant("others", "8GiB", "root,4242");
  Environment env = process_env();
  env.erase("LD_PRELOAD");
  env["FRACGPU_SHIM"] = FRACGPU_SHIM_PATH;
  env["FRACGPU_DISABLE"] = "1";
  std::vector<std::string> run = {FRACGPU_CLI, "run", "--tenant", "mine", "--"};
  std::vector<std::string> argv = run;
  for (const auto& a : fill()) argv.push_back(a);
  ProcessResult r = run_in(node_view(), argv, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(last_json_or_null(r.out)["allocated"], kGiB - kFootprint) << r.out;

  // While its command runs, the CLI holds a slot of the tenant (the audit's anchor).
  const std::string marker = user_dir_ + "/started";
  argv = run;
  argv.insert(argv.end(), {"/bin/sh", "-c", "touch " + marker + "; exec sleep 30"});
  BackgroundProcess held(in_view(node_view(), argv, true), env, dir_.path() + "/held");
  ASSERT_EQ(held.wait_until_ready([&] { return std::filesystem::exists(marker); },
                                  std::chrono::seconds(20)),
            "");
  auto pids = [&] {
    std::vector<int> out;
    auto doc = nlohmann::json::parse(cli({"status", "--json"}).out, nullptr, false);
    for (const auto& t : doc.value("tenants", nlohmann::json::array()))
      if (t.value("name", "") == "mine")
        for (const auto& p : t.value("processes", nlohmann::json::array()))
          out.push_back(p.value("pid", 0));
    return out;
  };
  EXPECT_EQ(pids(), std::vector<int>{held.pid()}) << "the CLI (pid " << held.pid() << ")";
  held.kill_now(SIGTERM);  // forwarded to the command; the CLI then leaves the tenant
  EXPECT_GE(held.wait(std::chrono::seconds(10)), 0);
  wait_until([&] { return pids().empty(); }, std::chrono::seconds(3));
  EXPECT_TRUE(pids().empty());
  EXPECT_TRUE(std::filesystem::exists(client::tenant_socket_path(run_dir(), "mine", true)))
      << "a joined tenant is not deleted";

  argv = {FRACGPU_CLI, "run", "--tenant", "others", "--", "/bin/sh", "-c", "touch " + marker + "2"};
  r = run_in(node_view(), argv, env);
  EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("cannot join tenant others: permission denied: uid " + uid() +
                       " is not an owner of tenant 'others'"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker + "2"));
  // A one-owner tenant of someone else's: its socket is theirs (0600), and the CLI says so.
  create_owned_tenant("roots", "1GiB", "root");
  argv[3] = "roots";
  r = run_in(node_view(), argv, env);
  EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
  EXPECT_NE(r.err.find("cannot join tenant roots: uid " + uid() + " is not one of its owners"),
            std::string::npos)
      << r.err;
  argv[3] = "nonesuch";
  r = run_in(node_view(), argv, env);
  EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
  EXPECT_NE(r.err.find("no tenant nonesuch here"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker + "2"));
}

}  // namespace
}  // namespace fracgpu::testing
