// The trust boundary on a host (issue 12, items 1-2), against the real broker over the
// simulated GPU with real accounts made for the test (TestUser): who may register in a
// tenant (its owners, root and the broker's uid: the uid check at accept, SO_PEERCRED)
// and what any uid can reach by path in the run directory — never a ledger (each
// registered process gets a descriptor), never a quota to write, no list of tenants,
// nothing under pods/. Every attack of the issue is made as an unprivileged uid and must
// fail; the owner's own processes register and are capped. A broker restart over the old
// layout (every tenant under tenants/, a world-writable ledger beside the quota) moves
// the files by rename and keeps a running process counted. Needs root (to make the
// accounts); CI runs as root.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "broker_fixture.h"
#include "client/admin_client.h"
#include "fracgpu/descriptor_passing.h"
#include "test_user.h"

namespace fracgpu::testing {
namespace {

std::string errno_name(int e) {
  switch (e) {
    case 0:
      return "ok";
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case ENOENT:
      return "ENOENT";
    case EROFS:
      return "EROFS";
    default:
      return std::strerror(e);
  }
}

// Runs `body` in a forked child that has become `as` (supplementary groups dropped) and
// returns what it returned; "child failed" when it could not switch or did not report.
std::string as_user(const RunAs& as, const std::function<std::string()>& body) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    std::string result = "cannot become the user";
    if (::setgroups(0, nullptr) == 0 && ::setgid(as.gid) == 0 && ::setuid(as.uid) == 0)
      result = body();
    (void)!::write(report[1], result.data(), result.size());
    ::_exit(0);
  }
  ::close(report[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(report[0], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out.empty() ? "child failed" : out;
}

std::string try_open(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return errno_name(errno);
  ::close(fd);
  return "ok";
}

std::string try_list(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return errno_name(errno);
  ::closedir(d);
  return "ok";
}

std::string try_stat(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? "ok" : errno_name(errno);
}

// Connects and registers (protocol 2): "connect: EACCES", or the broker's reply line
// plus " +fd" when a descriptor came with it.
std::string try_register(const std::string& socket_path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    return "connect: " + errno_name(e);
  }
  const std::string request = "{\"op\":\"register\",\"protocol\":2}\n";
  // MSG_NOSIGNAL: a refused peer may find the connection closed by the time it writes.
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  int passed = -1;
  const ssize_t n = fracgpu::descriptor_passing::receive_with(fd, buf, sizeof buf, &passed, 0);
  std::string out = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "no reply";
  if (passed >= 0) {
    ::close(passed);
    out += " +fd";
  }
  ::close(fd);
  return out;
}

// Registers and keeps what the reply passed: "quota_fd" when the reply says a quota
// descriptor came and one did, then what that descriptor allows: reading it, mapping it
// writable, and reopening it read-write (and read-only) through /proc/self/fd.
std::string try_quota_descriptor(const std::string& socket_path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "connect: " + errno_name(errno);
  }
  const std::string request = "{\"op\":\"register\",\"protocol\":2}\n";
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  int ledger = -1, quota = -1;
  const ssize_t n =
      fracgpu::descriptor_passing::receive_with(fd, buf, sizeof buf, &ledger, 0, &quota);
  const std::string reply = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  std::string out = reply.find("\"quota_fd\":true") != std::string::npos && quota >= 0
                        ? "quota_fd"
                        : "no quota_fd: " + reply;
  if (quota >= 0) {
    char magic[8];
    out += std::string(" read:") + (::pread(quota, magic, sizeof magic, 0) == 8 ? "ok" : "no");
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, quota, 0);
    out += " mmap-rw:" + (p == MAP_FAILED ? errno_name(errno) : std::string("ok"));
    if (p != MAP_FAILED) ::munmap(p, 4096);
    const std::string link = "/proc/self/fd/" + std::to_string(quota);
    out += " reopen-rw:" + try_open(link, O_RDWR) + " reopen-ro:" + try_open(link, O_RDONLY);
    ::close(quota);
  }
  if (ledger >= 0) ::close(ledger);
  ::close(fd);
  return out;
}

class TrustFiles : public BrokerFixture {
 protected:
  void SetUp() override {
    std::string why;
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create the test's users";
    for (auto* slot : {&owner_, &second_owner_, &intruder_}) {
      auto user = TestUser::create(&why);
      ASSERT_TRUE(user) << why;
      slot->emplace(std::move(*user));
    }
    // The users must reach the run directory (TempDir is 0700) and the simulated GPU (a
    // 0600 segment of root's): the fake device is not what is under test.
    ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
    BrokerFixture::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(::chmod(("/dev/shm" + shm_name_).c_str(), 0666), 0);
    create_owned("mine", {owner_->uid()});
    create_owned("shared", {owner_->uid(), second_owner_->uid()});
    create_tenant("pod", "1GiB");  // no owners: the Kubernetes kind
  }

  void create_owned(const std::string& name, const std::vector<uid_t>& owners) {
    auto admin = client::AdminClient::connect(run_dir(), std::chrono::seconds(5));
    ASSERT_TRUE(admin) << admin.error();
    nlohmann::json tenant = {
        {"name", name},
        {"owners", owners},
        {"devices", {{{"gpu", 0}, {"memory_limit", kGiB}, {"memory_request", kGiB / 2}}}}};
    auto reply = admin->call({{"op", "create"}, {"tenant", tenant}});
    ASSERT_TRUE(reply) << reply.error();
    EXPECT_EQ((*reply)["tenant"]["run_dir"], run_dir() + "/tenants/" + name);
  }

  nlohmann::json status(const std::string& name) {
    auto admin = client::AdminClient::connect(run_dir(), std::chrono::seconds(5));
    if (!admin) return nullptr;
    auto reply = admin->call({{"op", "list"}});
    if (!reply) return nullptr;
    for (const auto& t : (*reply)["tenants"]) {
      if (t["name"] == name) return t;
    }
    return nullptr;
  }

  std::string owned_dir(const std::string& name) const { return run_dir() + "/tenants/" + name; }
  std::string owned_socket(const std::string& name) const {
    return owned_dir(name) + "/broker.sock";
  }

  // A shim process's environment for another uid: no hook statistics (their directory is
  // root's), the tenant's socket given explicitly.
  Environment user_env(const std::string& socket) const {
    Environment env = shim_env();
    env.erase("FRACGPU_HOOK_STATS");
    env["FRACGPU_SOCKET"] = socket;
    return env;
  }

  std::optional<TestUser> owner_, second_owner_, intruder_;
};

// Every path into another tenant — or into one's own books — is closed to another uid.
TEST_F(TrustFiles, AnotherUidReachesNoTenantsFilesAndNoLedgerAtAll) {
  const std::string run = run_dir();
  for (const auto* user : {&*intruder_, &*owner_}) {
    SCOPED_TRACE("as " + user->name());
    auto probe = [&](const std::function<std::string()>& body) {
      return as_user(user->run_as(), body);
    };
    EXPECT_EQ(probe([&] { return try_list(run + "/tenants"); }), "EACCES");  // no listing
    EXPECT_EQ(probe([&] { return try_list(run + "/pods"); }), "EACCES");
    EXPECT_EQ(probe([&] { return try_stat(run + "/pods/pod/broker.sock"); }), "EACCES");
    EXPECT_EQ(probe([&] { return try_open(run + "/pods/pod/quota", O_RDONLY); }), "EACCES");
    EXPECT_EQ(probe([&] { return try_list(run + "/ledgers"); }), "EACCES");
    for (const char* t : {"mine", "shared", "pod"}) {
      for (int flags : {O_RDWR, O_RDONLY}) {
        EXPECT_EQ(probe([&] { return try_open(run + "/ledgers/" + t, flags); }), "EACCES") << t;
      }
    }
    for (const char* t : {"mine", "shared"}) {
      EXPECT_EQ(probe([&] { return try_open(owned_dir(t) + "/quota", O_RDWR); }), "EACCES") << t;
      EXPECT_EQ(probe([&] { return try_open(owned_dir(t) + "/quota", O_WRONLY | O_TRUNC); }),
                "EACCES")
          << t;
      EXPECT_EQ(probe([&] { return try_open(owned_dir(t) + "/ledger", O_RDWR); }), "ENOENT") << t;
      EXPECT_EQ(probe([&] { return try_open(owned_dir(t) + "/new", O_RDWR | O_CREAT); }), "EACCES")
          << t;
    }
  }
  // Nothing in the run directory is writable by others.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(run)) {
    struct stat st {};
    ASSERT_EQ(::lstat(entry.path().c_str(), &st), 0);
    if (S_ISSOCK(st.st_mode)) continue;  // connect() needs write; the uid check guards those
    EXPECT_EQ(st.st_mode & S_IWOTH, 0u) << entry.path();
    EXPECT_EQ(st.st_mode & S_IWGRP, 0u) << entry.path();
  }
}

// Issue 27, row 9: a host tenant's quota (its limits, request, shares) is no business of a
// user who guesses its name. At d28724a it was 0644: anyone could read it. Now it is the
// broker's, 0600; each registered process gets a read-only descriptor, which can be
// neither mapped writable nor reopened for writing. A pod's quota stays 0644 under the
// 0700 pods/ (its read-only mount is what the shim maps; docs/security.md).
TEST_F(TrustFiles, AHostTenantsQuotaIsReadOnlyThroughItsRegistrationAndUnreadableByPath) {
  for (const char* t : {"mine", "shared"}) {
    struct stat st {};
    ASSERT_EQ(::stat((owned_dir(t) + "/quota").c_str(), &st), 0) << t;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << t;
    EXPECT_EQ(st.st_uid, 0u) << t;
    for (const auto* user : {&*intruder_, &*owner_, &*second_owner_}) {
      EXPECT_EQ(
          as_user(user->run_as(), [&] { return try_open(owned_dir(t) + "/quota", O_RDONLY); }),
          "EACCES")
          << t << " as " << user->name();
    }
  }
  struct stat pod {};
  ASSERT_EQ(::stat((run_dir() + "/pods/pod/quota").c_str(), &pod), 0);
  EXPECT_EQ(pod.st_mode & 0777, 0644u) << "a pod's quota is read by path (read-only mount)";

  const std::string got =
      as_user(owner_->run_as(), [&] { return try_quota_descriptor(owned_socket("mine")); });
  EXPECT_EQ(got, "quota_fd read:ok mmap-rw:EACCES reopen-rw:EACCES reopen-ro:EACCES") << got;
  const std::string shared = as_user(second_owner_->run_as(),
                                     [&] { return try_quota_descriptor(owned_socket("shared")); });
  EXPECT_EQ(shared.rfind("quota_fd read:ok mmap-rw:EACCES reopen-rw:EACCES", 0), 0u) << shared;
  // The intruder gets no descriptor at all, and the refusal names no owner.
  const std::string intruder =
      as_user(intruder_->run_as(), [&] { return try_quota_descriptor(owned_socket("shared")); });
  EXPECT_EQ(intruder.rfind("no quota_fd", 0), 0u) << intruder;
  EXPECT_NE(intruder.find("is not an owner of tenant 'shared'"), std::string::npos) << intruder;
  for (const auto* owner : {&*owner_, &*second_owner_})
    EXPECT_EQ(intruder.find(std::to_string(owner->uid())), std::string::npos)
        << "the refusal names an owner's uid: " << intruder;
}

// Registration: the kernel refuses a connect to a one-owner socket (0600, the owner's);
// on a socket several owners share (0666) the broker refuses at accept with a sentence
// naming the uid and the tenant, and passes no descriptor.
TEST_F(TrustFiles, OnlyOwnersRootAndTheBrokerMayRegister) {
  struct stat st {};
  ASSERT_EQ(::stat(owned_socket("mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner_->uid());
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(owned_socket("shared").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0666u);

  const RunAs intruder = intruder_->run_as();
  EXPECT_EQ(as_user(intruder, [&] { return try_register(owned_socket("mine")); }),
            "connect: EACCES");
  const std::string refused =
      as_user(intruder, [&] { return try_register(owned_socket("shared")); });
  EXPECT_NE(refused.find("\"ok\":false"), std::string::npos) << refused;
  EXPECT_NE(refused.find("uid " + std::to_string(intruder_->uid()) +
                         " is not an owner of tenant 'shared'"),
            std::string::npos)
      << refused;
  EXPECT_EQ(refused.find("+fd"), std::string::npos) << refused;

  // The owners get a slot and the ledger descriptor; so does root.
  for (const auto* user : {&*owner_, &*second_owner_}) {
    const std::string ok =
        as_user(user->run_as(), [&] { return try_register(owned_socket("shared")); });
    EXPECT_NE(ok.find("\"ok\":true"), std::string::npos) << user->name() << ": " << ok;
    EXPECT_NE(ok.find("+fd"), std::string::npos) << ok;
  }
  const std::string mine =
      as_user(owner_->run_as(), [&] { return try_register(owned_socket("mine")); });
  EXPECT_NE(mine.find("\"ok\":true"), std::string::npos) << mine;
  const std::string root = try_register(owned_socket("mine"));
  EXPECT_NE(root.find("\"ok\":true"), std::string::npos) << root;

  // The same through the shim: the intruder's CUDA program is refused, not capped elsewhere.
  ProcessResult r = run_process({FRACGPU_ALLOC_CLIENT, "info"}, user_env(owned_socket("shared")),
                                std::chrono::seconds(30), intruder);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("is not an owner of tenant 'shared'"), std::string::npos) << r.err;
  EXPECT_TRUE(status("shared")["processes"].empty());
}

// The owner's processes are the tenant's: registered, capped at 1 GiB, refused above it.
TEST_F(TrustFiles, TheOwnersProcessIsRegisteredAndCapped) {
  const RunAs owner = owner_->run_as();
  ProcessResult over = run_process(
      {FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(kGiB - 64 * kMiB + kMiB)},
      user_env(owned_socket("mine")), std::chrono::seconds(30), owner);
  EXPECT_EQ(over.exit_code, 1) << over.out << over.err;
  EXPECT_NE(over.out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << over.out << over.err;

  BackgroundProcess holder({FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(512 * kMiB)},
                           user_env(owned_socket("mine")), dir_.path() + "/owner-holder", owner);
  const TenantLedger* l = ledger("mine");
  ASSERT_NE(l, nullptr);
  wait_until([&] { return l->devices[0].used.load() == 576 * kMiB; }, std::chrono::seconds(20));
  EXPECT_EQ(l->devices[0].used.load(), 576 * kMiB) << holder.err();
  auto t = status("mine");
  ASSERT_FALSE(t.is_null());
  ASSERT_EQ(t["processes"].size(), 1u);
  EXPECT_EQ(t["processes"][0]["pid"], holder.pid());
  // The holder reached its ledger only through the descriptor: it has no path to it.
  EXPECT_EQ(as_user(owner, [&] { return try_open(run_dir() + "/ledgers/mine", O_RDWR); }),
            "EACCES");
}

// New owners apply at the next accept, and the socket file follows them.
TEST_F(TrustFiles, ChangedOwnersApplyAtOnce) {
  auto admin = client::AdminClient::connect(run_dir(), std::chrono::seconds(5));
  ASSERT_TRUE(admin) << admin.error();
  auto reply = admin->call(
      {{"op", "update"}, {"tenant", {{"name", "mine"}, {"owners", {second_owner_->uid()}}}}});
  ASSERT_TRUE(reply) << reply.error();
  struct stat st {};
  ASSERT_EQ(::stat(owned_socket("mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, second_owner_->uid());
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(as_user(owner_->run_as(), [&] { return try_register(owned_socket("mine")); }),
            "connect: EACCES");
  const std::string ok =
      as_user(second_owner_->run_as(), [&] { return try_register(owned_socket("mine")); });
  EXPECT_NE(ok.find("\"ok\":true"), std::string::npos) << ok;
  // One owner to two: the file goes back to root, 0666, and the uid check admits both.
  auto two = admin->call(
      {{"op", "update"},
       {"tenant", {{"name", "mine"}, {"owners", {owner_->uid(), second_owner_->uid()}}}}});
  ASSERT_TRUE(two) << two.error();
  ASSERT_EQ(::stat(owned_socket("mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  const std::string back =
      as_user(owner_->run_as(), [&] { return try_register(owned_socket("mine")); });
  EXPECT_NE(back.find("\"ok\":true"), std::string::npos) << back;
  const std::string still_out =
      as_user(intruder_->run_as(), [&] { return try_register(owned_socket("mine")); });
  EXPECT_NE(still_out.find("is not an owner of tenant 'mine'"), std::string::npos) << still_out;
  auto kind = admin->call(
      {{"op", "update"}, {"tenant", {{"name", "mine"}, {"owners", nlohmann::json::array()}}}});
  ASSERT_FALSE(kind);
  EXPECT_NE(kind.error().find("cannot lose all its owners"), std::string::npos) << kind.error();
}

// A broker upgraded over the old layout: the tenant's directory under tenants/ (0755)
// and its ledger 0666 beside the quota. The restarted broker moves both by rename, so
// the process that mapped the old files keeps counting where the broker looks.
TEST_F(TrustFiles, ARestartOverTheOldLayoutMovesItAndKeepsProcessesCounted) {
  BackgroundProcess holder({FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(256 * kMiB)},
                           tenant_env("pod"), dir_.path() + "/legacy-holder");
  const TenantLedger* before = ledger("pod");
  ASSERT_NE(before, nullptr);
  wait_until([&] { return before->devices[0].used.load() == 320 * kMiB; },
             std::chrono::seconds(20));
  ASSERT_EQ(before->devices[0].used.load(), 320 * kMiB) << holder.err();
  kill_broker();

  const std::filesystem::path run = run_dir();
  const auto old_dir = run / "tenants" / "pod";
  std::filesystem::rename(run / "pods" / "pod", old_dir);
  std::filesystem::rename(run / "ledgers" / "pod", old_dir / "ledger");
  ASSERT_EQ(::chmod((run / "tenants").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(old_dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((old_dir / "ledger").c_str(), 0666), 0);
  // Only the holder's socket path needs the new place again after the move: it is the same.
  start_broker();
  if (HasFatalFailure()) return;

  EXPECT_FALSE(std::filesystem::exists(old_dir));
  EXPECT_FALSE(std::filesystem::exists(run / "pods" / "pod" / "ledger"));
  struct stat st {};
  ASSERT_EQ(::stat((run / "ledgers" / "pod").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((run / "tenants").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);
  auto t = status("pod");
  ASSERT_FALSE(t.is_null());
  ASSERT_EQ(t["processes"].size(), 1u);
  EXPECT_EQ(t["processes"][0]["pid"], holder.pid());
  EXPECT_EQ(t["devices"][0]["memory_used"].get<uint64_t>(), 320 * kMiB);
  // The holder still counts in the file the broker reads: its exit is reclaimed there.
  holder.kill_and_reap();
  const TenantLedger* after = ledger("pod");
  ASSERT_NE(after, nullptr);
  wait_until([&] { return after->devices[0].used.load() == 0; }, std::chrono::seconds(5));
  EXPECT_EQ(after->devices[0].used.load(), 0u);
  EXPECT_EQ(before->devices[0].used.load(), 0u);  // one file: the old mapping sees it too
}

}  // namespace
}  // namespace fracgpu::testing
