// A reader of the Prometheus text exposition (format 0.0.4) for the metrics tests: the
// "# TYPE" lines and every sample with its labels unescaped (\\, \" and \n), so tests
// check what a Prometheus server would store, not substrings of the text.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fracgpu::broker::testing {

using Labels = std::map<std::string, std::string>;

struct Sample {
  std::string name;
  Labels labels;
  double value = 0;
};

inline std::set<std::string> keys(const Labels& labels) {
  std::set<std::string> out;
  for (const auto& [k, v] : labels) out.insert(k);
  return out;
}

class Exposition {
 public:
  static Exposition parse(const std::string& text) {
    Exposition e;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      if (line.rfind("# TYPE ", 0) == 0) {
        std::istringstream words(line.substr(7));
        std::string name, type;
        words >> name >> type;
        e.types_[name] = type;
      } else if (line[0] != '#') {
        e.samples_.push_back(parse_sample(line));
      }
    }
    return e;
  }

  std::string type(const std::string& family) const {
    auto it = types_.find(family);
    return it == types_.end() ? "(absent)" : it->second;
  }
  const std::vector<Sample>& all() const { return samples_; }
  std::vector<const Sample*> samples(const std::string& name) const {
    std::vector<const Sample*> out;
    for (const Sample& s : samples_)
      if (s.name == name) out.push_back(&s);
    return out;
  }
  // The one sample of `name` whose labels include `filter` (nullptr if none or several).
  const Sample* find(const std::string& name, const Labels& filter) const {
    const Sample* found = nullptr;
    for (const Sample* s : samples(name)) {
      bool match = true;
      for (const auto& [k, v] : filter) {
        auto it = s->labels.find(k);
        match = match && it != s->labels.end() && it->second == v;
      }
      if (!match) continue;
      if (found != nullptr) return nullptr;
      found = s;
    }
    return found;
  }
  double value(const std::string& name, const Labels& filter) const {
    const Sample* s = find(name, filter);
    if (s == nullptr) {
      ADD_FAILURE() << "no single sample " << name << " with the labels asked for";
      return std::nan("");
    }
    return s->value;
  }

 private:
  static Sample parse_sample(const std::string& line) {
    Sample s;
    std::size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (i != std::string::npos && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const std::size_t eq = line.find('=', i);
        const std::string key = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        s.labels[key] = value;
        ++i;  // the closing quote
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    s.value = std::strtod(line.c_str() + i, nullptr);
    return s;
  }

  std::map<std::string, std::string> types_;
  std::vector<Sample> samples_;
};

}  // namespace fracgpu::broker::testing
