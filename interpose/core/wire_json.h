// Reading the broker's replies inside the shim. The shim is built without exceptions
// (it must never throw into a host application), which rules out a general JSON
// library there; the replies it reads are flat objects produced by the broker, so a
// strict field extractor is enough. Anything malformed yields "absent", never a crash.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fracgpu::wire {

// The value of a top-level "key" in a JSON object, for a number, string or boolean.
std::optional<int64_t> int_field(std::string_view object, std::string_view key);
std::optional<std::string> string_field(std::string_view object, std::string_view key);
std::optional<bool> bool_field(std::string_view object, std::string_view key);

// A JSON string literal (quotes included) with the required escapes.
std::string quote(std::string_view text);

}  // namespace fracgpu::wire
