// Blocking admin-socket client (timeouts come from connect_unix's socket options).
#include "client/admin_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "client/run_paths.h"
#include "common/unix_socket.h"

namespace fracgpu::client {
namespace {

constexpr std::size_t kMaxReplyBytes = 64u << 20;  // replies (lists) may exceed the request limit
constexpr const char* kDeniedPrefix = "permission denied: ";

}  // namespace

bool admin_access_denied(const std::string& connect_error) {
  return connect_error.rfind(kDeniedPrefix, 0) == 0;
}

Result<AdminClient> AdminClient::connect(const std::filesystem::path& run_dir,
                                         std::chrono::milliseconds timeout) {
  const auto path = admin_socket_path(run_dir);
  auto fd = broker::connect_unix(path, timeout);
  if (!fd && fd.error().find(std::strerror(EACCES)) != std::string::npos) {
    return Result<AdminClient>::failure(
        std::string(kDeniedPrefix) + path.string() +
        " is the fracgpu node's admin socket, which only root (or the broker's own user) may "
        "use; run this command as root (e.g. with sudo)");
  }
  if (!fd) return Result<AdminClient>::failure(fd.error());
  return AdminClient(*fd, path);
}

AdminClient::AdminClient(AdminClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      buffer_(std::move(other.buffer_)) {}

AdminClient& AdminClient::operator=(AdminClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

AdminClient::~AdminClient() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::string> AdminClient::read_line() {
  for (;;) {
    if (const std::size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (buffer_.size() > kMaxReplyBytes)
      return Result<std::string>::failure("the broker's reply is too long");
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      const std::string why = n == 0 ? "it closed the connection" : std::strerror(errno);
      return Result<std::string>::failure("no reply from the broker at " + path_.string() + " (" +
                                          why + ")");
    }
  }
}

Result<nlohmann::json> AdminClient::exchange(const nlohmann::json& request) {
  const std::string line = request.dump() + "\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Result<nlohmann::json>::failure("cannot talk to the broker at " + path_.string() +
                                             ": " + std::strerror(errno));
    }
    sent += static_cast<std::size_t>(n);
  }
  auto reply_line = read_line();
  if (!reply_line) return Result<nlohmann::json>::failure(reply_line.error());
  auto reply = nlohmann::json::parse(*reply_line, nullptr, false);
  if (!reply.is_object() || !reply.contains("ok") || !reply["ok"].is_boolean()) {
    return Result<nlohmann::json>::failure("the broker at " + path_.string() +
                                           " sent a malformed reply");
  }
  return reply;
}

Result<nlohmann::json> AdminClient::call(const nlohmann::json& request) {
  auto reply = exchange(request);
  if (!reply) return reply;
  if (!(*reply)["ok"].get<bool>()) {
    const auto& err = (*reply)["error"];
    return Result<nlohmann::json>::failure(err.is_string() ? err.get<std::string>()
                                                           : "the broker refused the request");
  }
  return reply;
}

}  // namespace fracgpu::client
