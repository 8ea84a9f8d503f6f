// Test doubles of the broker's side for the shim's session tests (tenant_session_test,
// ledger_watch_test): segment files with a valid header, and a broker on a real Unix
// socket that answers each request line as the test says, passing a descriptor of a named
// file with the reply (as the real broker passes the ledger). No hot path.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "fracgpu/descriptor_passing.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::testing {

// A segment file of T's size with a valid header, mapped read-write until unmapped.
template <class T>
inline T* make_segment(const std::string& path, uint64_t magic) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::ftruncate(fd, sizeof(T)), 0);
  auto* p = static_cast<T*>(::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  EXPECT_NE(p, MAP_FAILED);
  p->major = kSegmentMajor;
  p->minor = kSegmentMinor;
  p->size = sizeof(T);
  p->magic = magic;
  return p;
}

// One connection at a time; each request line gets `answer(line)`'s reply and, when it
// names a file, a descriptor of that file opened read-write.
class FakeBroker {
 public:
  struct Reply {
    std::string line;
    std::string fd_of;  // a path to pass as a descriptor, or ""
  };
  FakeBroker(const std::string& path, std::function<Reply(const std::string&)> answer)
      : path_(path), answer_(std::move(answer)) {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_fd_, 8), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeBroker() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
  // What a broker restart does to its clients: their connection is hung up.
  void hang_up() { hang_up_ = true; }
  int registrations() const { return registrations_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      std::string in;
      while (!stop_ && !hang_up_) {
        pollfd c{client, POLLIN, 0};
        if (::poll(&c, 1, 20) <= 0) continue;
        char buf[4096];
        const ssize_t n = ::read(client, buf, sizeof buf);
        if (n <= 0) break;
        in.append(buf, static_cast<std::size_t>(n));
        for (auto nl = in.find('\n'); nl != std::string::npos; nl = in.find('\n')) {
          const std::string line = in.substr(0, nl);
          in.erase(0, nl + 1);
          if (line.find("register") != std::string::npos) ++registrations_;
          send_reply(client, answer_(line));
        }
      }
      hang_up_ = false;
      ::close(client);
    }
  }
  static void send_reply(int client, const Reply& r) {
    const std::string text = r.line + "\n";
    const int fd = r.fd_of.empty() ? -1 : ::open(r.fd_of.c_str(), O_RDWR | O_CLOEXEC);
    const ssize_t sent = fd >= 0 ? fracgpu::descriptor_passing::send_with(
                                       client, text.data(), text.size(), fd, MSG_NOSIGNAL)
                                 : ::send(client, text.data(), text.size(), MSG_NOSIGNAL);
    EXPECT_EQ(sent, static_cast<ssize_t>(text.size()));
    if (fd >= 0) ::close(fd);
  }

  std::string path_;
  std::function<Reply(const std::string&)> answer_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false}, hang_up_{false};
  std::atomic<int> registrations_{0};
  std::thread thread_;
};

}  // namespace fracgpu::testing
