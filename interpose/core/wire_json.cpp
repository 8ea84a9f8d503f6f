// A strict scanner for flat JSON objects (see wire_json.h). It walks the object's
// top level token by token, skipping nested values, so a key that appears inside a
// nested object or inside a string is never mistaken for a top-level field.
#include "core/wire_json.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
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
        if (++pos_ >= text_.size() || !unescape(out)) return std::nullopt;
      } else {
        out += c;
      }
    }
    return std::nullopt;
  }
  // The escape at pos_ (the character after the backslash), appended to `out`; pos_ is
  // left on its last character. The broker's encoder (nlohmann::json::dump) writes \b \f
  // \n \r \t, \" \\ and \u00XX for the other control characters; \uXXXX is decoded to
  // UTF-8 in full (surrogate pairs included) so that a string reads back as it was sent.
  // False for a malformed \u escape.
  bool unescape(std::string& out) {
    switch (const char e = text_[pos_]) {
      case 'b':
        return out += '\b', true;
      case 'f':
        return out += '\f', true;
      case 'n':
        return out += '\n', true;
      case 'r':
        return out += '\r', true;
      case 't':
        return out += '\t', true;
      case 'u':
        return unicode(out);
      default:
        return out += e, true;  // \" \\ \/ (and, leniently, anything else as itself)
    }
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

  // Four hex digits after pos_ (on the 'u'); pos_ is left on the last of them.
  std::optional<uint32_t> hex4() {
    if (text_.size() - pos_ < 5) return std::nullopt;
    uint32_t value = 0;
    for (std::size_t i = 1; i <= 4; ++i) {
      const char c = text_[pos_ + i];
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + static_cast<uint32_t>(digit);
    }
    pos_ += 4;
    return value;
  }
  bool unicode(std::string& out) {
    auto unit = hex4();
    if (!unit || (*unit >= 0xDC00 && *unit <= 0xDFFF)) return false;  // none, or a lone low half
    uint32_t code = *unit;
    if (code >= 0xD800 && code <= 0xDBFF) {  // a high surrogate: "\uDC00".."\uDFFF" must follow
      if (text_.size() - pos_ < 7 || text_[pos_ + 1] != '\\' || text_[pos_ + 2] != 'u')
        return false;
      pos_ += 2;
      auto low = hex4();
      if (!low || *low < 0xDC00 || *low > 0xDFFF) return false;
      code = 0x10000 + ((code - 0xD800) << 10) + (*low - 0xDC00);
    }
    append_utf8(out, code);
    return true;
  }
  static void append_utf8(std::string& out, uint32_t code) {
    auto byte = [&](uint32_t b) { out += static_cast<char>(static_cast<unsigned char>(b)); };
    auto tail = [&](int shift) { byte(0x80 | ((code >> shift) & 0x3F)); };
    if (code < 0x80) {
      byte(code);
    } else if (code < 0x800) {
      byte(0xC0 | (code >> 6));
      tail(0);
    } else if (code < 0x10000) {
      byte(0xE0 | (code >> 12));
      tail(6);
      tail(0);
    } else {
      byte(0xF0 | (code >> 18));
      tail(12);
      tail(6);
      tail(0);
    }
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
