// TenantSession against a fake broker on a real Unix socket: registration speaks
// protocol 2 and maps the ledger from the descriptor passed with the reply (the quota by
// path, read-only), closes that descriptor, and keeps its mapping when it registers again
// (after a broker restart, in a forked child) — closing the new descriptor, and refusing a
// descriptor of another file. A reply without a descriptor is refused.
#include "core/tenant_session.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "fake_broker.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {
namespace {

using testing::FakeBroker;
using testing::make_segment;

// How many of this process's descriptors are open on `path` (the mapping is not one),
// once the fake broker's thread has closed its own copy (within a second).
int descriptors_on(const std::string& path) {
  int n = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      n += std::filesystem::read_symlink(e.path(), ec) == path;
    }
    if (n == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return n;
}

class TenantSessionTest : public ::testing::Test {
 protected:
  TenantSessionTest() {
    std::string pattern = "/tmp/fgts-XXXXXX";
    dir_ = ::mkdtemp(pattern.data());
    quota_ = make_segment<TenantQuota>(dir_ + "/quota", kQuotaMagic);
    ledger_ = make_segment<TenantLedger>(dir_ + "/elsewhere-ledger", kLedgerMagic);
    other_ledger_ = make_segment<TenantLedger>(dir_ + "/other-ledger", kLedgerMagic);
  }
  ~TenantSessionTest() override {
    ::munmap(quota_, sizeof(TenantQuota));
    ::munmap(ledger_, sizeof(TenantLedger));
    ::munmap(other_ledger_, sizeof(TenantLedger));
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The broker's answers: register -> slot `slot_`, the ledger in `ledger_file_`.
  FakeBroker::Reply answer(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.push_back(line);
    if (line.find("\"burst\"") != std::string::npos) return {R"({"ok":true,"grant":1})", ""};
    return {R"({"ok":true,"protocol":2,"tenant":"t","slot":)" + std::to_string(slot_) +
                R"(,"quota":"quota","ledger_fd":true})",
            with_fd_ ? dir_ + "/" + ledger_file_ : ""};
  }

  std::string socket() const { return dir_ + "/broker.sock"; }

  std::string dir_;
  TenantQuota* quota_ = nullptr;
  TenantLedger *ledger_ = nullptr, *other_ledger_ = nullptr;
  std::mutex mutex_;
  std::vector<std::string> requests_;
  int slot_ = 3;
  std::string ledger_file_ = "elsewhere-ledger";
  bool with_fd_ = true;
};

TEST_F(TenantSessionTest, MapsTheLedgerFromThePassedDescriptorAndClosesIt) {
  FakeBroker broker(socket(), [this](const std::string& l) { return answer(l); });
  TenantSession session;
  std::string error;
  ASSERT_TRUE(session.attach(socket(), 2000, &error)) << error;
  EXPECT_EQ(requests_.at(0), R"({"op":"register","protocol":2})");
  EXPECT_EQ(session.slot(), 3u);
  EXPECT_EQ(session.tenant(), "t");
  // The mapping is the broker's ledger file, though no path to it was ever given.
  session.ledger_map()->devices[0].used.store(12345);
  EXPECT_EQ(ledger_->devices[0].used.load(), 12345u);
  EXPECT_NE(session.quota(), nullptr);
  EXPECT_EQ(descriptors_on(dir_ + "/elsewhere-ledger"), 0);  // mapped, its descriptor closed
}

TEST_F(TenantSessionTest, ReRegistrationAfterABrokerRestartKeepsTheMapping) {
  FakeBroker broker(socket(), [this](const std::string& l) { return answer(l); });
  TenantSession session;
  std::string error;
  ASSERT_TRUE(session.attach(socket(), 2000, &error)) << error;
  TenantLedger* mapped = session.ledger_map();
  broker.hang_up();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(session.request_burst(0, 1, &error)) << error;
  EXPECT_EQ(broker.registrations(), 2);
  EXPECT_EQ(session.ledger_map(), mapped);
  EXPECT_EQ(session.slot(), 3u);
  EXPECT_EQ(descriptors_on(dir_ + "/elsewhere-ledger"), 0);  // the new descriptor was closed
}

TEST_F(TenantSessionTest, AForkedChildRegistersItsOwnSlotOverTheSameMapping) {
  FakeBroker broker(socket(), [this](const std::string& l) { return answer(l); });
  TenantSession session;
  std::string error;
  ASSERT_TRUE(session.attach(socket(), 2000, &error)) << error;
  TenantLedger* mapped = session.ledger_map();
  session.forget_parent_after_fork();  // as in the child (here: the same process)
  EXPECT_TRUE(session.needs_registration());
  slot_ = 7;
  ASSERT_TRUE(session.register_forked_child(&error)) << error;
  EXPECT_FALSE(session.needs_registration());
  EXPECT_EQ(session.slot(), 7u);
  EXPECT_EQ(session.ledger_map(), mapped);
  EXPECT_EQ(descriptors_on(dir_ + "/elsewhere-ledger"), 0);
}

TEST_F(TenantSessionTest, ADescriptorOfAnotherLedgerOnReRegistrationIsRefused) {
  FakeBroker broker(socket(), [this](const std::string& l) { return answer(l); });
  TenantSession session;
  std::string error;
  ASSERT_TRUE(session.attach(socket(), 2000, &error)) << error;
  ledger_file_ = "other-ledger";
  session.forget_parent_after_fork();
  EXPECT_FALSE(session.register_forked_child(&error));
  EXPECT_NE(error.find("another ledger file"), std::string::npos) << error;
}

TEST_F(TenantSessionTest, AReplyWithoutTheDescriptorIsRefused) {
  with_fd_ = false;
  FakeBroker broker(socket(), [this](const std::string& l) { return answer(l); });
  TenantSession session;
  std::string error;
  EXPECT_FALSE(session.attach(socket(), 2000, &error));
  EXPECT_FALSE(session.attached());
  EXPECT_NE(error.find("without the ledger descriptor"), std::string::npos) << error;
}

}  // namespace
}  // namespace fracgpu
