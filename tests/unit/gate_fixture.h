// A launch gate bound to heap segments, with a datagram socket of the test's own as the
// broker's doorbell: what the gate tests (compute_gate_test.cpp) and the liveness tests
// (gate_liveness_test.cpp) both drive. publish() plays the broker's grant, rings() counts
// the doorbell's datagrams. The gate watches slot 3's schedule of device 0.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "core/doorbell.h"
#include "core/grant_gate.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

struct GateFixture : ::testing::Test {
  std::unique_ptr<TenantQuota> quota = std::make_unique<TenantQuota>();
  std::unique_ptr<TenantLedger> ledger = std::make_unique<TenantLedger>();
  Doorbell doorbell;
  GrantGate gate;
  int bell_fd = -1;
  std::string bell_path = "/tmp/fracgpu-gate-test-" + std::to_string(getpid());

  void SetUp() override {
    bell_fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, bell_path.c_str());
    ::unlink(bell_path.c_str());
    ASSERT_EQ(::bind(bell_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    doorbell.set_path(bell_path);
    gate.bind(&quota->devices[0], &ledger->devices[0], &ledger->schedule[3][0], &doorbell);
  }
  void TearDown() override {
    if (bell_fd >= 0) ::close(bell_fd);
    ::unlink(bell_path.c_str());
  }
  void publish(uint32_t epoch, bool granted) {
    quota->devices[0].grant_word.store(make_grant_word(epoch, granted, false));
    futex_wake_all(quota->devices[0].grant_word);
  }
  int rings() {
    int n = 0;
    char b;
    while (::recv(bell_fd, &b, 1, MSG_DONTWAIT) == 1) ++n;
    return n;
  }
};

}  // namespace fracgpu
