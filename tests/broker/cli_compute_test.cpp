// The compute side of the CLI as a user runs it: `fracgpu set` and `fracgpu top` refuse
// bad input with one line and exit 2 before contacting anything; `set` changes a running
// broker's tenant (weight, ceiling, priority, memory) and prints its row; `status`
// shows the compute columns and `status --json` the broker's JSON; `top --count` prints
// plain successive frames when stdout is not a terminal; fracgpu-spin-client runs
// kernels for the given time; and, with a broker that schedules compute, `set` moves
// the measured shares of two running tenants and `fracgpu demo` shows its three phases.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli_fixture.h"

namespace fracgpu::test {
namespace {

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A process running in the background (a `fracgpu run` of a tenant), killed if still
// running when the test ends.
class Background {
 public:
  Background(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
             const std::filesystem::path& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

class CliComputeTest : public CliFixture {
 protected:
  static nlohmann::json device0(BrokerProcess& broker, const std::string& name) {
    auto t = broker.tenant_status(name);
    return t ? (*t)["devices"][0] : nlohmann::json();
  }
};

// Validation happens before anything is contacted: the run directory has no broker,
// so a check that came too late would fail with exit 1 ("no fracgpu broker").
TEST_F(CliComputeTest, SetAndTopRefuseBadInputBeforeContactingAnything) {
  expect_usage_error({"set"}, "name");
  expect_usage_error({"set", "web"}, "nothing to set");
  expect_usage_error({"set", "web", "--gpu", "0"}, "nothing to set");
  expect_usage_error({"set", "web", "--compute", "0"}, "--compute");
  expect_usage_error({"set", "web", "--compute", "101"}, "--compute");
  expect_usage_error({"set", "web", "--compute", "30.5"}, "--compute");
  expect_usage_error({"set", "web", "--compute-limit", "150"}, "--compute-limit '150'");
  expect_usage_error({"set", "web", "--compute-limit", "nope"}, "or none");
  expect_usage_error({"set", "web", "--priority", "urgent"}, "priority");
  expect_usage_error({"set", "web", "--priority", "high", "--compute-limit", "50"},
                     "--priority high");
  expect_usage_error({"set", "web", "--memory", "12XB"}, "unknown unit");
  expect_usage_error({"set", "web", "--memory", "0"}, "larger than zero");
  expect_usage_error({"set", "web", "--gpu", "16", "--compute", "5"}, "--gpu 16");
  expect_usage_error({"set", "Bad Name", "--compute", "5"}, "tenant name");
  expect_usage_error({"set", "web", "--compute", "5", "--frobnicate"}, "--frobnicate");
  expect_usage_error({"top", "--interval", "0"}, "--interval");
  expect_usage_error({"top", "--interval", "abc"}, "--interval");
  expect_usage_error({"top", "--interval", "-1"}, "--interval");
  expect_usage_error({"top", "--count", "0"}, "--count");
  expect_usage_error({"top", "--count", "x"}, "--count");
  expect_usage_error({"top", "--bogus"}, "--bogus");
  expect_usage_error({"top", "extra"}, "extra");
  // Well-formed, but nobody is there: exit 1, one line.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"set", "web", "--compute", "5"},
        std::vector<std::string>{"top", "--count", "1"}}) {
    auto r = fracgpu(args);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("no fracgpu broker"), std::string::npos) << r.err;
  }
}

TEST_F(CliComputeTest, SetChangesARunningBrokersTenant) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto env = broker.env();
  ASSERT_EQ(fracgpu({"tenant", "create", "web", "--memory", "2GiB", "--compute", "30"}, env).status,
            0);
  ASSERT_EQ(
      fracgpu({"tenant", "create", "batch", "--memory", "2GiB", "--compute", "30%"}, env).status,
      0);

  auto r = fracgpu(
      {"set", "web", "--compute", "90", "--compute-limit", "50%", "--priority", "normal"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  // The tenant's row: weight 90 of 90+30 on GPU 0 promises 75%.
  ASSERT_EQ(lines(r.out), 2u) << r.out;
  EXPECT_NE(r.out.find("WEIGHT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("web"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("batch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("75%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("50%"), std::string::npos) << r.out;
  auto d = device0(broker, "web");
  EXPECT_EQ(d["compute"], 90);
  EXPECT_EQ(d["compute_limit"], 50);
  EXPECT_EQ(d["priority"], "normal");
  EXPECT_EQ(d["memory_limit"], 2 * kGiB);  // untouched

  // Removing the ceiling: "none", or 0 in a change.
  ASSERT_EQ(fracgpu({"set", "web", "--compute-limit", "none"}, env).status, 0);
  EXPECT_EQ(device0(broker, "web")["compute_limit"], 0);
  ASSERT_EQ(fracgpu({"set", "web", "--compute-limit", "40"}, env).status, 0);
  ASSERT_EQ(fracgpu({"set", "web", "--compute-limit", "0"}, env).status, 0);
  EXPECT_EQ(device0(broker, "web")["compute_limit"], 0);

  // Priority and memory, and an explicit --gpu.
  r = fracgpu({"set", "web", "--priority", "low", "--memory", "3GiB", "--gpu", "0"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  d = device0(broker, "web");
  EXPECT_EQ(d["priority"], "low");
  EXPECT_EQ(d["memory_limit"], 3 * kGiB);
  EXPECT_EQ(d["compute"], 90);
  EXPECT_NE(r.out.find("low"), std::string::npos) << r.out;
  r = fracgpu({"set", "web", "--priority", "high"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("prio"), std::string::npos) << r.out;

  // A broker with the compute scheduler refuses a ceiling on a high-priority tenant.
  if (d.contains("compute_state")) {
    r = fracgpu({"set", "web", "--compute-limit", "40"}, env);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_EQ(device0(broker, "web")["compute_limit"], 0);
  }

  // Refusals by the broker: one line, exit 1, nothing changed.
  r = fracgpu({"set", "nosuch", "--compute", "5"}, env);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
  r = fracgpu({"set", "web", "--memory", "17GiB"}, env);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(device0(broker, "web")["memory_limit"], 3 * kGiB);

  // status: memory and compute tables; --json is the broker's own JSON.
  r = fracgpu({"status"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* column :
       {"LIMIT", "WEIGHT", "SHARE", "CEILING", "PRIORITY", "MEASURED", "STATE"}) {
    EXPECT_NE(r.out.find(column), std::string::npos) << column << "\n" << r.out;
  }
  std::istringstream table(r.out);
  for (std::string line; std::getline(table, line);) EXPECT_LE(line.size(), 100u) << line;
  r = fracgpu({"status", "--json"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  auto list = broker.admin({{"op", "list"}});
  ASSERT_TRUE(list);
  for (const auto& t : j["tenants"]) {
    if (t["name"] == "web") {
      EXPECT_EQ(t["devices"][0]["compute"], 90) << r.out;
    }
  }
  EXPECT_EQ(j["tenants"].size(), (*list)["tenants"].size());
}

TEST_F(CliComputeTest, TopPrintsPlainFramesWhenNotATerminal) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto env = broker.env();
  ASSERT_EQ(fracgpu({"tenant", "create", "web", "--memory", "1GiB", "--compute", "70"}, env).status,
            0);
  ASSERT_EQ(fracgpu({"tenant", "create", "etl", "--memory", "1GiB", "--compute", "30", "--priority",
                     "normal"},
                    env)
                .status,
            0);
  const auto start = std::chrono::steady_clock::now();
  auto r = fracgpu({"top", "--count", "3", "--interval", "0.3"}, env);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_EQ(occurrences(r.out, "fracgpu top"), 3u) << r.out;
  EXPECT_EQ(occurrences(r.out, "every 0.3s"), 3u) << r.out;
  EXPECT_EQ(r.out.find('\033'), std::string::npos) << "no escape codes when stdout is a pipe";
  EXPECT_EQ(occurrences(r.out, "WEIGHT"), 3u) << r.out;
  EXPECT_NE(r.out.find("70%"), std::string::npos) << r.out;  // 70 / (70 + 30)
  EXPECT_NE(r.out.find("30%"), std::string::npos) << r.out;
  EXPECT_GE(took, 0.55);  // two waits of 0.3 s between three frames
  EXPECT_LT(took, 10.0);
}

TEST_F(CliComputeTest, SpinClientRunsKernelsForTheGivenTime) {
  if (!std::filesystem::exists(FRACGPU_TEST_SPIN_CLIENT))
    GTEST_SKIP() << "fracgpu-spin-client not built";
  const std::string shm = "/fgb-spin-" + std::to_string(::getpid());
  const std::map<std::string, std::string> env = {
      {"LD_LIBRARY_PATH", std::filesystem::path(FRACGPU_TEST_FAKE_DRIVER).parent_path().string()},
      {"FAKECUDA_SHM_NAME", shm}};
  const auto report = scratch.path() / "report.json";
  auto r =
      run_process({FRACGPU_TEST_SPIN_CLIENT, "--kernel-us", "1000", "--seconds", "0.5", "--report",
                   report.string(), "--stream-sync-every", "4", "--stream", "created"},
                  env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  std::ifstream in(report);
  std::string line;
  std::getline(in, line);
  auto j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_TRUE(j.is_object()) << line;
  EXPECT_GE(j["seconds"].get<double>(), 0.5);
  // 1 ms kernels for 0.5 s: about 500 (the simulated GPU is ours alone here).
  EXPECT_GE(j["kernels"].get<uint64_t>(), 200u) << line;
  EXPECT_LE(j["kernels"].get<uint64_t>(), 1000u) << line;
  r = run_process({FRACGPU_TEST_SPIN_CLIENT, "--seconds", "0.2", "--report", "-"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"kernels\":"), std::string::npos) << r.out;
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--kernel-us", "0"},
                                              {"--seconds", "-1"},
                                              {"--stream-sync-every", "0"},
                                              {"--stream", "other"},
                                              {"--bogus", "1"},
                                              {"--seconds"}}) {
    std::vector<std::string> args = {FRACGPU_TEST_SPIN_CLIENT};
    args.insert(args.end(), bad.begin(), bad.end());
    r = run_process(args, env);
    EXPECT_EQ(r.status, 2) << bad[0] << " " << r.err;
  }
  ::shm_unlink(shm.c_str());
}

// Two `fracgpu run` tenants spinning 1 ms kernels on the simulated GPU; `fracgpu set`
// turns 70/30 into 20/80 and the broker's measured shares follow (compute_measured_share
// in its status).
TEST_F(CliComputeTest, SetMovesMeasuredSharesOfRunningTenants) {
  if (!std::filesystem::exists(FRACGPU_TEST_SPIN_CLIENT))
    GTEST_SKIP() << "fracgpu-spin-client not built";
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto env = broker.env();
  env["FRACGPU_SHIM"] = FRACGPU_TEST_SHIM;
  env["FRACGPU_REAL_DRIVER"] = FRACGPU_TEST_FAKE_DRIVER;
  auto run = [&](const std::string& name, const std::string& weight) {
    return std::make_unique<Background>(
        std::vector<std::string>{FRACGPU_TEST_CLI_BIN, "run", "--memory", "1GiB", "--compute",
                                 weight, "--name", name, "--", FRACGPU_TEST_SPIN_CLIENT,
                                 "--seconds", "30"},
        env, scratch.path() / (name + ".log"));
  };
  auto a = run("alpha", "70");
  auto b = run("beta", "30");
  ASSERT_TRUE(wait_until(
      [&] {
        auto ta = broker.tenant_status("alpha"), tb = broker.tenant_status("beta");
        return ta && tb && !(*ta)["processes"].empty() && !(*tb)["processes"].empty();
      },
      std::chrono::seconds(20)));
  ASSERT_TRUE(device0(broker, "alpha").contains("compute_measured_share"))
      << "the broker reports no compute_measured_share: " << device0(broker, "alpha").dump();
  auto shares = [&] {
    return std::make_pair(device0(broker, "alpha").value("compute_measured_share", -1.0),
                          device0(broker, "beta").value("compute_measured_share", -1.0));
  };
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a full 2 s measurement window
  auto [a1, b1] = shares();
  EXPECT_NEAR(a1, 0.70, 0.10) << "beta " << b1;
  EXPECT_NEAR(b1, 0.30, 0.10) << "alpha " << a1;
  EXPECT_GT(a1 + b1, 0.85);  // work-conserving: the GPU is kept busy

  auto r = fracgpu({"set", "alpha", "--compute", "20"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  r = fracgpu({"set", "beta", "--compute", "80"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  std::this_thread::sleep_for(std::chrono::seconds(3));
  auto [a2, b2] = shares();
  EXPECT_NEAR(a2, 0.20, 0.10) << "beta " << b2;
  EXPECT_NEAR(b2, 0.80, 0.10) << "alpha " << a2;
  // STATE is a snapshot: each busy tenant holds the GPU, waits for it or is draining.
  r = fracgpu({"status"}, env);
  std::istringstream table(r.out);
  int rows = 0;
  for (std::string line; std::getline(table, line);) {
    if (line.rfind("alpha ", 0) != 0 && line.rfind("beta ", 0) != 0) continue;
    if (line.find("WEIGHT") != std::string::npos || line.find(" GiB") != std::string::npos)
      continue;  // memory rows
    ++rows;
    EXPECT_TRUE(line.find("granted") != std::string::npos ||
                line.find("waiting") != std::string::npos ||
                line.find("draining") != std::string::npos)
        << line;
  }
  EXPECT_EQ(rows, 2) << r.out;
}

// The demo's compute part: the measured shares at the end of each phase (weights
// 60/30/10; notebook stopped; inference raised to 90) within a few points of the weights.
TEST_F(CliComputeTest, DemoShowsSharesLendingAndALiveChange) {
  if (!std::filesystem::exists(FRACGPU_TEST_SPIN_CLIENT))
    GTEST_SKIP() << "fracgpu-spin-client not built";
  auto r = run_process({FRACGPU_TEST_CLI_BIN, "demo"}, {{"FRACGPU_SHIM", FRACGPU_TEST_SHIM}},
                       std::chrono::seconds(90));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  ASSERT_EQ(r.out.find("Compute shares: skipped"), std::string::npos) << r.out;
  std::map<int, std::array<double, 3>> at;  // second -> training, inference, notebook (%)
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    int second = 0;
    std::array<double, 3> v{};
    if (std::sscanf(line.c_str(), " %ds training %lf%% inference %lf%% notebook %lf%%", &second,
                    &v[0], &v[1], &v[2]) == 4) {
      at[second] = v;
    }
  }
  ASSERT_EQ(at.size(), 18u) << r.out;
  auto near = [&](int second, std::array<double, 3> want) {
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(at[second][i], want[i], 8.0) << "at " << second << "s\n" << r.out;
  };
  near(7, {60, 30, 10});
  near(12, {66.7, 33.3, 0});
  near(18, {40, 60, 0});
  EXPECT_NE(r.out.find("$ fracgpu set inference --compute 90"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("training   holds 10.0 GiB"), std::string::npos)
      << r.out;  // the memory part ran first
}

}  // namespace
}  // namespace fracgpu::test
