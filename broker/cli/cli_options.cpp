// Quota flag definitions and validation (size and percent syntax is in
// core/quantity_parser).
#include "cli/cli_options.h"

#include <pwd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/quantity_parser.h"
#include "core/tenant_spec.h"
#include "fracgpu/protocol.h"

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
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower == "none") return 0u;
  if (lower == "0" || lower == "0%") {
    if (partial) return 0u;
    return Result<uint32_t>::failure(
        "--compute-limit '" + text +
        "' is not a ceiling (1-100%); for no ceiling leave it out or give none");
  }
  auto v = parse_percent(text, "--compute-limit");
  if (!v) {
    return Result<uint32_t>::failure(
        "--compute-limit '" + text.substr(0, 40) +
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
  } else if (!partial && f.memory_defaults_to_available) {
    d["memory_limit"] = protocol::kAvailableMemory;
  } else if (!partial) {
    return Result<json>::failure("--memory is required (e.g. --memory 8GiB)");
  }
  if (!f.memory_request.empty()) {
    auto v = parse_size_allow_zero(f.memory_request, "--memory-request");
    if (!v) return Result<json>::failure(v.error());
    if (d.contains("memory_limit") && d["memory_limit"].is_number() &&
        *v > d["memory_limit"].get<uint64_t>()) {
      return Result<json>::failure("--memory-request " + f.memory_request +
                                   " is larger than --memory " + f.memory);
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
      return Result<json>::failure(
          "--priority high cannot have a --compute-limit: a high-priority tenant runs "
          "whenever it has work (leave the ceiling out, or give --compute-limit none)");
    }
  }
  if (!f.swap.empty()) {
    if (f.swap != "allow" && f.swap != "never")
      return Result<json>::failure("--swap must be allow or never, not \"" + f.swap + "\"");
    d["swap"] = f.swap;
  }
  return d;
}

}  // namespace

void add_quota_flags(CLI::App& app, QuotaFlags& f, QuotaCommand command) {
  std::string memory_help =
      "Device-memory cap per GPU (e.g. 8GiB, 1.5GB, 1073741824), or per device: 0=8GiB,1=4GiB";
  std::string request_help =
      "Guaranteed memory per GPU (default: the cap), or per device: 0=4GiB,1=0";
  if (command == QuotaCommand::kRun) {
    memory_help +=
        " (default: the GPU's memory that no other tenant is guaranteed, as the broker counts it "
        "when the tenant is created)";
    request_help =
        "Guaranteed memory per GPU (default: the cap; 0 for a GPU without --memory), or per "
        "device: "
        "0=4GiB,1=0";
  }
  auto* memory = app.add_option("--memory", f.memory, memory_help);
  if (command == QuotaCommand::kCreate) memory->required();
  f.memory_defaults_to_available = command == QuotaCommand::kRun;
  app.add_option("--memory-request", f.memory_request, request_help);
  app.add_option("--gpu", f.gpus, "GPU index(es) on this node, e.g. 0 or 0,1 (default 0)")
      ->delimiter(',');
  app.add_option("--compute", f.compute,
                 "Compute share under contention, 1-100 (e.g. 30 or 30%; default 100), or per "
                 "device: 0=70,1=30");
  app.add_option("--compute-limit", f.compute_limit,
                 "Hard compute ceiling, 1-100% of the GPU, or none (default none), or per device: "
                 "0=50,1=none");
  app.add_option("--priority", f.priority, "high, normal or low (default normal)");
  // Checked where it is parsed: an empty value would otherwise read as "not given".
  app.add_option("--swap", f.swap,
                 "allow: the broker may move this tenant's memory to host memory when a "
                 "guaranteed tenant needs the GPU's memory or this one is idle; never (default): "
                 "its memory stays on the GPU")
      ->check(CLI::Validator(
          [](std::string& value) {
            return value == "allow" || value == "never"
                       ? std::string()
                       : "must be allow or never, not \"" + value.substr(0, 40) + "\"";
          },
          "allow|never"));
}

Result<std::vector<unsigned>> resolve_gpus(const std::vector<unsigned>& given) {
  if (given.empty()) return std::vector<unsigned>{0};
  std::vector<unsigned> seen;
  for (unsigned g : given) {
    if (g >= 16)
      return Result<std::vector<unsigned>>::failure("--gpu " + std::to_string(g) +
                                                    " is not a GPU index (0-15)");
    if (std::find(seen.begin(), seen.end(), g) != seen.end()) {
      return Result<std::vector<unsigned>>::failure("--gpu lists GPU " + std::to_string(g) +
                                                    " twice");
    }
    seen.push_back(g);
  }
  return seen;
}

Result<std::vector<uint32_t>> resolve_owners(const std::vector<std::string>& given) {
  using R = Result<std::vector<uint32_t>>;
  std::vector<uint32_t> owners;
  for (const std::string& word : given) {
    if (word.empty()) return R::failure("--owner needs a user name or a numeric uid");
    uint64_t uid = 0;
    const bool digits =
        std::all_of(word.begin(), word.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
    if (digits) {
      if (word.size() > 10 || (uid = std::stoull(word)) > broker::kMaxOwnerUid)
        return R::failure("--owner " + word.substr(0, 20) + " is not a uid (0-4294967294)");
    } else {
      long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
      std::vector<char> buffer(size > 0 ? static_cast<std::size_t>(size) : 16384);
      passwd entry{};
      passwd* found = nullptr;
      int rc;
      while ((rc = ::getpwnam_r(word.c_str(), &entry, buffer.data(), buffer.size(), &found)) ==
                 ERANGE &&
             buffer.size() < (1u << 20)) {
        buffer.resize(buffer.size() * 2);
      }
      if (rc != 0)
        return R::failure("--owner " + word.substr(0, 40) + ": cannot look up the user (" +
                          std::strerror(rc) + ")");
      if (found == nullptr)
        return R::failure("--owner " + word.substr(0, 40) +
                          ": no such user (give a user name or a numeric uid)");
      uid = found->pw_uid;
    }
    if (std::find(owners.begin(), owners.end(), uid) == owners.end())
      owners.push_back(static_cast<uint32_t>(uid));
  }
  if (owners.size() > broker::kMaxOwners)
    return R::failure("--owner lists " + std::to_string(owners.size()) +
                      " users; a tenant has at most " + std::to_string(broker::kMaxOwners));
  return owners;
}

Result<PerDevice> parse_per_device(const std::string& text, const std::string& flag) {
  PerDevice result;
  if (text.find('=') == std::string::npos) {
    result.single = text;
    return result;
  }
  result.is_map = true;
  const std::string example =
      flag == "--compute" || flag == "--compute-limit" ? "0=70,1=30" : "0=8GiB,1=4GiB";
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, end - start);
    const size_t eq = entry.find('=');
    const std::string key = eq == std::string::npos ? entry : entry.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    const bool digits =
        !key.empty() && key.size() <= 2 &&
        std::all_of(key.begin(), key.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
    if (!digits || value.empty() || value.find('=') != std::string::npos) {
      return Result<PerDevice>::failure(flag + " entry '" + entry.substr(0, 40) +
                                        "' must be GPU=VALUE (e.g. " + flag + " " + example + ")");
    }
    const unsigned gpu = static_cast<unsigned>(std::stoul(key));
    if (gpu >= 16)
      return Result<PerDevice>::failure(flag + ": " + key + " is not a GPU index (0-15)");
    for (const auto& [seen, unused] : result.entries) {
      (void)unused;
      if (seen == gpu) return Result<PerDevice>::failure(flag + " names GPU " + key + " twice");
    }
    result.entries.emplace_back(gpu, value);
    if (end == text.size()) break;
    start = end + 1;
  }
  return result;
}

namespace {

std::string gpu_list_text(const std::vector<unsigned>& gpus) {
  std::string text;
  for (unsigned g : gpus) text += (text.empty() ? "" : ",") + std::to_string(g);
  return text;
}

// The value of a per-device flag for one GPU: the single value, the map's entry, or ""
// when the map has none for this GPU.
std::string value_for(const PerDevice& v, unsigned gpu) {
  if (!v.is_map) return v.single;
  for (const auto& [g, value] : v.entries)
    if (g == gpu) return value;
  return "";
}

}  // namespace

Result<json> device_entries(const QuotaFlags& flags, const std::vector<unsigned>& gpus,
                            bool partial) {
  struct Flag {
    const std::string* text;
    const char* name;
    PerDevice parsed;
  };
  Flag per_device[] = {{&flags.memory, "--memory", {}},
                       {&flags.memory_request, "--memory-request", {}},
                       {&flags.compute, "--compute", {}},
                       {&flags.compute_limit, "--compute-limit", {}}};
  bool any_map = false;
  for (Flag& f : per_device) {
    auto parsed = parse_per_device(*f.text, f.name);
    if (!parsed) return Result<json>::failure(parsed.error());
    f.parsed = std::move(*parsed);
    any_map = any_map || f.parsed.is_map;
    for (const auto& [g, value] : f.parsed.entries) {
      (void)value;
      if (std::find(gpus.begin(), gpus.end(), g) == gpus.end()) {
        return Result<json>::failure(std::string(f.name) + " names GPU " + std::to_string(g) +
                                     ", which is not one of the tenant's GPUs (--gpu " +
                                     gpu_list_text(gpus) + ")");
      }
    }
  }
  // A tenant created with a per-device --memory needs a cap on each of its GPUs (unless
  // the others default to what is available).
  if (!partial && per_device[0].parsed.is_map && !flags.memory_defaults_to_available) {
    for (unsigned g : gpus) {
      if (value_for(per_device[0].parsed, g).empty()) {
        return Result<json>::failure("--memory gives no cap for GPU " + std::to_string(g) +
                                     " (--gpu " + gpu_list_text(gpus) +
                                     "); every GPU of the tenant needs one");
      }
    }
  }
  json list = json::array();
  for (unsigned g : gpus) {
    QuotaFlags one = flags;
    one.memory = value_for(per_device[0].parsed, g);
    one.memory_request = value_for(per_device[1].parsed, g);
    one.compute = value_for(per_device[2].parsed, g);
    one.compute_limit = value_for(per_device[3].parsed, g);
    auto d = common_fields(one, partial);
    if (!d)
      return Result<json>::failure(any_map ? "GPU " + std::to_string(g) + ": " + d.error()
                                           : d.error());
    // A per-device change leaves the GPUs it does not name alone.
    if (partial && any_map && d->empty()) continue;
    (*d)["gpu"] = g;
    list.push_back(std::move(*d));
  }
  return list;
}

std::vector<unsigned> per_device_gpus(const QuotaFlags& flags) {
  std::vector<unsigned> gpus;
  for (const std::string* text :
       {&flags.memory, &flags.memory_request, &flags.compute, &flags.compute_limit}) {
    auto parsed = parse_per_device(*text, "");
    if (!parsed) continue;
    for (const auto& [g, value] : parsed->entries) {
      (void)value;
      if (std::find(gpus.begin(), gpus.end(), g) == gpus.end()) gpus.push_back(g);
    }
  }
  return gpus;
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
