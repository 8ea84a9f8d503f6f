// Hostile input on both sockets: random bytes, an over-long line, invalid JSON, wrong
// types, unknown ops, negative and out-of-range numbers. Each gets an error reply
// (garbage and over-long lines also a disconnect), and the broker keeps serving.
#include <gtest/gtest.h>

#include <random>

#include "broker_harness.h"

namespace fracgpu::test {
namespace {

using nlohmann::json;

class RobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FRACGPU_REQUIRE_FAKE_DRIVER();
    ASSERT_TRUE(broker.start()) << broker.log();
    ASSERT_TRUE(broker.create_tenant("t", 2 * kGiB));
  }
  std::filesystem::path tenant_socket() const { return broker.tenant_dir("t") / "broker.sock"; }

  // Sends `bytes`; expects one error reply and then the broker hanging up.
  void expect_error_and_disconnect(const std::filesystem::path& socket, const std::string& bytes) {
    LineClient c(socket);
    ASSERT_TRUE(c.connected());
    c.send_raw(bytes);
    auto reply = c.read_reply();
    ASSERT_TRUE(reply) << "no reply to " << bytes.substr(0, 40);
    EXPECT_EQ((*reply)["ok"], false);
    EXPECT_TRUE((*reply)["error"].is_string());
    EXPECT_TRUE(c.closed_by_peer());
  }

  // Sends a well-formed request; expects an error reply on a connection that stays usable.
  void expect_error_reply(LineClient& c, const std::string& line) {
    ASSERT_TRUE(c.send_raw(line + "\n"));
    auto reply = c.read_reply();
    ASSERT_TRUE(reply) << "no reply to " << line;
    EXPECT_EQ((*reply)["ok"], false) << line;
    EXPECT_FALSE((*reply).value("error", "").empty()) << line;
  }

  void expect_still_serving() {
    ASSERT_TRUE(broker.alive()) << broker.log();
    auto reply = broker.admin({{"op", "list"}});
    ASSERT_TRUE(reply && (*reply)["ok"] == true) << broker.log();
    LineClient c(tenant_socket());
    auto burst = c.request({{"op", "burst"}, {"device", 0}, {"bytes", 1}});
    ASSERT_TRUE(burst && (*burst)["ok"] == true);
  }

  BrokerProcess broker;
};

TEST_F(RobustnessTest, GarbageLinesDisconnect) {
  std::mt19937 rng(3);
  for (const auto& socket : {broker.admin_socket(), tenant_socket()}) {
    for (int i = 0; i < 20; ++i) {
      std::string junk(1 + rng() % 300, '\0');
      for (char& ch : junk) {
        ch = static_cast<char>(rng() % 256);
        if (ch == '\n') ch = 'x';
      }
      junk[0] = '#';  // never a JSON object, never a blank line
      expect_error_and_disconnect(socket, junk + "\n");
    }
    expect_error_and_disconnect(socket, "{\"op\":\"list\"\n");
    expect_error_and_disconnect(socket, "[1,2,3]\n");
    expect_error_and_disconnect(socket, "\"op\"\n");
    expect_error_and_disconnect(socket, "null\n");
    expect_error_and_disconnect(socket, std::string(70 * 1024, 'a'));  // no newline: over-long
    expect_error_and_disconnect(socket, "{\"op\":\"" + std::string(70 * 1024, 'b') + "\"}\n");
  }
  expect_still_serving();
}

TEST_F(RobustnessTest, BadRequestsOnAdminSocket) {
  LineClient c(broker.admin_socket());
  for (
      const char* line : {
          R"({})",
          R"({"op":5})",
          R"({"op":"explode"})",
          R"({"op":"create"})",
          R"({"op":"create","tenant":5})",
          R"({"op":"create","tenant":{"name":"x","devices":[{"gpu":0,"memory_limit":-1}]}})",
          R"({"op":"create","tenant":{"name":"x","devices":[{"gpu":-1,"memory_limit":1}]}})",
          R"({"op":"create","tenant":{"name":"x","devices":[{"gpu":0,"memory_limit":"lots"}]}})",
          R"({"op":"create","tenant":{"name":"x","devices":[{"gpu":0,"memory_limit":1e300}]}})",
          R"({"op":"create","tenant":{"name":"x","devices":[{"gpu":0,"memory_limit":99999999999999999999999}]}})",
          R"({"op":"create","tenant":{"name":"../etc","devices":[{"gpu":0,"memory_limit":1}]}})",
          R"({"op":"create","tenant":{"name":"x","devices":[{"gpu":0,"memory_limit":1,"compute":-3}]}})",
          R"({"op":"update","tenant":{"name":"nope"}})",
          R"({"op":"update","tenant":{"name":"t","devices":"all"}})",
          R"({"op":"delete"})",
          R"({"op":"delete","name":7})",
          R"({"op":"delete","name":"nope"})",
      }) {
    expect_error_reply(c, line);
  }
  auto ok = c.request({{"op", "list"}});  // same connection still works
  ASSERT_TRUE(ok && (*ok)["ok"] == true);
  EXPECT_EQ((*ok)["tenants"].size(), 1u);
  expect_still_serving();
}

TEST_F(RobustnessTest, BadRequestsOnTenantSocket) {
  LineClient c(tenant_socket());
  for (const char* line : {
           R"({})",
           R"({"op":null})",
           R"({"op":"create"})",
           R"({"op":"register"})",
           R"({"op":"register","protocol":1})",
           R"({"op":"register","protocol":3})",
           R"({"op":"register","protocol":"2"})",
           R"({"op":"view","protocol":1})",
           R"({"op":"burst"})",
           R"({"op":"burst","device":0})",
           R"({"op":"burst","device":-1,"bytes":5})",
           R"({"op":"burst","device":0,"bytes":-5})",
           R"({"op":"burst","device":0,"bytes":0})",
           R"({"op":"burst","device":0,"bytes":1.5})",
           R"({"op":"burst","device":"0","bytes":5})",
           R"({"op":"burst","device":99,"bytes":5})",
           R"({"op":"burst","device":3,"bytes":5})",
           R"({"op":"burst","device":0,"bytes":18446744073709551615})",
       }) {
    expect_error_reply(c, line);
  }
  expect_still_serving();
}

TEST_F(RobustnessTest, PartialWritesAreReassembled) {
  LineClient c(broker.admin_socket());
  const std::string request = R"({"op":"gpus"})";
  for (char ch : request) ASSERT_TRUE(c.send_raw(std::string(1, ch)));
  ASSERT_TRUE(c.send_raw("\n{\"op\":\"list\"}\n"));  // and two requests in one write
  auto first = c.read_reply();
  auto second = c.read_reply();
  ASSERT_TRUE(first && second);
  EXPECT_TRUE((*first)["gpus"].is_array());
  EXPECT_TRUE((*second)["tenants"].is_array());
}

}  // namespace
}  // namespace fracgpu::test
