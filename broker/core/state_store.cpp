// tenants.json reading, validation and crash-consistent writing. The file format is
// {"version":1,"tenants":[TENANT...]} with TENANT as in protocol.h plus each GPU's UUID.
// Each entry is validated on its own (tenant_spec_from_json, plus one entry per name),
// so that one bad entry quarantines that tenant only; the file as a whole must parse
// completely, because a truncated list would silently drop every tenant after the cut.
#include "core/state_store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include "fracgpu/protocol.h"

namespace fracgpu::broker {
namespace {

constexpr int kStateVersion = 1;

std::string errno_text() {
  return std::strerror(errno);
}

// "<file>: <problem>; ..." for a file the broker cannot take as a whole.
std::string whole_file_problem(const std::filesystem::path& file, const std::string& what) {
  return file.string() + " " + what + "; no tenant was read from it";
}

std::string entry_label(const nlohmann::json& entry, std::size_t index) {
  if (entry.is_object() && entry.contains("name") && entry["name"].is_string())
    return entry["name"].get<std::string>().substr(0, 80);
  return "entry " + std::to_string(index + 1);
}

InvalidTenantEntry invalid_entry(const nlohmann::json& entry, std::size_t index,
                                 const std::string& why) {
  const std::string name = entry_label(entry, index);
  return {name, entry,
          "tenant " + name + " (entry " + std::to_string(index + 1) + " of tenants.json): " + why};
}

// tenants.json records every limit in bytes: admission replaces a create's "available"
// before the tenant is saved. One found there (a hand-edited file) would otherwise be
// restored as a limit of 0 bytes and written back as one that no longer reads.
std::string unresolved_limit(const TenantSpec& spec) {
  for (std::size_t d = 0; d < spec.devices.size(); ++d) {
    if (spec.devices[d].memory_limit == kMemoryLimitAvailable) {
      return "devices[" + std::to_string(d) + "].memory_limit \"" + protocol::kAvailableMemory +
             "\" is only for creating a tenant; tenants.json gives the limit in bytes";
    }
  }
  return {};
}

std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &tm);
  return text;
}

Result<std::string> read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Result<std::string>::failure(whole_file_problem(file, "cannot be read"));
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Result<std::string>::failure(whole_file_problem(file, "cannot be read"));
  return buf.str();
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

Result<StoredTenants> StateStore::load() const {
  using R = Result<StoredTenants>;
  std::error_code ec;
  if (std::filesystem::exists(temporary_file(), ec)) {
    spdlog::info("removing {}: a save that never completed (tenants.json is the last one made)",
                 temporary_file().string());
    ops_->unlink(temporary_file().c_str());
  }
  if (!std::filesystem::exists(file(), ec)) {
    if (ec) return R::failure(whole_file_problem(file(), "cannot be examined: " + ec.message()));
    return StoredTenants{};
  }
  auto text = read_text(file());
  if (!text) return R::failure(text.error());
  if (text->empty()) return R::failure(whole_file_problem(file(), "is empty (truncated?)"));
  const nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return R::failure(whole_file_problem(file(), "is not complete JSON (truncated or damaged?)"));
  if (!doc.is_object() || !doc.contains("tenants") || !doc["tenants"].is_array())
    return R::failure(
        whole_file_problem(file(), "is not a tenant list ({\"version\":1,\"tenants\":[...]})"));
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || *version != kStateVersion) {
    return R::failure(whole_file_problem(
        file(), "has version " + (version == doc.end() ? std::string("(none)") : version->dump()) +
                    ", this broker reads version " + std::to_string(kStateVersion)));
  }
  StoredTenants out;
  std::set<std::string, std::less<>> names;
  const nlohmann::json& list = doc["tenants"];
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto spec = tenant_spec_from_json(list[i]);
    if (!spec) {
      out.invalid.push_back(invalid_entry(list[i], i, spec.error()));
    } else if (const std::string why = unresolved_limit(*spec); !why.empty()) {
      out.invalid.push_back(invalid_entry(list[i], i, why));
    } else if (!names.insert(spec->name).second) {
      out.invalid.push_back(invalid_entry(list[i], i, "a second entry with the same name"));
    } else {
      out.specs.push_back(std::move(*spec));
      out.entries.push_back(list[i]);
    }
  }
  return out;
}

Status StateStore::save(const std::vector<const TenantSpec*>& tenants,
                        const std::vector<InvalidTenantEntry>& kept) const {
  nlohmann::json list = nlohmann::json::array();
  for (const TenantSpec* t : tenants) list.push_back(tenant_spec_to_json(*t));
  for (const InvalidTenantEntry& e : kept) list.push_back(e.entry);
  const nlohmann::json doc = {{"version", kStateVersion}, {"tenants", std::move(list)}};
  return write_atomically(file(), doc.dump(2) + "\n");
}

Result<std::filesystem::path> StateStore::backup() const {
  using R = Result<std::filesystem::path>;
  auto text = read_text(file());
  if (!text) return R::failure(text.error());
  const std::string stem = file().string() + "." + utc_stamp();
  std::filesystem::path copy = stem + ".bak";
  std::error_code ec;
  for (int n = 2; std::filesystem::exists(copy, ec); ++n)
    copy = stem + "-" + std::to_string(n) + ".bak";
  if (auto s = write_atomically(copy, *text); !s) return R::failure(s.error());
  return copy;
}

// Writes, fsyncs and closes `path`; on any failure the partial file is removed.
Status StateStore::write_file(const std::filesystem::path& path, const std::string& text) const {
  const int fd = ops_->open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::failure("cannot write " + path.string() + ": " + errno_text());
  std::string problem;
  for (std::size_t done = 0; done < text.size() && problem.empty();) {
    const ssize_t n = ops_->write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      problem = "cannot write " + path.string() + ": " + (n == 0 ? "no progress" : errno_text());
    if (n > 0) done += static_cast<std::size_t>(n);
  }
  if (problem.empty() && ops_->fsync(fd) != 0)
    problem = "cannot fsync " + path.string() + ": " + errno_text();
  if (ops_->close(fd) != 0 && problem.empty())
    problem = "cannot close " + path.string() + ": " + errno_text();
  if (problem.empty()) return {};
  ops_->unlink(path.c_str());
  return Status::failure(problem);
}

// write_file to <target>.tmp, rename over `target`, fsync the directory. Before the
// rename nothing visible changed; after it the new content is what a reader sees, so a
// failing directory fsync is only a warning (the caller must treat the save as made).
Status StateStore::write_atomically(const std::filesystem::path& target,
                                    const std::string& text) const {
  const std::filesystem::path tmp = target.string() + ".tmp";
  if (auto s = write_file(tmp, text); !s) return s;
  if (ops_->rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = errno_text();
    ops_->unlink(tmp.c_str());
    return Status::failure("cannot replace " + target.string() + ": " + why);
  }
  const int dir = ops_->open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (dir < 0 || ops_->fsync(dir) != 0)
    spdlog::warn("{} was replaced, but fsync of {} failed: {}", target.string(), dir_.string(),
                 errno_text());
  if (dir >= 0) ops_->close(dir);
  return {};
}

}  // namespace fracgpu::broker
