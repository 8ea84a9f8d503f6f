// Shared mappings of segment files (see file_mapping.h).
#include "core/file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fracgpu {

void* map_segment_file(const std::string& path, bool writable, std::size_t* size,
                       std::string* error) {
  int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    if (error != nullptr) *error = "cannot open " + path;
    return nullptr;
  }
  struct stat st {};
  void* address = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    *size = static_cast<std::size_t>(st.st_size);
    address =
        ::mmap(nullptr, *size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (address == MAP_FAILED) {
    if (error != nullptr) *error = "cannot map " + path;
    return nullptr;
  }
  return address;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace fracgpu
