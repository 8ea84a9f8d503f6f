// Who may reach a broker socket, decided without a window: listen_unix gives the file
// its mode and owner before it appears at its path (umask-independent, a stale socket
// replaced, any other file refused, no staging directory left behind); set_socket_access
// changes both in place; and registration_refusal, the tenant socket's uid check at
// accept (root, the broker's uid and the owners; anyone for a tenant without owners).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/unix_socket.h"
#include "core/tenant_socket_server.h"

namespace fracgpu::broker {
namespace {

class SocketFiles : public ::testing::Test {
 protected:
  SocketFiles() {
    std::string pattern = "/tmp/fgs-XXXXXX";
    dir_ = ::mkdtemp(pattern.data());
  }
  ~SocketFiles() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  struct stat stat_of(const std::filesystem::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st;
  }
  std::size_t entries() {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir_),
                                                  std::filesystem::directory_iterator()));
  }
  std::filesystem::path dir_;
};

TEST_F(SocketFiles, TheSocketAppearsWithItsModeWhateverTheUmask) {
  const auto path = dir_ / "broker.sock";
  const mode_t old = ::umask(0);
  auto fd = listen_unix(path, 0600);
  ::umask(old);
  ASSERT_TRUE(fd.ok()) << fd.error();
  const struct stat st = stat_of(path);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(entries(), 1u);  // the private staging directory is gone
  auto client = connect_unix(path, std::chrono::seconds(1));
  ASSERT_TRUE(client.ok()) << client.error();  // bound elsewhere, reachable here
  ::close(*client);
  ::close(*fd);

  auto again = listen_unix(path, 0666);  // a stale socket is replaced
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(stat_of(path).st_mode & 07777, 0666u);
  ::close(*again);
}

TEST_F(SocketFiles, AnythingButASocketAtThePathIsLeftAlone) {
  const auto path = dir_ / "broker.sock";
  std::ofstream(path) << "precious";
  auto fd = listen_unix(path, 0600);
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.error().find("is not a socket"), std::string::npos) << fd.error();
  EXPECT_EQ(entries(), 1u);
  std::ifstream in(path);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "precious");
}

TEST_F(SocketFiles, OwnerAndModeAreSetBeforeAndChangedInPlace) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another uid needs root";
  const auto path = dir_ / "broker.sock";
  auto fd = listen_unix(path, 0600, 4242);
  ASSERT_TRUE(fd.ok()) << fd.error();
  EXPECT_EQ(stat_of(path).st_uid, 4242u);
  EXPECT_EQ(stat_of(path).st_mode & 07777, 0600u);
  ASSERT_TRUE(set_socket_access(path, 0666, 0).ok());
  EXPECT_EQ(stat_of(path).st_uid, 0u);
  EXPECT_EQ(stat_of(path).st_mode & 07777, 0666u);
  ASSERT_TRUE(set_socket_access(path, 0600, 4343).ok());
  EXPECT_EQ(stat_of(path).st_uid, 4343u);
  EXPECT_EQ(stat_of(path).st_mode & 07777, 0600u);
  ::close(*fd);
  std::ofstream(dir_ / "file") << "x";
  EXPECT_FALSE(set_socket_access(dir_ / "file", 0666, std::nullopt).ok());
}

TEST(RegistrationRefusal, RootTheBrokerAndOwnersOnly) {
  TenantSpec owned;
  owned.name = "team";
  owned.owners = {1000, 1001};
  EXPECT_FALSE(registration_refusal(owned, 0, 999));     // root
  EXPECT_FALSE(registration_refusal(owned, 999, 999));   // the broker's own uid
  EXPECT_FALSE(registration_refusal(owned, 1000, 999));  // an owner
  EXPECT_FALSE(registration_refusal(owned, 1001, 999));
  auto refused = registration_refusal(owned, 1002, 999);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("uid 1002 is not an owner of tenant 'team'"), std::string::npos)
      << *refused;
  // Issue 27, row 9: a refusal never names the owners (d28724a listed their uids).
  EXPECT_EQ(refused->find("1000"), std::string::npos) << *refused;
  EXPECT_EQ(refused->find("1001"), std::string::npos) << *refused;
  EXPECT_NE(refused->find("fracgpu tenant update team --owner 1002"), std::string::npos);

  TenantSpec pod;  // no owners: only its pod's mount reaches the socket
  pod.name = "pod";
  EXPECT_FALSE(registration_refusal(pod, 1002, 0));
}

}  // namespace
}  // namespace fracgpu::broker
