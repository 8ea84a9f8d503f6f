// Registration of the CLI process on its tenant socket (see tenant_membership.h).
#include "cli/tenant_membership.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/unix_socket.h"
#include "fracgpu/protocol.h"

namespace fracgpu::cli {

using broker::Result;

Result<TenantMembership> TenantMembership::join(const std::filesystem::path& socket,
                                                std::chrono::milliseconds timeout) {
  using R = Result<TenantMembership>;
  auto fd = broker::connect_unix(socket, timeout);
  if (!fd) return R::failure("no fracgpu broker answers at the tenant socket: " + fd.error());
  TenantMembership membership(*fd, -1);  // closes the socket on every early return
  const std::string request =
      R"({"op":"register","protocol":)" + std::to_string(protocol::kVersion) + "}\n";
  // A broker that refuses this uid says why at once and hangs up, maybe before the request
  // is sent: its sentence is read even when the send fails.
  const bool sent = ::send(*fd, request.data(), request.size(), MSG_NOSIGNAL) ==
                    static_cast<ssize_t>(request.size());
  const std::string send_error = sent ? std::string() : std::strerror(errno);
  // Plain recv: a descriptor passed with the reply is not received, and the kernel closes it.
  std::string line;
  char chunk[4096];
  while (line.find('\n') == std::string::npos && line.size() < protocol::kMaxMessageBytes) {
    const ssize_t n = ::recv(*fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!line.empty()) break;
      const std::string why = !sent    ? send_error
                              : n == 0 ? std::string("no reply")
                                       : std::string(std::strerror(errno));
      return R::failure("cannot register at " + socket.string() + ": " + why);
    }
    line.append(chunk, static_cast<std::size_t>(n));
  }
  line = line.substr(0, line.find('\n'));
  const auto reply = nlohmann::json::parse(line, nullptr, false);
  if (!reply.is_object() || !reply.contains("ok") || !reply["ok"].is_boolean())
    return R::failure("the broker at " + socket.string() + " sent a malformed reply");
  if (!reply["ok"].get<bool>()) {
    const auto& error = reply["error"];
    return R::failure(error.is_string() ? error.get<std::string>()
                                        : "the broker refused the registration");
  }
  const auto& slot = reply["slot"];
  membership.slot_ = slot.is_number_integer() ? slot.get<int>() : -1;
  return R(std::move(membership));
}

TenantMembership::TenantMembership(TenantMembership&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), slot_(other.slot_) {}

TenantMembership& TenantMembership::operator=(TenantMembership&& other) noexcept {
  if (this != &other) {
    leave();
    fd_ = std::exchange(other.fd_, -1);
    slot_ = other.slot_;
  }
  return *this;
}

TenantMembership::~TenantMembership() {
  leave();
}

void TenantMembership::leave() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace fracgpu::cli
