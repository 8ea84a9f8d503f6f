// What every fracgpu fuzzer needs: logs that are formatted but go nowhere, a scratch
// directory per process, invariant checks that stop the run (so libFuzzer saves the
// input), the socket framing of LineServer for handlers driven without a socket, and
// the checks every reply of the line protocol must pass. Cost: per input, a few string
// copies; nothing here does I/O except write_file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fracgpu::fuzz {

// Every log call is still formatted (a format bug on a peer's text must show), into a
// null sink at trace level; FRACGPU_FUZZ_LOG=1 sends the lines to stderr instead.
void quiet_logging();

// A directory of this process's own under $FRACGPU_FUZZ_SCRATCH, else /dev/shm, else
// /tmp (keep it short: socket paths are limited to 107 bytes), created on first use and
// removed at exit.
const std::filesystem::path& scratch_dir();

// Prints the broken invariant and aborts: libFuzzer reports a crash and keeps the input.
[[noreturn]] void fail(const std::string& what);

#define FUZZ_CHECK(condition, detail)                                                   \
  do {                                                                                  \
    if (!(condition)) ::fracgpu::fuzz::fail(std::string(#condition) + ": " + (detail)); \
  } while (0)

std::string_view as_text(const uint8_t* data, std::size_t size);

// The requests a peer's bytes make, framed as LineServer::process_lines/handle_line do:
// lines split at '\n' (a last line without one is never handled), blank lines skipped,
// and the connection ends (no more requests) at a line over protocol::kMaxMessageBytes or
// one that is not a JSON object.
std::vector<nlohmann::json> request_lines(std::string_view bytes);

// A reply of the line protocol: an object whose boolean "ok" is false only with a
// non-empty "error" sentence, serialisable the way LineServer::send writes it.
void check_reply(const nlohmann::json& request, const nlohmann::json& reply);

// Calls `handle` as LineServer does, except that an exception is a finding: the broker's
// handlers validate every field and must never throw on a peer's input.
template <class Handler>
nlohmann::json handle_request(const nlohmann::json& request, Handler&& handle) {
  try {
    nlohmann::json reply = handle(request);
    check_reply(request, reply);
    return reply;
  } catch (const std::exception& e) {
    fail(std::string("the handler threw on ") + request.dump() + ": " + e.what());
  }
}

// Fails when this process holds more open descriptors (pipes aside: the sanitizers'
// symbolizer) than after the first input that called it: a request that leaks one (a
// ledger descriptor, a pidfd, a socket) would take the broker to EMFILE. One readdir of
// /proc/self/fd per call.
void check_descriptors(const char* after_what);

// Replaces `path` with `bytes`.
void write_file(const std::filesystem::path& path, std::string_view bytes);

}  // namespace fracgpu::fuzz
