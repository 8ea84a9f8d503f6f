// Small helpers shared by the unit tests: read a file, run a command and capture its
// standard output, and parse the X-macro .def files as text.
#pragma once

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fracgpu::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string run_command(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  int rc = pclose(pipe);
  if (status != nullptr) *status = rc;
  return out;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// The first argument of every `macro(...)` line in a .def file.
inline std::set<std::string> def_first_args(const std::string& path, const std::string& macro) {
  std::set<std::string> names;
  std::regex row("^" + macro + R"(\(\s*(\w+))");
  for (const std::string& line : lines_of(read_file(path))) {
    std::smatch m;
    if (std::regex_search(line, m, row)) names.insert(m[1]);
  }
  return names;
}

}  // namespace fracgpu::testing
