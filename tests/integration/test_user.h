// Unprivileged users created by a test and removed afterwards, for the trust-boundary
// tests: "another local user" must be a real account (its own uid and group), not a
// borrowed system one such as nobody, so that nothing the test does depends on what a
// machine's image happens to give that account. Needs root (useradd/userdel); create()
// says why when it cannot, and the test decides (CI runs as root: there it always works).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "child_process.h"

namespace fracgpu::testing {

class TestUser {
 public:
  // A fresh system account "fgt-<pid>-<n>" with its own group, no home, no login shell.
  // nullopt, with the reason in *why, when not root or useradd fails.
  static std::optional<TestUser> create(std::string* why);
  ~TestUser();
  TestUser(TestUser&& other) noexcept;
  TestUser& operator=(TestUser&&) = delete;
  TestUser(const TestUser&) = delete;
  TestUser& operator=(const TestUser&) = delete;

  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }
  RunAs run_as() const { return RunAs{uid_, gid_}; }

 private:
  TestUser(std::string name, uid_t uid, gid_t gid) : name_(std::move(name)), uid_(uid), gid_(gid) {}
  std::string name_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

}  // namespace fracgpu::testing
