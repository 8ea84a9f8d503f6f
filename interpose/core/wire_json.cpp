// A strict scanner for flat JSON objects (see wire_json.h). It walks the object's
// top level token by token, skipping nested values, so a key that appears inside a
// nested object or inside a string is never mistaken for a top-level field.
#include "core/wire_json.h"

#include <cctype>
#include <cstdlib>

namespace fracgpu::wire {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) return ++pos_, true;
    return false;
  }
  std::optional<std::string> string() {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != '"') return std::nullopt;
    std::string out;
    for (++pos_; pos_ < text_.size(); ++pos_) {
      char c = text_[pos_];
      if (c == '"') return ++pos_, out;
      if (c == '\\') {
        if (++pos_ >= text_.size()) return std::nullopt;
        char e = text_[pos_];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;  // \uXXXX is not produced by the broker
      } else {
        out += c;
      }
    }
    return std::nullopt;
  }
  // Returns the raw text of a scalar, or skips a nested value (returning empty).
  std::optional<std::string_view> value() {
    skip_space();
    if (pos_ >= text_.size()) return std::nullopt;
    char c = text_[pos_];
    if (c == '"') {
      std::size_t start = pos_;
      if (!string()) return std::nullopt;
      return text_.substr(start, pos_ - start);
    }
    if (c == '{' || c == '[')
      return skip_nested() ? std::optional<std::string_view>("") : std::nullopt;
    std::size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}' &&
           !std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    return text_.substr(start, pos_ - start);
  }

 private:
  bool skip_nested() {
    int depth = 0;
    for (; pos_ < text_.size(); ++pos_) {
      char c = text_[pos_];
      if (c == '"') {
        if (!string()) return false;
        --pos_;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        return ++pos_, true;
      }
    }
    return false;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

std::optional<std::string_view> raw_field(std::string_view object, std::string_view key) {
  Scanner s(object);
  if (!s.eat('{')) return std::nullopt;
  if (s.eat('}')) return std::nullopt;
  for (;;) {
    auto name = s.string();
    if (!name || !s.eat(':')) return std::nullopt;
    auto value = s.value();
    if (!value) return std::nullopt;
    if (*name == key) return value;
    if (s.eat('}')) return std::nullopt;
    if (!s.eat(',')) return std::nullopt;
  }
}

}  // namespace

std::optional<int64_t> int_field(std::string_view object, std::string_view key) {
  auto raw = raw_field(object, key);
  if (!raw || raw->empty() || raw->size() > 20) return std::nullopt;
  std::string text(*raw);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<std::string> string_field(std::string_view object, std::string_view key) {
  auto raw = raw_field(object, key);
  if (!raw || raw->empty() || raw->front() != '"') return std::nullopt;
  Scanner s(*raw);
  return s.string();
}

std::optional<bool> bool_field(std::string_view object, std::string_view key) {
  auto raw = raw_field(object, key);
  if (raw && *raw == "true") return true;
  if (raw && *raw == "false") return false;
  return std::nullopt;
}

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

}  // namespace fracgpu::wire
