// A client's side of the admin socket (the CLI's and the device plugin's): one
// connection, one JSON request per line, one reply line back (protocol.h). Transport
// problems and broker refusals both come back as a one-sentence error, ready to print.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"

namespace fracgpu::client {

using broker::Result;
using broker::Status;

// True when AdminClient::connect failed because the caller may not use the admin socket
// (it is 0600, root's: the error then already says so, and a command should print it
// rather than "no broker answers").
bool admin_access_denied(const std::string& connect_error);

class AdminClient {
 public:
  // Connects to <run_dir>/admin.sock.
  static Result<AdminClient> connect(const std::filesystem::path& run_dir,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(30));
  AdminClient(AdminClient&& other) noexcept;
  AdminClient& operator=(AdminClient&& other) noexcept;
  AdminClient(const AdminClient&) = delete;
  AdminClient& operator=(const AdminClient&) = delete;
  ~AdminClient();

  // The raw reply (ok true or false), or a transport error.
  Result<nlohmann::json> exchange(const nlohmann::json& request);
  // The reply when "ok" is true; the broker's "error" sentence otherwise.
  Result<nlohmann::json> call(const nlohmann::json& request);

  const std::filesystem::path& socket_path() const { return path_; }

 private:
  AdminClient(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  Result<std::string> read_line();

  int fd_ = -1;
  std::filesystem::path path_;
  std::string buffer_;
};

}  // namespace fracgpu::client
