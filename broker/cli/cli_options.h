// The quota flags shared by `fracgpu run`, `tenant create` and `tenant update`
// (--memory, --memory-request, --gpu, --compute, --compute-limit, --priority), their
// validation, and their translation into the TENANT JSON of protocol.h. Everything is
// checked here, before any broker is contacted, so bad input never starts anything.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace CLI {
class App;
}

namespace fracgpu::cli {

using broker::Result;
using broker::Status;

struct QuotaFlags {
  std::string memory;
  std::string memory_request;
  std::vector<unsigned> gpus;
  std::string compute;
  std::string compute_limit;
  std::string priority;
  std::string swap;  // allow | never
  // A GPU without a --memory value, when a tenant is created: false = refused (`tenant
  // create`), true = its cap is the GPU's memory that no other tenant is guaranteed, as the
  // broker counts it at admission ("memory_limit":"available"), and its request 0 unless
  // --memory-request is given (`fracgpu run`). Updates keep the tenant's cap either way.
  bool memory_defaults_to_available = false;
};

// The subcommand the flags are for: their help, whether --memory is required, and
// QuotaFlags::memory_defaults_to_available.
enum class QuotaCommand { kCreate, kRun, kUpdate };

void add_quota_flags(CLI::App& app, QuotaFlags& flags, QuotaCommand command);

// --memory, --memory-request, --compute and --compute-limit take one value for every
// GPU of the tenant, or a per-device map "GPU=VALUE[,GPU=VALUE...]" (e.g.
// --memory 0=8GiB,1=4GiB). The map's syntax: each key a GPU index 0-15, given once,
// each value non-empty (checked further by device_entries).
struct PerDevice {
  bool is_map = false;
  std::string single;                                     // when !is_map
  std::vector<std::pair<unsigned, std::string>> entries;  // when is_map, in the given order
};
Result<PerDevice> parse_per_device(const std::string& text, const std::string& flag);

// Validated device entries, one per GPU (default GPU 0). With `partial`, only the
// flags that were given appear (for updates); otherwise memory_limit is required, or
// "available" where flags.memory_defaults_to_available.
// A per-device map may name only GPUs in `gpus`; when creating, a --memory map must
// name every one of them (or the rest get "available", as above). In an update, GPUs
// that no map names and no plain flag changes are left out.
Result<nlohmann::json> device_entries(const QuotaFlags& flags, const std::vector<unsigned>& gpus,
                                      bool partial);

// The GPUs named by the per-device maps of `flags`, in first-seen order (empty if none).
std::vector<unsigned> per_device_gpus(const QuotaFlags& flags);

// --gpu list: each below 16, no duplicates; empty -> {0}.
Result<std::vector<unsigned>> resolve_gpus(const std::vector<unsigned>& given);

// `tenant create/update --owner USER|UID` (repeatable, or a comma list: CLI11 splits it):
// user names resolved with getpwnam_r, numbers taken as uids, duplicates dropped (the
// first spelling's position kept). An unknown user or a malformed uid is a usage error,
// found before any broker is contacted.
Result<std::vector<uint32_t>> resolve_owners(const std::vector<std::string>& given);

}  // namespace fracgpu::cli

namespace fracgpu::cli {

// `fracgpu [global opts] run [run opts] [--] CMD ARGS...`: where CMD starts, found by
// walking the options of `app` and `run` (so that an option's value is never taken for
// the command). CLI11 then parses argv[0, parse_argc) only, and the command's own flags
// (python -c, --run-dir of a nested fracgpu...) can never be mistaken for ours.
struct RunSplit {
  int parse_argc = 0;
  std::vector<std::string> command;
};
RunSplit split_run_command(CLI::App& app, CLI::App& run, int argc, const char* const* argv);

}  // namespace fracgpu::cli
