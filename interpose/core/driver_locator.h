// Where the real CUDA driver lives. The shim carries the driver's SONAME, so asking
// the loader for "libcuda.so.1" would hand back the shim itself: the real library must
// be found by path. The search order is FRACGPU_REAL_DRIVER (exclusively, when set),
// then LD_LIBRARY_PATH, then the dynamic loader's cache (/etc/ld.so.cache, the same
// data `ldconfig -p` prints), then the directories drivers are installed in by the
// NVIDIA container toolkit and distributions. Pure functions: no dlopen here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fracgpu {

struct LdCacheEntry {
  std::string name;  // e.g. "libcuda.so.1"
  std::string path;  // e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
  bool x86_64 = false;
};

// Parses the glibc ≥ 2.32 cache format ("glibc-ld.so.cache1.1", possibly after an old
// "ld.so-1.7.0" header). Malformed or truncated data yields the entries read so far.
std::vector<LdCacheEntry> parse_ld_so_cache(std::string_view bytes);

struct DriverSearchInputs {
  std::string explicit_path;           // FRACGPU_REAL_DRIVER
  std::string ld_library_path;         // LD_LIBRARY_PATH
  std::vector<LdCacheEntry> ld_cache;  // parsed /etc/ld.so.cache
};

std::vector<std::string> driver_candidates(const DriverSearchInputs& inputs);

// Reads /etc/ld.so.cache and the environment.
DriverSearchInputs driver_search_inputs_from_system(const std::string& explicit_path);

}  // namespace fracgpu
