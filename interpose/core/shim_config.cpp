// Parsing of the FRACGPU_* environment and reading the node's facts (see shim_config.h).
// Only calls the shim's glibc floor allows (interpose/glibc_floor.cpp): stat, not lstat
// (inspect_path stats a path whose links realpath has already resolved).
#include "core/shim_config.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "fracgpu/node_broker.h"

namespace fracgpu {
namespace {

bool parse_bool(const char* text, bool* out) {
  static constexpr const char* kTrue[] = {"1", "true", "yes", "on"};
  static constexpr const char* kFalse[] = {"0", "false", "no", "off", ""};
  for (const char* t : kTrue) {
    if (strcasecmp(text, t) == 0) return *out = true, true;
  }
  for (const char* f : kFalse) {
    if (strcasecmp(text, f) == 0) return *out = false, true;
  }
  return false;
}

}  // namespace

ShimConfig parse_shim_config(const EnvLookup& lookup) {
  ShimConfig config;
  if (const char* v = lookup("FRACGPU_DISABLE")) {
    if (!parse_bool(v, &config.disabled)) {
      config.problems.push_back(std::string("FRACGPU_DISABLE='") + v +
                                "' is not a boolean (use 1 or 0); fracgpu stays enabled");
    }
  }
  if (const char* v = lookup("FRACGPU_LOG_LEVEL")) {
    if (!parse_log_level(v, &config.log_level)) {
      config.problems.push_back(std::string("FRACGPU_LOG_LEVEL='") + v +
                                "' is not one of error, warn, info, debug, trace");
    }
  }
  if (const char* v = lookup("FRACGPU_REAL_DRIVER"); v && *v) config.real_driver = v;
  if (const char* v = lookup("FRACGPU_HOOK_STATS"); v && *v) config.hook_stats_path = v;
  if (const char* v = lookup("FRACGPU_SOCKET"); v && *v) {
    config.socket_path = v;
    config.socket_explicit = true;
  }
  return config;
}

ShimConfig shim_config_from_environment() {
  return parse_shim_config([](const char* name) { return std::getenv(name); });
}

std::string expand_pid_pattern(const std::string& pattern, int pid) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      out += std::to_string(pid);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

namespace {

constexpr std::size_t kMaxPreloadBytes = 64 * 1024;

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : std::string();
}

std::string read_small_file(const std::string& path) {
  std::string contents;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return contents;
  char chunk[4096];
  while (contents.size() < kMaxPreloadBytes) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    contents.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return contents;
}

}  // namespace

bool preload_names(const std::string& preload_contents, const std::string& self_real_path) {
  if (self_real_path.empty()) return false;
  static constexpr const char* kSeparators = " \t\r\n:";
  std::size_t at = preload_contents.find_first_not_of(kSeparators);
  while (at != std::string::npos) {
    const std::size_t end = preload_contents.find_first_of(kSeparators, at);
    const std::string name = preload_contents.substr(at, end == std::string::npos ? end : end - at);
    if (real_path(name) == self_real_path) return true;
    at = preload_contents.find_first_not_of(kSeparators, end);
  }
  return false;
}

NodeFacts read_node_facts(const NodePaths& paths, const std::string& self_path) {
  NodeFacts facts;
  struct stat st {};
  facts.pod_socket = ::stat(paths.default_socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  facts.node_broker_uid = node_broker_uid(paths.run_dir);
  if (!self_path.empty() && ::access(paths.preload_file.c_str(), F_OK) == 0)
    facts.preloaded_by_node =
        preload_names(read_small_file(paths.preload_file), real_path(self_path));
  return facts;
}

bool inspect_path(const std::string& path, std::string* canonical, std::vector<PathEntry>* entries,
                  std::string* error) {
  entries->clear();
  *canonical = real_path(path);
  if (canonical->empty() || (*canonical)[0] != '/') {
    *error = "cannot resolve " + path + ": " + std::strerror(errno);
    return false;
  }
  std::size_t end = 0;
  for (;;) {
    const std::string prefix = end == 0 ? std::string("/") : canonical->substr(0, end);
    struct stat st {};
    if (::stat(prefix.c_str(), &st) != 0) {
      *error = "cannot examine " + prefix + ": " + std::strerror(errno);
      return false;
    }
    entries->push_back({prefix, st.st_uid, st.st_mode});
    if (end == canonical->size() || *canonical == "/") return true;
    end = canonical->find('/', end + 1);
    if (end == std::string::npos) end = canonical->size();
  }
}

}  // namespace fracgpu
