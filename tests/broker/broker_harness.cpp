// Process plumbing for the integration tests (see broker_harness.h). Children are
// forked from the single-threaded test process, so they may use the C++ library freely
// before exec or _exit.
#include "broker_harness.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "core/ledger_ops.h"
#include "fracgpu/descriptor_passing.h"
#include "fracgpu/paths.h"

extern char** environ;

namespace fracgpu::test {
namespace {

std::atomic<int> g_counter{0};

int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int connect_to(const std::filesystem::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads one '\n'-terminated line from fd within `timeout` (buffered in `buffer`).
std::optional<std::string> read_line(int fd, std::string& buffer,
                                     std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto nl = buffer.find('\n'); nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
    char chunk[4096];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) return std::nullopt;
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

// As read_line, but also takes a descriptor passed with the data (SCM_RIGHTS) into
// *passed (-1 when none came).
std::optional<std::string> read_line_with_fd(int fd, std::string& buffer,
                                             std::chrono::milliseconds timeout, int* passed) {
  *passed = -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (buffer.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return std::nullopt;
    char chunk[4096];
    const ssize_t n = fracgpu::descriptor_passing::receive_with(fd, chunk, sizeof chunk, passed, 0);
    if (n <= 0) return std::nullopt;
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
  return read_line(fd, buffer, timeout);
}

template <class T>
T* map_fd(int fd, bool writable) {
  if (fd < 0) return nullptr;
  void* p =
      ::mmap(nullptr, sizeof(T), writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<T*>(p);
}

template <class T>
T* map_file(const std::filesystem::path& path, bool writable) {
  const int fd = ::open(path.c_str(), writable ? O_RDWR : O_RDONLY);
  if (fd < 0) return nullptr;
  void* p =
      ::mmap(nullptr, sizeof(T), writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<T*>(p);
}

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Body of a TenantProcess child; never returns.
[[noreturn]] void tenant_child(const std::filesystem::path& dir, uint64_t hold, bool churn,
                               int report_fd, std::optional<ChildIdentity> as) {
  nlohmann::json result = {{"ok", false}, {"error", "cannot connect"}};
  if (as && (::setgroups(0, nullptr) != 0 || ::setgid(as->gid) != 0 || ::setuid(as->uid) != 0)) {
    write_all(report_fd,
              nlohmann::json({{"ok", false}, {"error", "cannot change uid"}}).dump() + "\n");
    ::_exit(1);
  }
  const int sock = connect_to(dir / paths::kTenantSocketName);
  std::string buffer;
  int ledger_fd = -1;
  if (sock >= 0) {
    // send, not write: a peer the broker refuses at accept may find the socket closed.
    const std::string request = "{\"op\":\"register\",\"protocol\":2}\n";
    (void)!::send(sock, request.data(), request.size(), MSG_NOSIGNAL);
    auto line = read_line_with_fd(sock, buffer, std::chrono::seconds(5), &ledger_fd);
    result = line ? nlohmann::json::parse(*line, nullptr, false)
                  : nlohmann::json{{"ok", false}, {"error", "no reply"}};
  }
  auto* quota = map_file<TenantQuota>(dir / "quota", false);
  auto* ledger = map_fd<TenantLedger>(ledger_fd, true);
  if (ledger_fd >= 0) ::close(ledger_fd);
  const bool registered = result.is_object() && result.value("ok", false) && quota && ledger;
  const uint32_t slot = registered ? result.value("slot", 0u) : 0;
  if (registered && hold > 0 && !broker::ledger::reserve(*ledger, *quota, slot, 0, hold)) {
    result = {{"ok", false}, {"error", "reserve refused"}};
  }
  write_all(report_fd, result.dump() + "\n");
  ::close(report_fd);
  if (!registered) ::_exit(1);
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  std::vector<uint64_t> held;
  while (churn) {
    if (held.size() < 6 && (held.empty() || rng() % 2)) {
      const uint64_t n = (rng() % 32 + 1) * kMiB;
      if (broker::ledger::reserve(*ledger, *quota, slot, 0, n)) held.push_back(n);
    } else {
      broker::ledger::release(*ledger, slot, 0, held.back());
      held.pop_back();
    }
  }
  for (;;) ::pause();
}

}  // namespace

bool fake_driver_available() {
  return ::access(FRACGPU_TEST_FAKE_DRIVER, R_OK) == 0;
}

TempDir::TempDir() {
  std::string pattern = "/tmp/fgt-XXXXXX";  // short: socket paths have a 107-byte limit
  path_ = ::mkdtemp(pattern.data());
  ::chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::seconds timeout) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  ProcessResult r;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int open_fds = 2;
  while (open_fds > 0 && std::chrono::steady_clock::now() < deadline) {
    if (::poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  if (open_fds > 0) ::kill(pid, SIGKILL);
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.status = status_code(status);
  return r;
}

LineClient::LineClient(const std::filesystem::path& socket) : fd_(connect_to(socket)) {}

LineClient::~LineClient() {
  if (fd_ >= 0) ::close(fd_);
}

bool LineClient::send_raw(const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::optional<nlohmann::json> LineClient::read_reply(std::chrono::milliseconds timeout) {
  auto line = read_line(fd_, buffer_, timeout);
  if (!line) return std::nullopt;
  auto j = nlohmann::json::parse(*line, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::optional<nlohmann::json> LineClient::request(const nlohmann::json& j) {
  if (!send_raw(j.dump() + "\n")) return std::nullopt;
  return read_reply();
}

bool LineClient::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

BrokerProcess::BrokerProcess()
    : shm_name_("/fgb-" + std::to_string(::getpid()) + "-" + std::to_string(g_counter++)) {}

BrokerProcess::~BrokerProcess() {
  kill9();
  ::shm_unlink(shm_name_.c_str());
}

std::map<std::string, std::string> BrokerProcess::env() const {
  return {{"FAKECUDA_SHM_NAME", shm_name_},
          {"FAKECUDA_MEMORY", "16GiB"},
          {"FRACGPU_RUN_DIR", run_dir().string()}};
}

bool BrokerProcess::start(const std::vector<std::string>& extra_args) {
  client::BrokerLaunch launch;
  launch.program = {FRACGPU_TEST_BROKER_BIN};
  launch.run_dir = run_dir();
  launch.state_dir = state_dir();
  launch.args = {"--driver", FRACGPU_TEST_FAKE_DRIVER, "--log-level", "debug"};
  launch.args.insert(launch.args.end(), extra_args.begin(), extra_args.end());
  launch.environment = client::current_environment();
  for (const auto& [k, v] : env()) (*launch.environment)[k] = v;
  launch.log_file = dir_.path() / "broker.log";
  launch.ready_timeout = std::chrono::seconds(20);
  return process_.start(launch).ok();
}

void BrokerProcess::kill9() {
  process_.kill();
}

int BrokerProcess::stop() {
  return process_.stop(std::chrono::seconds(60));
}

bool BrokerProcess::alive() {
  return process_.running();
}

std::string BrokerProcess::log() const {
  std::ifstream in(dir_.path() / "broker.log");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<nlohmann::json> BrokerProcess::admin(const nlohmann::json& request) {
  LineClient client(admin_socket());
  if (!client.connected()) return std::nullopt;
  return client.request(request);
}

std::optional<nlohmann::json> BrokerProcess::tenant_status(const std::string& name) {
  auto reply = admin({{"op", "list"}});
  if (!reply || !reply->value("ok", false)) return std::nullopt;
  for (const auto& t : (*reply)["tenants"]) {
    if (t.value("name", "") == name) return t;
  }
  return std::nullopt;
}

bool BrokerProcess::create_tenant(const std::string& name, uint64_t limit,
                                  std::optional<uint64_t> request) {
  nlohmann::json device = {{"gpu", 0}, {"memory_limit", limit}};
  if (request) device["memory_request"] = *request;
  auto reply = admin({{"op", "create"}, {"tenant", {{"name", name}, {"devices", {device}}}}});
  return reply && reply->value("ok", false);
}

TenantProcess::TenantProcess(const std::filesystem::path& tenant_dir, uint64_t hold, bool churn,
                             std::optional<ChildIdentity> as) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return;
  pid_ = ::fork();
  if (pid_ == 0) {
    ::close(report[0]);
    tenant_child(tenant_dir, hold, churn, report[1], as);
  }
  ::close(report[1]);
  std::string buffer;
  if (auto line = read_line(report[0], buffer, std::chrono::seconds(10))) {
    auto j = nlohmann::json::parse(*line, nullptr, false);
    if (j.is_object()) reply_ = j;
  }
  ::close(report[0]);
}

TenantProcess::~TenantProcess() {
  kill9();
}

void TenantProcess::kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

LedgerView::LedgerView(const std::filesystem::path& tenant_dir)
    : ledger_(map_file<TenantLedger>(
          tenant_dir.parent_path().parent_path() / paths::kLedgersDirName / tenant_dir.filename(),
          false)) {}

LedgerView::~LedgerView() {
  if (ledger_ != nullptr) ::munmap(ledger_, sizeof(TenantLedger));
}

}  // namespace fracgpu::test
