// Shared mappings of segment files (see file_mapping.h).
#include "core/file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fracgpu {

void* map_segment_fd(int fd, bool writable, std::size_t* size, std::string* error) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    if (error != nullptr) *error = "the descriptor is not a non-empty regular file";
    return nullptr;
  }
  void* address = ::mmap(nullptr, static_cast<std::size_t>(st.st_size),
                         writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    if (error != nullptr) *error = writable ? "cannot map it read-write" : "cannot map it";
    return nullptr;
  }
  *size = static_cast<std::size_t>(st.st_size);
  return address;
}

void* map_segment_file(const std::string& path, bool writable, std::size_t* size,
                       std::string* error) {
  const int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    if (error != nullptr) *error = "cannot open " + path;
    return nullptr;
  }
  void* address = map_segment_fd(fd, writable, size);
  ::close(fd);
  if (address == nullptr && error != nullptr) *error = "cannot map " + path;
  return address;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace fracgpu
