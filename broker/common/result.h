// A tiny "value or one-sentence error" type used across the broker and the CLI.
// C++20 has no std::expected, and the broker must never throw on bad input, so every
// fallible operation that a peer or a user can trigger returns Result<T> (or Status)
// whose error is the sentence that ends up, unchanged, in a reply or on stderr.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace fracgpu::broker {

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  static Result failure(std::string error) {
    Result r;
    r.error_ = std::move(error);
    return r;
  }
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  const std::string& error() const { return error_; }

 private:
  Result() = default;
  std::optional<T> value_;
  std::string error_;
};

// Success or an error sentence, for operations with no value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status failure(std::string error) {
    Status s;
    s.failed_ = true;
    s.error_ = std::move(error);
    return s;
  }
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const std::string& error() const { return error_; }

 private:
  bool failed_ = false;
  std::string error_;
};

}  // namespace fracgpu::broker
