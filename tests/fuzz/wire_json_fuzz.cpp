// Fuzzer of the shim's reader of broker replies (interpose/core/wire_json.h), which the
// preloaded shim runs on whatever comes back from the socket FRACGPU_SOCKET names: every
// input is read for the fields the shim reads (ok, slot, tenant, quota, ledger_fd,
// error, grant, protocol), and must never crash, hang or read outside the text. When
// the input is a JSON object, it is also re-encoded the way the broker writes replies
// (LineServer::send) and the shim's reading of that text must agree with the JSON:
// every top-level integer within int64, boolean and string read back as what it is
// (the broker's encoder and the shim's decoder are one protocol). Finally wire::quote
// of the input, as a field of an object, reads back as the input without its control
// characters. Seeds: corpus/wire_json/ (replies of the broker, and malformed ones).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "core/wire_json.h"

namespace {

using nlohmann::json;

constexpr const char* kShimFields[] = {"ok",    "slot",  "tenant",   "quota",
                                       "error", "grant", "protocol", "ledger_fd"};

[[noreturn]] void broken(const std::string& what, std::string_view text) {
  std::fprintf(stderr, "fracgpu fuzz invariant broken: %s\n  text: %.*s\n", what.c_str(),
               static_cast<int>(text.size()), text.data());
  std::abort();
}

void read_like_the_shim(std::string_view text) {
  for (const char* key : kShimFields) {
    (void)fracgpu::wire::int_field(text, key);
    (void)fracgpu::wire::string_field(text, key);
    (void)fracgpu::wire::bool_field(text, key);
  }
}

// The broker's encoding of `reply`, read by the shim, field by field.
void check_agreement(const json& reply) {
  const std::string wire = reply.dump(-1, ' ', false, json::error_handler_t::replace);
  const json sent = json::parse(wire);  // what the text says once invalid UTF-8 is replaced
  for (const auto& [key, value] : sent.items()) {
    if (value.is_number_integer() &&
        (value.is_number_unsigned() ? value.get<uint64_t>() <= INT64_MAX : true)) {
      const auto read = fracgpu::wire::int_field(wire, key);
      if (read != value.get<int64_t>()) broken("integer field \"" + key + "\" read wrongly", wire);
    } else if (value.is_boolean()) {
      if (fracgpu::wire::bool_field(wire, key) != value.get<bool>())
        broken("boolean field \"" + key + "\" read wrongly", wire);
    } else if (value.is_string()) {
      if (fracgpu::wire::string_field(wire, key) != value.get<std::string>())
        broken("string field \"" + key + "\" read wrongly", wire);
    }
  }
}

void check_quote(std::string_view text) {
  std::string expected;
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x20) expected += c;
  const std::string object = "{\"k\":" + fracgpu::wire::quote(text) + "}";
  if (fracgpu::wire::string_field(object, "k") != expected)
    broken("a quoted string does not read back", object);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  read_like_the_shim(text);
  check_quote(text);
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) check_agreement(parsed);
  return 0;
}
