// Implementation of TestUser (see test_user.h). useradd/userdel lock /etc/passwd, and
// tests run in parallel, so both are retried for a few seconds when the lock is busy.
#include "test_user.h"

#include <pwd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace fracgpu::testing {
namespace {

ProcessResult run_with_retries(const std::vector<std::string>& argv) {
  ProcessResult result;
  for (int attempt = 0; attempt < 50; ++attempt) {
    result = run_process(argv, clean_environment(), std::chrono::seconds(30));
    if (result.exit_code == 0 && result.signal == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // /etc/passwd locked?
  }
  return result;
}

}  // namespace

std::optional<TestUser> TestUser::create(std::string* why) {
  if (::geteuid() != 0) {
    *why = "creating a test user needs root";
    return std::nullopt;
  }
  static std::atomic<int> counter{0};
  const std::string name = "fgt-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  auto result = run_with_retries({"useradd", "--system", "--no-create-home", "--user-group",
                                  "--shell", "/usr/sbin/nologin", name});
  if (result.exit_code != 0) {
    *why = "useradd " + name + " failed: " + result.err;
    return std::nullopt;
  }
  const passwd* entry = ::getpwnam(name.c_str());
  if (entry == nullptr) {
    *why = "useradd created " + name + " but getpwnam does not find it";
    run_with_retries({"userdel", name});
    return std::nullopt;
  }
  return TestUser(name, entry->pw_uid, entry->pw_gid);
}

TestUser::TestUser(TestUser&& other) noexcept
    : name_(std::move(other.name_)), uid_(other.uid_), gid_(other.gid_) {
  other.name_.clear();
}

TestUser::~TestUser() {
  if (!name_.empty()) run_with_retries({"userdel", name_});
}

}  // namespace fracgpu::testing
