// Logging, scratch directory, failure reporting and the line framing of fuzz_support.h.
#include "fuzz_support.h"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "fracgpu/protocol.h"

namespace fracgpu::fuzz {
namespace {

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

void remove_scratch() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir(), ec);
}

}  // namespace

void quiet_logging() {
  const char* wanted = std::getenv("FRACGPU_FUZZ_LOG");
  const bool to_stderr = wanted != nullptr && std::string_view(wanted) == "1";
  spdlog::sink_ptr sink;
  if (to_stderr) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::null_sink_mt>();
  }
  auto logger = std::make_shared<spdlog::logger>("fuzz", sink);
  logger->set_level(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    // Memory-backed where there is one: the fuzzers rewrite files on every input.
    const char* chosen = std::getenv("FRACGPU_FUZZ_SCRATCH");
    const std::string base = chosen != nullptr                        ? chosen
                             : ::access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm"
                                                                      : "/tmp";
    std::string pattern = base + "/fgz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) fail("cannot create a scratch directory in /tmp");
    std::atexit(remove_scratch);
    return std::filesystem::path(pattern);
  }();
  return dir;
}

void fail(const std::string& what) {
  std::fprintf(stderr, "fracgpu fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string_view as_text(const uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

std::vector<nlohmann::json> request_lines(std::string_view bytes) {
  std::vector<nlohmann::json> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t nl = bytes.find('\n', start);
    const std::size_t length = (nl == std::string_view::npos ? bytes.size() : nl) - start;
    if (length > protocol::kMaxMessageBytes || nl == std::string_view::npos) return out;
    const std::string_view line = bytes.substr(start, length);
    start = nl + 1;
    if (blank(line)) continue;
    nlohmann::json request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!request.is_object()) return out;
    out.push_back(std::move(request));
  }
}

void check_reply(const nlohmann::json& request, const nlohmann::json& reply) {
  const std::string context =
      " (request " + request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ")";
  FUZZ_CHECK(reply.is_object(), "a reply must be an object" + context);
  const auto ok = reply.find("ok");
  FUZZ_CHECK(ok != reply.end() && ok->is_boolean(), "a reply needs a boolean \"ok\"" + context);
  if (!ok->get<bool>()) {
    const auto error = reply.find("error");
    FUZZ_CHECK(error != reply.end() && error->is_string() && !error->get<std::string>().empty(),
               "a refusal needs its sentence" + context);
  }
  // What LineServer::send writes; it must not throw on any text a peer got echoed.
  (void)reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void check_descriptors(const char* after_what) {
  static std::ptrdiff_t baseline = -1, baseline_pipes = 0;
  std::error_code ec;
  const std::ptrdiff_t open =
      std::distance(std::filesystem::directory_iterator("/proc/self/fd", ec),
                    std::filesystem::directory_iterator());
  if (baseline >= 0 && open <= baseline) return;  // the per-input cost: one directory read
  // The first call, or more than before: a leak, unless the new ones are pipes, which are
  // the sanitizers' (llvm-symbolizer, started the first time libFuzzer names a new
  // function; nothing the broker does here opens a pipe): those join the baseline.
  std::ptrdiff_t pipes = 0;
  std::string listing;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (target.rfind("pipe:", 0) == 0) ++pipes;
    listing += " " + entry.path().filename().string() + "->" + target;
  }
  if (baseline < 0 || open - baseline <= pipes - baseline_pipes) {
    baseline = open;
    baseline_pipes = pipes;
    return;
  }
  fail(std::to_string(open - baseline) + " descriptor(s) left open by " + after_what + ":" +
       listing);
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("cannot write " + path.string());
}

}  // namespace fracgpu::fuzz
