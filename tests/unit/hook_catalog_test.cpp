// The hook table against the CUDA toolkit: every row's typedef exists, its exported
// name follows the driver's naming rule, and cuGetProcAddress-style version selection
// picks the ABI the driver would.
#include "core/hook_catalog.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "test_files.h"

namespace fracgpu {
namespace {

struct Abi {
  int version;
  std::string per_thread;  // "", "_ptsz" or "_ptds"
};

// All PFN_<base>_v<version>[_ptsz|_ptds] typedefs in cudaTypedefs.h, by base name.
std::map<std::string, std::vector<Abi>> typedefs_by_base() {
  std::map<std::string, std::vector<Abi>> out;
  std::regex pfn(R"(PFN_(cu\w+?)_v(\d+)(_pt(?:sz|ds))?\))");
  std::string text = testing::read_file(FRACGPU_CUDA_TYPEDEFS);
  for (std::sregex_iterator it(text.begin(), text.end(), pfn), end; it != end; ++it) {
    out[(*it)[1]].push_back({std::stoi((*it)[2]), (*it)[3]});
  }
  return out;
}

// The driver's rule: the i-th ABI of a base (by version) is exported as base (i = 0) or
// base_v{i+1}; a per-thread ABI takes the name of the newest plain ABI not newer than
// it, plus its suffix.
std::string expected_symbol(const std::string& base, const std::vector<Abi>& abis,
                            const HookInfo& info) {
  std::vector<int> plain;
  for (const Abi& abi : abis) {
    if (abi.per_thread.empty()) plain.push_back(abi.version);
  }
  std::sort(plain.begin(), plain.end());
  std::size_t index = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    if (plain[i] <= info.version) index = i;
  }
  std::string name = index == 0 ? base : base + "_v" + std::to_string(index + 1);
  if (info.per_thread_stream) {
    for (const Abi& abi : abis) {
      if (abi.version == info.version && !abi.per_thread.empty()) return name + abi.per_thread;
    }
  }
  return name;
}

TEST(HookCatalog, EveryRowMatchesATypedefAndTheDriverNamingRule) {
  auto typedefs = typedefs_by_base();
  ASSERT_GT(typedefs.size(), 400u) << "cudaTypedefs.h not parsed";
  for (const HookInfo& info : kHookCatalog) {
    SCOPED_TRACE(std::string(info.symbol));
    auto it = typedefs.find(std::string(info.base));
    ASSERT_NE(it, typedefs.end());
    bool found = false;
    for (const Abi& abi : it->second) {
      found |= abi.version == info.version && abi.per_thread.empty() == !info.per_thread_stream;
    }
    EXPECT_TRUE(found) << "no PFN typedef for this version";
    EXPECT_EQ(expected_symbol(it->first, it->second, info), info.symbol);
  }
}

TEST(HookCatalog, SymbolsAreUniqueAndAllArePublicDriverExports) {
  std::set<std::string> exports =
      testing::def_first_args(FRACGPU_DRIVER_EXPORTS_DEF, "FRACGPU_DRIVER_SYMBOL");
  ASSERT_GT(exports.size(), 600u);
  std::set<std::string_view> seen;
  for (const HookInfo& info : kHookCatalog) {
    EXPECT_TRUE(seen.insert(info.symbol).second) << info.symbol << " listed twice";
    EXPECT_TRUE(exports.count(std::string(info.symbol)))
        << info.symbol << " is not a driver export";
  }
}

TEST(HookCatalog, CoversEveryPathTheQuotaLogicNeeds) {
  for (const char* name : {"cuInit",
                           "cuGetProcAddress",
                           "cuGetProcAddress_v2",
                           "cuMemAlloc_v2",
                           "cuMemFree_v2",
                           "cuMemAllocPitch_v2",
                           "cuMemAllocManaged",
                           "cuMemAllocAsync",
                           "cuMemAllocAsync_ptsz",
                           "cuMemFreeAsync",
                           "cuMemAllocFromPoolAsync",
                           "cuMemPoolTrimTo",
                           "cuMemCreate",
                           "cuMemRelease",
                           "cuArrayCreate_v2",
                           "cuArray3DCreate_v2",
                           "cuMipmappedArrayCreate",
                           "cuMemGetInfo_v2",
                           "cuDeviceTotalMem_v2",
                           "cuCtxCreate_v2",
                           "cuCtxCreate_v4",
                           "cuDevicePrimaryCtxRetain",
                           "cuStreamCreate",
                           "cuLaunchKernel",
                           "cuLaunchKernel_ptsz",
                           "cuLaunchKernelEx",
                           "cuLaunchKernelEx_ptsz",
                           "cuLaunchCooperativeKernel",
                           "cuLaunchCooperativeKernel_ptsz",
                           "cuGraphLaunch",
                           "cuGraphLaunch_ptsz",
                           "cuMemcpyHtoDAsync_v2",
                           "cuMemcpyAsync_ptsz",
                           "cuMemsetD8Async",
                           "cuMemsetD32Async_ptsz"}) {
    EXPECT_TRUE(find_hook_by_symbol(name).has_value()) << name;
  }
}

// Every call that puts work on the GPU is gated (the kind column of tables/hooks.def):
// kernel and graph launches, asynchronous copies, memsets and prefetches.
TEST(HookCatalog, EveryLaunchCopyMemsetAndPrefetchIsGated) {
  const std::regex gated_base(
      R"(cuLaunch\w*|cuGraphLaunch|cuMemcpy\w*Async|cuMemset\w*Async|cuMemPrefetchAsync)");
  int gated = 0;
  for (const HookInfo& info : kHookCatalog) {
    SCOPED_TRACE(std::string(info.symbol));
    const bool work = std::regex_match(std::string(info.base), gated_base);
    EXPECT_EQ(info.kind == HookKind::kGated, work);
    gated += info.kind == HookKind::kGated;
  }
  EXPECT_EQ(gated, 60);
}

// Every synchronous copy and memset waits until memory the shim moved to host is back
// (swap_engine.h): they are RESIDENT rows, and every such driver export is one.
TEST(HookCatalog, EverySynchronousCopyAndMemsetIsResident) {
  const std::regex sync_base(R"(cuMem(cpy|set)\w*)");
  int resident = 0;
  for (const HookInfo& info : kHookCatalog) {
    SCOPED_TRACE(std::string(info.symbol));
    const std::string base(info.base);
    const bool sync = std::regex_match(base, sync_base) && base.find("Async") == std::string::npos;
    EXPECT_EQ(info.kind == HookKind::kResident, sync);
    resident += info.kind == HookKind::kResident;
  }
  EXPECT_EQ(resident, 57);
  EXPECT_EQ(hook_info(HookId::cuInit).kind, HookKind::kForward);
  EXPECT_EQ(hook_info(HookId::cuMemAlloc_v2).kind, HookKind::kBody);
}

TEST(HookCatalog, VersionSelectionFollowsTheDriver) {
  auto symbol_of = [](std::string_view base, int version, bool pt) -> std::string {
    auto id = select_hook_for_version(base, version, pt);
    return id ? std::string(hook_info(*id).symbol) : std::string("<none>");
  };
  EXPECT_EQ(symbol_of("cuCtxCreate", 3020, false), "cuCtxCreate_v2");
  EXPECT_EQ(symbol_of("cuCtxCreate", 11040, false), "cuCtxCreate_v3");
  EXPECT_EQ(symbol_of("cuCtxCreate", 12000, false), "cuCtxCreate_v3");
  EXPECT_EQ(symbol_of("cuCtxCreate", 13000, false), "cuCtxCreate_v4");
  EXPECT_EQ(symbol_of("cuCtxCreate", 2000, false), "cuCtxCreate");
  EXPECT_EQ(symbol_of("cuMemAlloc", 12000, false), "cuMemAlloc_v2");
  EXPECT_EQ(symbol_of("cuMemAlloc", 12000, true), "cuMemAlloc_v2");  // no per-thread variant
  EXPECT_EQ(symbol_of("cuLaunchKernel", 12000, false), "cuLaunchKernel");
  EXPECT_EQ(symbol_of("cuLaunchKernel", 12000, true), "cuLaunchKernel_ptsz");
  EXPECT_EQ(symbol_of("cuLaunchKernel", 6050, true),
            "cuLaunchKernel");  // before per-thread streams
  EXPECT_EQ(symbol_of("cuMemcpyHtoDAsync", 12000, true), "cuMemcpyHtoDAsync_v2_ptsz");
  EXPECT_EQ(symbol_of("cuMemcpyBatchAsync", 12090, false), "cuMemcpyBatchAsync");
  EXPECT_EQ(symbol_of("cuMemcpyBatchAsync", 13000, true), "cuMemcpyBatchAsync_v2_ptsz");
  EXPECT_EQ(symbol_of("cuGetProcAddress", 11080, false), "cuGetProcAddress");
  EXPECT_EQ(symbol_of("cuGetProcAddress", 12000, false), "cuGetProcAddress_v2");
  EXPECT_EQ(symbol_of("cuMemAllocAsync", 11000, false), "<none>");  // too old
  EXPECT_EQ(symbol_of("cuCtxGetCurrent", 12000, false), "<none>");  // not hooked
}

}  // namespace
}  // namespace fracgpu
