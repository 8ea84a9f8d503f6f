// tenants.json reading and atomic writing. The file format is
// {"version":1,"tenants":[TENANT...]} with TENANT as in protocol.h plus each GPU's UUID.
#include "core/state_store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fracgpu::broker {
namespace {

constexpr int kStateVersion = 1;

Status write_all_and_sync(const std::filesystem::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::failure("cannot write " + path.string() + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return Status::failure("cannot write " + path.string() + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced)
    return Status::failure("cannot fsync " + path.string() + ": " + std::strerror(errno));
  return {};
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void move_aside(const std::filesystem::path& file) {
  std::error_code ec;
  std::filesystem::rename(file, file.string() + ".bad", ec);
}

}  // namespace

Status StateStore::prepare() const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    return Status::failure("cannot create the state directory " + dir_.string() + ": " +
                           ec.message());
  return {};
}

std::vector<TenantSpec> StateStore::load() const {
  std::vector<TenantSpec> out;
  std::ifstream in(file());
  if (!in) return out;
  std::stringstream buf;
  buf << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("tenants") || !j["tenants"].is_array()) {
    spdlog::error("{} is not a valid tenant list; moved it to {}.bad and starting without tenants",
                  file().string(), file().string());
    move_aside(file());
    return out;
  }
  if (j.value("version", 0) != kStateVersion) {
    spdlog::warn("{} has version {}, expected {}; reading it anyway", file().string(),
                 j.value("version", 0), kStateVersion);
  }
  for (const auto& t : j["tenants"]) {
    auto spec = tenant_spec_from_json(t);
    if (!spec) {
      spdlog::error("skipping a tenant in {}: {}", file().string(), spec.error());
      continue;
    }
    out.push_back(std::move(*spec));
  }
  return out;
}

Status StateStore::save(const std::vector<const TenantSpec*>& tenants) const {
  nlohmann::json list = nlohmann::json::array();
  for (const TenantSpec* t : tenants) list.push_back(tenant_spec_to_json(*t));
  const nlohmann::json doc = {{"version", kStateVersion}, {"tenants", std::move(list)}};
  const std::filesystem::path tmp = dir_ / "tenants.json.tmp";
  if (auto s = write_all_and_sync(tmp, doc.dump(2) + "\n"); !s) return s;
  std::error_code ec;
  std::filesystem::rename(tmp, file(), ec);
  if (ec) return Status::failure("cannot replace " + file().string() + ": " + ec.message());
  sync_directory(dir_);
  return {};
}

}  // namespace fracgpu::broker
