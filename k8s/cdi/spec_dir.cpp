// Writing, listing and removing fracgpu's CDI spec files (see spec_dir.h).
#include "cdi/spec_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>

namespace fracgpu::k8s::cdi {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

// Writes all of `data` to `fd`, retrying short writes and EINTR.
bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: the rename is already visible to readers
  ::close(fd);
}

}  // namespace

int64_t wall_clock_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

std::vector<std::string> stale_devices(const std::vector<SpecFile>& files,
                                       const std::set<std::string>& listed, int64_t listed_at_ns) {
  std::vector<std::string> stale;
  for (const auto& f : files) {
    if (listed.count(f.device) == 0 && f.written_ns < listed_at_ns) stale.push_back(f.device);
  }
  return stale;
}

Result<SpecDir> SpecDir::open(const std::string& dir, const std::string& kind) {
  using R = Result<SpecDir>;
  if (auto valid = validate_kind(kind); !valid) return R::failure(valid.error());
  if (dir.empty() || dir.front() != '/')
    return R::failure("the CDI directory \"" + dir + "\" is not an absolute path");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return R::failure("cannot create the CDI directory " + dir + ": " + ec.message());
    if (::stat(dir.c_str(), &st) != 0)
      return R::failure("the CDI directory " + dir + ": " + errno_text());
  }
  if (!S_ISDIR(st.st_mode)) return R::failure("the CDI directory " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return R::failure("the CDI directory " + dir +
                      " is not writable by the device plugin: " + errno_text());
  return SpecDir(dir, kind);
}

std::string SpecDir::path_of(const std::string& device) const {
  return dir_ + "/" + spec_file_name(kind_, device);
}

Result<std::string> SpecDir::write(const std::string& device, const ContainerEdits& edits) const {
  using R = Result<std::string>;
  auto spec = device_spec(kind_, device, edits);
  if (!spec) return R::failure(spec.error());
  const std::string target = path_of(device);
  // Ends in ".tmp": a runtime scanning the directory meanwhile skips it.
  std::string temp = dir_ + "/." + spec_file_name(kind_, device) + ".XXXXXX.tmp";
  const int fd = ::mkostemps(temp.data(), 4, O_CLOEXEC);
  if (fd < 0)
    return R::failure("cannot create a file in the CDI directory " + dir_ + ": " + errno_text());
  const std::string text = spec->dump(2) + "\n";
  // mkstemp makes 0600; runtimes may read the spec as any user.
  const bool ok = write_all(fd, text) && ::fchmod(fd, 0644) == 0 && ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  ::close(fd);
  if (!ok || ::rename(temp.c_str(), target.c_str()) != 0) {
    const std::string error = ok ? errno_text() : why;
    ::unlink(temp.c_str());
    return R::failure("cannot write the CDI spec " + target + ": " + error);
  }
  fsync_dir(dir_);
  return qualified_name(kind_, device);
}

Status SpecDir::remove(const std::string& device) const {
  if (::unlink(path_of(device).c_str()) != 0 && errno != ENOENT)
    return Status::failure("cannot remove the CDI spec " + path_of(device) + ": " + errno_text());
  return {};
}

Result<std::vector<SpecFile>> SpecDir::list() const {
  using R = Result<std::vector<SpecFile>>;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir_.c_str()), ::closedir);
  if (!d) return R::failure("cannot read the CDI directory " + dir_ + ": " + errno_text());
  std::vector<SpecFile> files;
  while (const dirent* entry = ::readdir(d.get())) {
    const std::string device = device_of_file(kind_, entry->d_name);
    if (device.empty()) continue;  // another writer's file, ".", "..", a temporary file
    struct stat st {};
    if (::fstatat(::dirfd(d.get()), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode)) continue;
    files.push_back(
        {device, int64_t{st.st_mtim.tv_sec} * 1000000000 + int64_t{st.st_mtim.tv_nsec}});
  }
  return files;
}

Result<std::vector<std::string>> SpecDir::reconcile(const std::set<std::string>& listed,
                                                    int64_t listed_at_ns) const {
  using R = Result<std::vector<std::string>>;
  auto files = list();
  if (!files) return R::failure(files.error());
  std::vector<std::string> removed;
  for (const auto& device : stale_devices(*files, listed, listed_at_ns)) {
    if (auto gone = remove(device); !gone) return R::failure(gone.error());
    removed.push_back(device);
  }
  return removed;
}

}  // namespace fracgpu::k8s::cdi
