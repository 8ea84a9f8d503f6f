// The admin socket of a real fracgpu-broker over the simulated GPU: tenant lifecycle,
// the files it lays out, admission refusals, authorisation by SO_PEERCRED uid, and
// persistence across a SIGKILL.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "broker_harness.h"

namespace fracgpu::test {
namespace {

using nlohmann::json;

class AdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FRACGPU_REQUIRE_FAKE_DRIVER();
    ASSERT_TRUE(broker.start()) << broker.log();
  }
  BrokerProcess broker;
};

TEST_F(AdminTest, GpusListsTheSimulatedDevice) {
  auto reply = broker.admin({{"op", "gpus"}});
  ASSERT_TRUE(reply && (*reply)["ok"] == true) << broker.log();
  ASSERT_EQ((*reply)["gpus"].size(), 1u);
  const json& gpu = (*reply)["gpus"][0];
  EXPECT_EQ(gpu["index"], 0);
  EXPECT_EQ(gpu["memory_total"], 16 * kGiB);
  const std::string uuid = gpu["uuid"];
  EXPECT_EQ(uuid.size(), 40u);
  EXPECT_EQ(uuid.rfind("GPU-", 0), 0u);
  EXPECT_GT(gpu["context_footprint"].get<uint64_t>(), 0u);  // measured with two contexts
}

TEST_F(AdminTest, CreateListDelete) {
  auto created = broker.admin({{"op", "create"},
                               {"tenant",
                                {{"name", "a"},
                                 {"devices",
                                  {{{"gpu", 0},
                                    {"memory_limit", 4 * kGiB},
                                    {"memory_request", kGiB},
                                    {"compute", 30},
                                    {"priority", "high"}}}}}}});
  ASSERT_TRUE(created && (*created)["ok"] == true) << (created ? created->dump() : broker.log());
  const json& t = (*created)["tenant"];
  EXPECT_EQ(t["socket"], (broker.tenant_dir("a") / "broker.sock").string());
  EXPECT_EQ(t["devices"][0]["memory_grant"], kGiB);
  EXPECT_EQ(t["devices"][0]["priority"], "high");

  EXPECT_EQ(t["run_dir"], broker.tenant_dir("a").string());  // no owners: under pods/
  EXPECT_EQ(t["owners"], json::array());

  struct stat st {};
  ASSERT_EQ(::stat((broker.run_dir() / "pods").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(broker.tenant_dir("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  ASSERT_EQ(::stat((broker.tenant_dir("a") / "quota").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_FALSE(std::filesystem::exists(broker.tenant_dir("a") / "ledger"));
  ASSERT_EQ(::stat(broker.ledger_path("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  ASSERT_EQ(::stat((broker.tenant_dir("a") / "broker.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0666u);  // no owners: any uid that reaches it (its pod)

  auto status = broker.tenant_status("a");
  ASSERT_TRUE(status);
  EXPECT_EQ((*status)["devices"][0]["memory_limit"], 4 * kGiB);
  EXPECT_EQ((*status)["processes"].size(), 0u);

  auto updated = broker.admin(
      {{"op", "update"},
       {"tenant", {{"name", "a"}, {"devices", {{{"gpu", 0}, {"memory_limit", 6 * kGiB}}}}}}});
  ASSERT_TRUE(updated && (*updated)["ok"] == true) << updated->dump();
  EXPECT_EQ((*updated)["tenant"]["devices"][0]["memory_limit"], 6 * kGiB);
  EXPECT_EQ((*updated)["tenant"]["devices"][0]["memory_request"], kGiB);

  auto deleted = broker.admin({{"op", "delete"}, {"name", "a"}});
  ASSERT_TRUE(deleted && (*deleted)["ok"] == true);
  EXPECT_FALSE(std::filesystem::exists(broker.tenant_dir("a")));
  EXPECT_FALSE(std::filesystem::exists(broker.ledger_path("a")));
  EXPECT_FALSE(broker.tenant_status("a"));
  auto again = broker.admin({{"op", "delete"}, {"name", "a"}});
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)["ok"], false);
}

TEST_F(AdminTest, AdmissionRefusalsAreOneSentence) {
  ASSERT_TRUE(broker.create_tenant("a", 10 * kGiB, 8 * kGiB));
  auto too_big = broker.admin(
      {{"op", "create"},
       {"tenant", {{"name", "b"}, {"devices", {{{"gpu", 0}, {"memory_limit", 17 * kGiB}}}}}}});
  ASSERT_TRUE(too_big);
  EXPECT_EQ((*too_big)["ok"], false);
  EXPECT_NE((*too_big)["error"].get<std::string>().find("capacity"), std::string::npos);
  auto no_room = broker.admin(
      {{"op", "create"},
       {"tenant", {{"name", "b"}, {"devices", {{{"gpu", 0}, {"memory_limit", 9 * kGiB}}}}}}});
  ASSERT_TRUE(no_room);
  EXPECT_EQ((*no_room)["ok"], false);
  EXPECT_NE((*no_room)["error"].get<std::string>().find("guaranteed"), std::string::npos);
  auto no_gpu = broker.admin(
      {{"op", "create"},
       {"tenant", {{"name", "b"}, {"devices", {{{"gpu", 3}, {"memory_limit", kGiB}}}}}}});
  ASSERT_TRUE(no_gpu);
  EXPECT_NE((*no_gpu)["error"].get<std::string>().find("GPU 3 does not exist"), std::string::npos);
  EXPECT_TRUE(broker.create_tenant("b", 9 * kGiB, 8 * kGiB));  // overcommitted limits are fine
}

TEST_F(AdminTest, TenantsSurviveSigkillOfTheBroker) {
  ASSERT_TRUE(broker.create_tenant("keep", 4 * kGiB, 2 * kGiB));
  broker.kill9();
  ASSERT_TRUE(broker.start()) << broker.log();
  auto status = broker.tenant_status("keep");
  ASSERT_TRUE(status) << broker.log();
  EXPECT_EQ((*status)["devices"][0]["memory_limit"], 4 * kGiB);
  EXPECT_EQ((*status)["devices"][0]["memory_request"], 2 * kGiB);
  LineClient client(broker.tenant_dir("keep") / "broker.sock");  // socket rebound
  ASSERT_TRUE(client.connected());
  auto reply = client.request({{"op", "burst"}, {"device", 0}, {"bytes", 1}});
  ASSERT_TRUE(reply);
  EXPECT_EQ((*reply)["ok"], true);
}

TEST_F(AdminTest, SecondBrokerOnSameRunDirRefuses) {
  auto result =
      run_process({FRACGPU_TEST_BROKER_BIN, "--run-dir", broker.run_dir().string(), "--state-dir",
                   broker.state_dir().string(), "--driver", "/nonexistent"},
                  {});
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.err.find("already serving"), std::string::npos) << result.err;
  EXPECT_TRUE(broker.admin({{"op", "list"}}));  // the first one's socket is untouched
}

TEST_F(AdminTest, OtherUidsAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch to another uid";
  struct stat st {};
  ASSERT_EQ(::stat(broker.admin_socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // root's: other uids cannot even connect
  // Runs `body` as uid 65534 and returns its exit status.
  auto as_nobody = [](const std::function<int()>& body) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
      ::_exit(body());
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  };
  EXPECT_EQ(as_nobody([&] {
              const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
              sockaddr_un addr{};
              addr.sun_family = AF_UNIX;
              std::strncpy(addr.sun_path, broker.admin_socket().c_str(), sizeof addr.sun_path - 1);
              const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
              return rc != 0 && errno == EACCES ? 0 : 11;
            }),
            0);
  // With the file's mode opened up by hand, the broker still refuses at accept time,
  // before reading anything, and every request is checked again.
  ASSERT_EQ(::chmod(broker.admin_socket().c_str(), 0666), 0);
  EXPECT_EQ(
      as_nobody([&] {
        LineClient client(broker.admin_socket());
        if (!client.connected()) return 11;
        auto refusal = client.read_reply();  // unasked: the accept-time refusal
        if (!refusal || (*refusal)["ok"] != false) return 12;
        if ((*refusal)["error"].get<std::string>().find("permission denied") == std::string::npos)
          return 13;
        if (!client.closed_by_peer()) return 14;
        LineClient again(broker.admin_socket());
        auto create = again.request(
            {{"op", "create"},
             {"tenant", {{"name", "evil"}, {"devices", {{{"gpu", 0}, {"memory_limit", 1}}}}}}});
        return !create || (*create)["ok"] == false ? 0 : 15;
      }),
      0);
  EXPECT_FALSE(broker.tenant_status("evil"));
}

}  // namespace
}  // namespace fracgpu::test
