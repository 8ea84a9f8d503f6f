// The one /proc/<pid>/stat reader (see proc_stat.h).
#include "common/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <charconv>

namespace fracgpu::broker {
namespace {

template <typename T>
bool parse_number(std::string_view field, T& out) {
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  return ec == std::errc() && ptr == field.data() + field.size();
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  // comm (field 2) may contain spaces and parentheses: fields resume after the LAST ')'.
  const std::size_t close = text.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(close + 1);
  ProcStat out;
  for (int index = 3; index <= 22; ++index) {
    const std::size_t begin = rest.find_first_not_of(' ');
    if (begin == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(begin);
    const std::size_t end = std::min(std::min(rest.find(' '), rest.find('\n')), rest.size());
    const std::string_view field = rest.substr(0, end);
    if (index == 3) {
      if (field.size() != 1) return std::nullopt;
      out.state = field[0];
    } else if (index == 4 && !parse_number(field, out.ppid)) {
      return std::nullopt;
    } else if (index == 22 && !parse_number(field, out.start_time)) {
      return std::nullopt;
    }
    rest.remove_prefix(end);
  }
  return out;
}

std::optional<ProcStat> read_proc_stat(pid_t pid, const std::string& proc_root) {
  if (pid <= 0) return std::nullopt;
  const std::string path = proc_root + "/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::array<char, 4096> buf{};
  const ssize_t n = ::read(fd, buf.data(), buf.size());
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parse_proc_stat(std::string_view(buf.data(), static_cast<std::size_t>(n)));
}

}  // namespace fracgpu::broker
