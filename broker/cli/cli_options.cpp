// Quota flag definitions and validation (size and percent syntax is in
// core/quantity_parser).
#include "cli_options.h"

#include <algorithm>
#include <cctype>

#include <CLI/CLI.hpp>

#include "core/quantity_parser.h"
#include "core/tenant_spec.h"

namespace fracgpu::cli {
namespace {

using broker::parse_percent;
using broker::parse_size;
using broker::parse_size_allow_zero;
using nlohmann::json;

// --compute-limit: a percentage 1..100, or "none" for no ceiling. For a change
// (`partial`), "0" and "0%" also remove the ceiling, the broker's own encoding; when a
// tenant is created, 0 is refused, since it reads like "no compute at all".
Result<uint32_t> parse_ceiling(const std::string& text, bool partial) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "none") return 0u;
  if (lower == "0" || lower == "0%") {
    if (partial) return 0u;
    return Result<uint32_t>::failure("--compute-limit '" + text +
                                     "' is not a ceiling (1-100%); for no ceiling leave it out or give none");
  }
  auto v = parse_percent(text, "--compute-limit");
  if (!v) {
    return Result<uint32_t>::failure("--compute-limit '" + text.substr(0, 40) +
                                     "' must be a whole percentage of one GPU from 1 to 100 (e.g. 50 or 50%), or none");
  }
  return *v;
}

// The fields common to every GPU of the tenant, from the flags that were given.
Result<json> common_fields(const QuotaFlags& f, bool partial) {
  json d = json::object();
  if (!f.memory.empty()) {
    auto v = parse_size(f.memory, "--memory");
    if (!v) return Result<json>::failure(v.error());
    d["memory_limit"] = *v;
  } else if (!partial) {
    return Result<json>::failure("--memory is required (e.g. --memory 8GiB)");
  }
  if (!f.memory_request.empty()) {
    auto v = parse_size_allow_zero(f.memory_request, "--memory-request");
    if (!v) return Result<json>::failure(v.error());
    if (d.contains("memory_limit") && *v > d["memory_limit"].get<uint64_t>()) {
      return Result<json>::failure("--memory-request " + f.memory_request + " is larger than --memory " + f.memory);
    }
    d["memory_request"] = *v;
  }
  if (!f.compute.empty()) {
    auto v = parse_percent(f.compute, "--compute");
    if (!v) return Result<json>::failure(v.error());
    d["compute"] = *v;
  }
  if (!f.compute_limit.empty()) {
    auto v = parse_ceiling(f.compute_limit, partial);
    if (!v) return Result<json>::failure(v.error());
    d["compute_limit"] = *v;
  }
  if (!f.priority.empty()) {
    auto p = broker::parse_priority(f.priority);
    if (!p) return Result<json>::failure("--priority: " + p.error());
    d["priority"] = f.priority;
    if (*p == PriorityClass::kHigh && d.value("compute_limit", 0u) > 0) {
      return Result<json>::failure("--priority high cannot have a --compute-limit: a high-priority tenant runs "
                                   "whenever it has work (leave the ceiling out, or give --compute-limit none)");
    }
  }
  return d;
}

}  // namespace

void add_quota_flags(CLI::App& app, QuotaFlags& f, bool memory_required) {
  auto* memory = app.add_option("--memory", f.memory, "Device-memory cap per GPU (e.g. 8GiB, 1.5GB, 1073741824)");
  if (memory_required) memory->required();
  app.add_option("--memory-request", f.memory_request, "Guaranteed memory per GPU (default: the cap)");
  app.add_option("--gpu", f.gpus, "GPU index(es) on this node, e.g. 0 or 0,1 (default 0)")->delimiter(',');
  app.add_option("--compute", f.compute, "Compute share under contention, 1-100 (e.g. 30 or 30%; default 100)");
  app.add_option("--compute-limit", f.compute_limit,
                 "Hard compute ceiling, 1-100% of the GPU, or none (default none)");
  app.add_option("--priority", f.priority, "high, normal or low (default normal)");
}

Result<std::vector<unsigned>> resolve_gpus(const std::vector<unsigned>& given) {
  if (given.empty()) return std::vector<unsigned>{0};
  std::vector<unsigned> seen;
  for (unsigned g : given) {
    if (g >= 16) return Result<std::vector<unsigned>>::failure("--gpu " + std::to_string(g) + " is not a GPU index (0-15)");
    if (std::find(seen.begin(), seen.end(), g) != seen.end()) {
      return Result<std::vector<unsigned>>::failure("--gpu lists GPU " + std::to_string(g) + " twice");
    }
    seen.push_back(g);
  }
  return seen;
}

Result<json> device_entries(const QuotaFlags& flags, const std::vector<unsigned>& gpus, bool partial) {
  auto common = common_fields(flags, partial);
  if (!common) return common;
  json list = json::array();
  for (unsigned g : gpus) {
    json d = *common;
    d["gpu"] = g;
    list.push_back(std::move(d));
  }
  return list;
}

}  // namespace fracgpu::cli

namespace fracgpu::cli {
namespace {

// True when the word is an option of `app` (or `fallback`) that takes a separate value.
bool takes_separate_value(CLI::App& app, CLI::App* fallback, const std::string& word) {
  if (word.find('=') != std::string::npos) return false;
  const CLI::Option* opt = app.get_option_no_throw(word);
  if (opt == nullptr && fallback != nullptr) opt = fallback->get_option_no_throw(word);
  return opt != nullptr && opt->get_type_size_max() > 0;
}

}  // namespace

RunSplit split_run_command(CLI::App& app, CLI::App& run, int argc, const char* const* argv) {
  RunSplit split{argc, {}};
  int i = 1;
  // Global options, up to the subcommand.
  while (i < argc && argv[i][0] == '-' && std::string(argv[i]) != "--") {
    i += takes_separate_value(app, nullptr, argv[i]) ? 2 : 1;
  }
  if (i >= argc || std::string(argv[i]) != run.get_name()) return split;
  for (++i; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") {
      split.parse_argc = i;
      split.command.assign(argv + i + 1, argv + argc);
      return split;
    }
    if (word.size() > 1 && word[0] == '-') {
      if (takes_separate_value(run, &app, word)) ++i;
      continue;
    }
    split.parse_argc = i;
    split.command.assign(argv + i, argv + argc);
    return split;
  }
  return split;
}

}  // namespace fracgpu::cli
