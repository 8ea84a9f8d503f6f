// Candidate paths for the real CUDA driver and a parser for /etc/ld.so.cache.
#include "core/driver_locator.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace fracgpu {
namespace {

constexpr std::string_view kCacheMagic = "glibc-ld.so.cache1.1";
constexpr std::size_t kHeaderSize =
    48;  // magic+version 20, nlibs 4, len_strings 4, flags 4, ext 4, unused 12
constexpr std::size_t kEntrySize = 24;  // flags 4, key 4, value 4, osversion 4, hwcap 8
constexpr int32_t kFlagTypeMask = 0x00ff;
constexpr int32_t kFlagElfLibc6 = 0x0003;
constexpr int32_t kFlagRequiredMask = 0xff00;
constexpr int32_t kFlagX8664Lib64 = 0x0300;
constexpr const char* kDriverName = "libcuda.so.1";

template <typename T>
T read_at(std::string_view bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

std::string string_at(std::string_view cache, uint32_t offset) {
  if (offset >= cache.size()) return {};
  std::size_t end = cache.find('\0', offset);
  if (end == std::string_view::npos) return {};
  return std::string(cache.substr(offset, end - offset));
}

void add_unique(std::vector<std::string>* list, std::string path) {
  if (path.empty()) return;
  if (std::find(list->begin(), list->end(), path) == list->end()) list->push_back(std::move(path));
}

// POSIX read rather than iostreams: the shim links libstdc++ statically and stays lean.
std::string read_small_file(const char* path) {
  std::string bytes;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bytes;
  char buffer[65536];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0 && bytes.size() < (64u << 20);) {
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

}  // namespace

std::vector<LdCacheEntry> parse_ld_so_cache(std::string_view bytes) {
  std::vector<LdCacheEntry> entries;
  std::size_t start = bytes.find(kCacheMagic);
  if (start == std::string_view::npos || bytes.size() - start < kHeaderSize) return entries;
  std::string_view cache = bytes.substr(start);  // string offsets are relative to this header
  const uint32_t nlibs = read_at<uint32_t>(cache, 20);
  for (uint32_t i = 0; i < nlibs; ++i) {
    std::size_t at = kHeaderSize + static_cast<std::size_t>(i) * kEntrySize;
    if (at + kEntrySize > cache.size()) break;
    const int32_t flags = read_at<int32_t>(cache, at);
    LdCacheEntry entry;
    entry.name = string_at(cache, read_at<uint32_t>(cache, at + 4));
    entry.path = string_at(cache, read_at<uint32_t>(cache, at + 8));
    entry.x86_64 =
        (flags & kFlagTypeMask) == kFlagElfLibc6 && (flags & kFlagRequiredMask) == kFlagX8664Lib64;
    if (!entry.name.empty() && !entry.path.empty()) entries.push_back(std::move(entry));
  }
  return entries;
}

std::vector<std::string> driver_candidates(const DriverSearchInputs& inputs) {
  std::vector<std::string> out;
  if (!inputs.explicit_path.empty()) {
    out.push_back(inputs.explicit_path);  // an explicit choice is never second-guessed
    return out;
  }
  std::string_view dirs = inputs.ld_library_path;
  while (!dirs.empty()) {
    std::size_t colon = dirs.find(':');
    std::string_view dir = dirs.substr(0, colon);
    if (!dir.empty()) add_unique(&out, std::string(dir) + "/" + kDriverName);
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
  }
  for (const LdCacheEntry& entry : inputs.ld_cache) {
    if (entry.name == kDriverName && entry.x86_64) add_unique(&out, entry.path);
  }
  for (const char* dir :
       {"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64", "/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/usr/lib/wsl/lib"}) {
    add_unique(&out, std::string(dir) + "/" + kDriverName);
  }
  return out;
}

DriverSearchInputs driver_search_inputs_from_system(const std::string& explicit_path) {
  DriverSearchInputs inputs;
  inputs.explicit_path = explicit_path;
  if (const char* p = std::getenv("LD_LIBRARY_PATH")) inputs.ld_library_path = p;
  if (explicit_path.empty()) {
    inputs.ld_cache = parse_ld_so_cache(read_small_file("/etc/ld.so.cache"));
  }
  return inputs;
}

}  // namespace fracgpu
