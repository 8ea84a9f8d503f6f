// The fracgpu CLI as a user runs it: one-line errors and exit status 2 for bad input
// before anything starts, refusals from the broker (cap larger than the GPU, no GPU),
// the command's own exit status, and no tenant or temporary directory left behind —
// with the node broker and with a private one; `status --json`'s api_version, and
// `fracgpu top --once` against a real broker and a broker that goes away.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli_fixture.h"

namespace fracgpu::test {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

using CliTest = CliFixture;

TEST_F(CliTest, BadInputIsOneLineAndStartsNothing) {
  const std::string marker = (scratch.path() / "ran").string();
  const std::vector<std::string> cmd = {"--", "/bin/sh", "-c", "touch " + marker};
  auto with = [&](std::vector<std::string> head) {
    head.insert(head.end(), cmd.begin(), cmd.end());
    return head;
  };
  expect_usage_error(with({"run", "--memory", "12XB"}), "unknown unit");
  expect_usage_error(with({"run", "--memory", "-1GiB"}), "negative");
  expect_usage_error(with({"run", "--memory", "0"}), "larger than zero");
  expect_usage_error(with({"run", "--memory", "99999999999TiB"}), "too large");
  expect_usage_error(with({"run", "--memory", "1GiB", "--compute", "101"}), "--compute");
  expect_usage_error(with({"run", "--memory", "1GiB", "--priority", "urgent"}), "priority");
  expect_usage_error(with({"run", "--memory", "1GiB", "--memory-request", "2GiB"}),
                     "larger than --memory");
  expect_usage_error(with({"run", "--memory", "1GiB", "--name", "Bad Name"}), "tenant name");
  expect_usage_error(with({"run", "--memory", "1GiB", "--frobnicate"}), "--frobnicate");
  expect_usage_error(with({"run", "--memory-request", "1XB"}), "unknown unit");
  expect_usage_error({"tenant", "create", "web"}, "--memory is required");
  expect_usage_error({"run", "--memory", "1GiB"}, "missing the command");
  expect_usage_error({"run", "--memory", "1GiB", "--"}, "missing the command");
  expect_usage_error({"bogus"}, "bogus");
  expect_usage_error({}, "subcommand");
  EXPECT_FALSE(std::filesystem::exists(marker));
}

// Issue 27: `fracgpu --version` and `fracgpu version` print the version and the commit of
// the checkout the binary was built from (cmake/BuildInfo.cmake, at build time): a commit
// of this repository (HEAD when the build is current; a commit made since the last build
// is not in the binary yet), "unknown" where the sources are not in git.
TEST_F(CliTest, VersionPrintsTheVersionAndTheGitCommit) {
  const ProcessResult in_git = run_process(
      {"/bin/sh", "-c", "git -C '" FRACGPU_TEST_SOURCE_DIR "' rev-parse --is-inside-work-tree"},
      {});
  const std::string prefix = "fracgpu " FRACGPU_TEST_VERSION " (commit ";
  std::string first;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--version"}, std::vector<std::string>{"version"}}) {
    const ProcessResult r = fracgpu(args);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    ASSERT_EQ(r.out.rfind(prefix, 0), 0u) << r.out;
    ASSERT_GE(r.out.size(), prefix.size() + 2);
    ASSERT_EQ(r.out.substr(r.out.size() - 2), ")\n") << r.out;
    std::string commit = r.out.substr(prefix.size(), r.out.size() - prefix.size() - 2);
    if (first.empty()) first = commit;
    EXPECT_EQ(commit, first) << "--version and version say the same";
    if (commit.size() > 6 && commit.substr(commit.size() - 6) == "-dirty")
      commit.resize(commit.size() - 6);
    if (in_git.status != 0) {
      EXPECT_EQ(commit, "unknown");
      continue;
    }
    EXPECT_EQ(commit.size(), 12u) << commit;
    EXPECT_EQ(commit.find_first_not_of("0123456789abcdef"), std::string::npos) << commit;
    const ProcessResult known =
        run_process({"/bin/sh", "-c",
                     "git -C '" FRACGPU_TEST_SOURCE_DIR "' cat-file -e '" + commit + "^{commit}'"},
                    {});
    EXPECT_EQ(known.status, 0) << commit << " is not a commit of " FRACGPU_TEST_SOURCE_DIR;
  }
}

// Where the sources are not a git checkout, the commit is "unknown" (or what the packager
// passes with -DFRACGPU_GIT_COMMIT).
TEST_F(CliTest, BuildInfoOutsideGitSaysUnknownOrWhatItIsGiven) {
  const std::string tree = (scratch.path() / "tarball").string();
  std::filesystem::create_directories(tree);
  const std::string out = (scratch.path() / "build_info.cpp").string();
  const std::string script = FRACGPU_TEST_SOURCE_DIR "/cmake/BuildInfo.cmake";
  ProcessResult r = run_process({FRACGPU_TEST_CMAKE, "-DSOURCE_DIR=" + tree, "-DOUTPUT=" + out,
                                 "-DVERSION=9.8.7", "-P", script},
                                {});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string text = read_text(out);
  EXPECT_NE(text.find("version() { return \"9.8.7\"; }"), std::string::npos) << text;
  EXPECT_NE(text.find("commit() { return \"unknown\"; }"), std::string::npos) << text;
  r = run_process({FRACGPU_TEST_CMAKE, "-DSOURCE_DIR=" + tree, "-DOUTPUT=" + out, "-DVERSION=9.8.7",
                   "-DGIT_COMMIT=0123abcd", "-P", script},
                  {});
  ASSERT_EQ(r.status, 0) << r.err;
  text = read_text(out);
  EXPECT_NE(text.find("commit() { return \"0123abcd\"; }"), std::string::npos) << text;
}

TEST_F(CliTest, NodeBrokerRunsCommandAndCleansUp) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto env = broker.env();
  auto r = fracgpu({"run", "--memory", "1GiB", "--", "/bin/sh", "-c", "exit 7"}, env);
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  auto list = broker.admin({{"op", "list"}});
  ASSERT_TRUE(list);
  EXPECT_TRUE((*list)["tenants"].empty()) << list->dump();

  // The command sees the shim preloaded and its own tenant socket.
  r = fracgpu({"run", "--memory", "1GiB", "--name", "probe", "/bin/sh", "-c",
               "echo $LD_PRELOAD; echo $FRACGPU_SOCKET"},
              env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(FRACGPU_TEST_SHIM), std::string::npos) << r.out;
  EXPECT_NE(r.out.find((broker.tenant_dir("probe", /*has_owners=*/true) / "broker.sock").string()),
            std::string::npos)
      << r.out;

  r = fracgpu({"run", "--memory", "1GiB", "--", "/bin/sh", "-c", "kill -9 $$"}, env);
  EXPECT_EQ(r.status, 128 + 9);
  r = fracgpu({"run", "--memory", "1GiB", "--", "/nonexistent/cmd"}, env);
  EXPECT_EQ(r.status, 127);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_TRUE((*broker.admin({{"op", "list"}}))["tenants"].empty());
}

// `fracgpu run` creates its tenant owned by the caller's uid (root here: owners [0]) and
// registers itself in it while the command runs (the audit's anchor for descendants).
TEST_F(CliTest, RunCreatesATenantOwnedByTheCallerAndRegistersInIt) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  // The shell prints its parent (the fracgpu CLI), then the broker's view.
  auto r = fracgpu({"run", "--memory", "1GiB", "--name", "mine", "--", "/bin/sh", "-c",
                    std::string("echo $PPID; exec ") + FRACGPU_TEST_CLI_BIN + " status --json"},
                   broker.env());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto newline = r.out.find('\n');
  ASSERT_NE(newline, std::string::npos) << r.out;
  const int cli_pid = std::stoi(r.out.substr(0, newline));
  auto list = nlohmann::json::parse(r.out.substr(newline + 1), nullptr, false);
  ASSERT_TRUE(list.is_object()) << r.out;
  ASSERT_EQ(list["tenants"].size(), 1u) << r.out;
  const auto& t = list["tenants"][0];
  EXPECT_EQ(t["owners"], nlohmann::json::array({::getuid()})) << t.dump();
  // The CLI itself holds a slot of its tenant while the command runs.
  ASSERT_EQ(t["processes"].size(), 1u) << t.dump();
  EXPECT_EQ(t["processes"][0]["pid"], cli_pid) << t.dump();
  EXPECT_TRUE((*broker.admin({{"op", "list"}}))["tenants"].empty());
}

TEST_F(CliTest, TenantOwnersFromTheCommandLine) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto env = broker.env();
  auto r = fracgpu(
      {"tenant", "create", "team", "--memory", "1GiB", "--owner", "root,12345", "--owner", "0"},
      env);
  ASSERT_EQ(r.status, 0) << r.err;
  auto t = broker.tenant_status("team");
  ASSERT_TRUE(t);
  EXPECT_EQ((*t)["owners"], nlohmann::json::array({0, 12345})) << t->dump();
  EXPECT_TRUE(std::filesystem::exists(broker.tenant_dir("team", true) / "broker.sock"));
  // Owners alone can be updated; the quota stays.
  r = fracgpu({"tenant", "update", "team", "--owner", "4242"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  t = broker.tenant_status("team");
  EXPECT_EQ((*t)["owners"], nlohmann::json::array({4242})) << t->dump();
  EXPECT_EQ((*t)["devices"][0]["memory_limit"], kGiB) << t->dump();
  // An unknown user is a usage error before anything is sent.
  r = fracgpu({"tenant", "create", "other", "--memory", "1GiB", "--owner", "no-such-user-fgt"},
              env);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no-such-user-fgt: no such user"), std::string::npos) << r.err;
  EXPECT_FALSE(broker.tenant_status("other"));
  r = fracgpu({"tenant", "update", "team", "--owner", "no-such-user-fgt"}, env);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ((*broker.tenant_status("team"))["owners"], nlohmann::json::array({4242}));
}

TEST_F(CliTest, TenantFlagConflictsAreUsageErrors) {
  expect_usage_error({"run", "--tenant", "a", "--memory", "1GiB", "--", "true"},
                     "leave out --memory");
  expect_usage_error({"run", "--tenant", "a", "--name", "b", "--", "true"}, "--name");
  expect_usage_error({"run", "--tenant", "Bad Name", "--", "true"}, "tenant name");
  // No broker has served the run directory: nothing to join.
  auto r = fracgpu({"run", "--tenant", "a", "--", "true"});
  EXPECT_EQ(r.status, 125);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no broker has served"), std::string::npos) << r.err;
}

TEST_F(CliTest, SigtermIsForwardedAndTenantDeleted) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  const std::string marker = (scratch.path() / "trapped").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [k, v] : broker.env()) ::setenv(k.c_str(), v.c_str(), 1);
    ::setenv("FRACGPU_SHIM", FRACGPU_TEST_SHIM, 1);
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 2);
    const std::string script =
        "trap 'kill $child; exit 42' TERM; sleep 30 & child=$!; touch " + marker + "; wait";
    ::execl(FRACGPU_TEST_CLI_BIN, "fracgpu", "run", "--memory", "1GiB", "--name", "sig", "--",
            "/bin/sh", "-c", script.c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_TRUE(
      wait_until([&] { return std::filesystem::exists(marker); }, std::chrono::seconds(20)));
  EXPECT_TRUE(broker.tenant_status("sig"));  // the tenant exists while the command runs
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
  EXPECT_FALSE(broker.tenant_status("sig"));
}

// Without --memory, `fracgpu run` gets the memory no other tenant is guaranteed, as the
// broker counts it at admission: on the 16 GiB simulated GPU next to a tenant guaranteed
// 6 GiB, a cap of 10 GiB with nothing guaranteed (or the --memory-request given); refused
// before the command starts once everything is guaranteed.
TEST_F(CliTest, RunWithoutMemoryGetsWhatOtherTenantsAreNotGuaranteed) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  ASSERT_TRUE(broker.create_tenant("other", 8 * kGiB, 6 * kGiB));
  auto env = broker.env();
  auto gpus = broker.admin({{"op", "gpus"}});
  ASSERT_TRUE(gpus && (*gpus)["gpus"].size() == 1u) << (gpus ? gpus->dump() : "no reply");
  const uint64_t total = (*gpus)["gpus"][0]["memory_total"].get<uint64_t>();
  // The command itself asks the broker for its tenant (FRACGPU_RUN_DIR is the broker's).
  auto device_of = [&](const std::vector<std::string>& flags, const std::string& name) {
    std::vector<std::string> args = {"run", "--name", name};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", FRACGPU_TEST_CLI_BIN, "status", "--json"});
    auto r = fracgpu(args, env);
    EXPECT_EQ(r.status, 0) << r.err;
    auto list = nlohmann::json::parse(r.out, nullptr, false);
    for (const auto& t : list.value("tenants", nlohmann::json::array())) {
      if (t.value("name", "") == name) return t["devices"][0];
    }
    ADD_FAILURE() << "no tenant " << name << " in " << r.out;
    return nlohmann::json();
  };
  auto d = device_of({"--compute", "30"}, "share");
  EXPECT_EQ(d.value("memory_limit", 0ull), total - 6 * kGiB) << d.dump();
  EXPECT_EQ(d.value("memory_request", 1ull), 0u) << d.dump();
  EXPECT_EQ(d.value("compute", 0u), 30u) << d.dump();
  d = device_of({"--memory-request", "2GiB"}, "guaranteed");
  EXPECT_EQ(d.value("memory_limit", 0ull), total - 6 * kGiB) << d.dump();
  EXPECT_EQ(d.value("memory_request", 0ull), 2 * kGiB) << d.dump();
  EXPECT_TRUE((*broker.admin({{"op", "list"}}))["tenants"].size() ==
              1u);  // both deleted afterwards

  ASSERT_TRUE(broker.create_tenant("rest", total - 6 * kGiB, total - 6 * kGiB));
  const std::string marker = (scratch.path() / "ran").string();
  auto r = fracgpu({"run", "--", "/bin/sh", "-c", "touch " + marker}, env);
  EXPECT_EQ(r.status, 125);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no memory of GPU 0 is left for a tenant without a memory limit"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST_F(CliTest, CapLargerThanGpuIsRefused) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  const std::string marker = (scratch.path() / "ran").string();
  auto r =
      fracgpu({"run", "--memory", "17GiB", "--", "/bin/sh", "-c", "touch " + marker}, broker.env());
  EXPECT_EQ(r.status, 125);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("larger than GPU 0's capacity"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST_F(CliTest, PrivateBrokerWhenNoneRuns) {
  const auto tmp = scratch.path() / "tmp";
  std::filesystem::create_directories(tmp);
  std::map<std::string, std::string> env = {
      {"FRACGPU_REAL_DRIVER", FRACGPU_TEST_FAKE_DRIVER},
      {"FAKECUDA_SHM_NAME", "/fgb-cli-" + std::to_string(::getpid())},
      {"FAKECUDA_MEMORY", "16GiB"},
      {"TMPDIR", tmp.string()}};
  auto r = fracgpu(
      {"run", "--memory", "1GiB", "--", "/bin/sh", "-c", "test -S \"$FRACGPU_SOCKET\" && exit 7"},
      env);
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(tmp));  // the private broker's directory is gone
  r = fracgpu({"run", "--memory", "20GiB", "--", "true"}, env);
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("capacity"), std::string::npos) << r.err;
  ::shm_unlink(env["FAKECUDA_SHM_NAME"].c_str());
}

TEST_F(CliTest, NoGpuSaysSoClearly) {
  auto r = fracgpu({"run", "--memory", "1GiB", "--", "true"},
                   {{"FRACGPU_REAL_DRIVER", "/nonexistent/libcuda.so.1"}});
  EXPECT_EQ(r.status, 125);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("no NVIDIA GPU or CUDA driver found"), std::string::npos) << r.err;
}

TEST_F(CliTest, StatusAndTenantCommands) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto env = broker.env();
  auto r = fracgpu({"tenant", "create", "web", "--memory", "2GiB", "--memory-request", "1GiB",
                    "--compute", "30%"},
                   env);
  ASSERT_EQ(r.status, 0) << r.err;
  r = fracgpu({"tenant", "update", "web", "--memory", "3GiB"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  r = fracgpu({"status"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("web"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 GiB"), std::string::npos) << r.out;
  r = fracgpu({"status", "--json"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["tenants"][0]["devices"][0]["memory_request"], kGiB);
  r = fracgpu({"tenant", "list"}, env);
  EXPECT_NE(r.out.find("web"), std::string::npos);
  r = fracgpu({"tenant", "delete", "web"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  r = fracgpu({"tenant", "delete", "web"}, env);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(lines(r.err), 1u);
  r = fracgpu({"status"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no fracgpu broker"), std::string::npos);
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(CliTest, TopOnceDrawsTheStatusDocumentAsBars) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto env = broker.env();
  ASSERT_EQ(fracgpu({"tenant", "create", "web", "--memory", "2GiB", "--memory-request", "1GiB",
                     "--compute", "70"},
                    env)
                .status,
            0);
  ASSERT_EQ(fracgpu({"tenant", "create", "etl", "--memory", "1GiB", "--compute", "30"}, env).status,
            0);
  auto status = fracgpu({"status", "--json"}, env);
  ASSERT_EQ(status.status, 0) << status.err;
  const auto document = nlohmann::json::parse(status.out, nullptr, false);
  ASSERT_TRUE(document.is_object()) << status.out;
  EXPECT_EQ(document["api_version"], 1);
  EXPECT_FALSE(document.contains("ok"));

  env["COLUMNS"] = "100";
  const auto start = std::chrono::steady_clock::now();
  auto r = fracgpu({"top", "--once"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_EQ(count_of(r.out, "fracgpu top"), 1u) << r.out;
  EXPECT_EQ(r.out.find('\033'), std::string::npos) << "no colour or clearing through a pipe";
  EXPECT_EQ(count_of(r.out, "  memory ["), 2u) << r.out;     // one bar line per tenant and GPU
  EXPECT_NE(r.out.find("70%"), std::string::npos) << r.out;  // the share the weights promise
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  memory [", 0) != 0) continue;
    EXPECT_EQ(line.size(), 100u) << "bars fill COLUMNS=100: " << line;
  }
  // web's memory bar: nothing used yet, its 1 GiB request halfway along its 2 GiB limit.
  const auto web = r.out.find("\nweb ");
  ASSERT_NE(web, std::string::npos) << r.out;
  const auto bar_line = r.out.substr(r.out.find('\n', web + 1) + 1);
  EXPECT_EQ(bar_line.rfind("  memory [", 0), 0u) << r.out;
  EXPECT_NE(bar_line.find('|'), std::string::npos) << bar_line;
  EXPECT_LT(bar_line.find('|'), bar_line.find("]")) << bar_line;

  expect_usage_error({"top", "--once", "--count", "2"}, "--once and --count");
}

TEST_F(CliTest, TopSaysWhenTheBrokerIsGone) {
  auto none = fracgpu({"top", "--once"});
  EXPECT_EQ(none.status, 1);
  EXPECT_EQ(lines(none.err), 1u) << none.err;
  EXPECT_NE(none.err.find("no fracgpu broker"), std::string::npos) << none.err;
  EXPECT_TRUE(none.out.empty()) << none.out;

  // Running, then the broker dies: a few refreshes say so, then one line and exit 1.
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto env = broker.env();
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    broker.kill9();
  });
  const auto start = std::chrono::steady_clock::now();
  auto r = fracgpu({"top", "--interval", "0.2"}, env);
  killer.join();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("the broker has gone"), std::string::npos) << r.err;
  EXPECT_GE(count_of(r.out, "GPU 0"), 1u) << r.out;  // frames while it ran
  EXPECT_GE(count_of(r.out, "(retrying)"), 1u) << r.out;
  EXPECT_GE(took, std::chrono::seconds(3));  // a restart gets 3 s
  EXPECT_LT(took, std::chrono::seconds(15));
}

}  // namespace
}  // namespace fracgpu::test
