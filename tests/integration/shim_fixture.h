// Common set-up for integration tests that run programs over the simulated GPU, with
// and without the shim preloaded: a private simulated device per test (its own
// shared-memory name, removed afterwards), a scratch directory, and the environments.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "child_process.h"

namespace fracgpu::testing {

class ShimFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    shm_name_ = "/" + unique_name("dev");
    base_env_ = clean_environment();
    base_env_["FAKECUDA_SHM_NAME"] = shm_name_;
    base_env_["FAKECUDA_MEMORY"] = "4GiB";
    base_env_["FAKECUDA_CONTEXT_FOOTPRINT"] = "64MiB";
    // Diagnostics of the simulated driver reach the test's children when asked for.
    if (const char* trace = std::getenv("FAKECUDA_TRACE_CAPTURE"))
      base_env_["FAKECUDA_TRACE_CAPTURE"] = trace;
  }
  void TearDown() override { shm_unlink(shm_name_.c_str()); }

  // The program finds the simulated driver the way it would find a real one.
  Environment native_env() const {
    Environment env = base_env_;
    env["LD_LIBRARY_PATH"] = FRACGPU_FAKECUDA_DIR;
    return env;
  }

  Environment shim_env() const {
    Environment env = base_env_;
    env["LD_PRELOAD"] = FRACGPU_SHIM_PATH;
    env["FRACGPU_REAL_DRIVER"] = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
    env["FRACGPU_HOOK_STATS"] = stats_dir_.path() + "/stats-%p.json";
    return env;
  }

  // Hook counters written by the shim at exit (all processes of the test, summed).
  nlohmann::json hook_stats() const {
    nlohmann::json merged = {{"hooks", nlohmann::json::object()}};
    for (const auto& entry : std::filesystem::directory_iterator(stats_dir_.path())) {
      auto doc = nlohmann::json::parse(read_text(entry.path()), nullptr, false);
      if (doc.is_discarded()) continue;
      merged["driver"] = doc["driver"];
      merged["proc_address"] = doc["proc_address"];
      for (auto& [name, count] : doc["hooks"].items()) {
        merged["hooks"][name] = merged["hooks"].value(name, 0) + count.get<uint64_t>();
      }
    }
    return merged;
  }

  uint64_t hook_count(const std::string& name) const {
    auto stats = hook_stats();
    return stats.contains("hooks") ? stats["hooks"].value(name, uint64_t{0}) : 0;
  }

  std::string shm_name_;
  Environment base_env_;
  TempDir stats_dir_{"stats"};
};

// The last line of a test program's output, parsed (its programs end with one JSON line);
// null when there is none, discarded when it is not JSON.
inline nlohmann::json last_json_line(const std::string& out) {
  auto end = out.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  auto start = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1),
                               nullptr, false);
}

}  // namespace fracgpu::testing
