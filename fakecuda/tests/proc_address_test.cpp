// cuGetProcAddress: version selection by the caller's CUDA version, per-thread
// (_ptsz/_ptds) variants on request, the two not-found outcomes, and — checked against
// the toolkit's own cudaTypedefs.h — that every exported symbol carries the name the
// real driver's naming rule gives its PFN_ typedef.
#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

class ProcAddressTest : public FakeDeviceTest {
 protected:
  void* lookup(const char* symbol, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(cu.cuGetProcAddress_v2(symbol, &pfn, version, flags, &status), CUDA_SUCCESS)
        << symbol << "@" << version;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    return pfn;
  }
};

TEST_F(ProcAddressTest, CtxCreatePicksTheAbiOfTheRequestedVersion) {
  EXPECT_EQ(lookup("cuCtxCreate", 2000), cu.symbol("cuCtxCreate"));
  EXPECT_EQ(lookup("cuCtxCreate", 3020), cu.symbol("cuCtxCreate_v2"));
  EXPECT_EQ(lookup("cuCtxCreate", 11040), cu.symbol("cuCtxCreate_v3"));
  EXPECT_EQ(lookup("cuCtxCreate", 12050), cu.symbol("cuCtxCreate_v4"));
  EXPECT_EQ(lookup("cuCtxCreate", 13000), cu.symbol("cuCtxCreate_v4"));
  EXPECT_EQ(lookup("cuCtxCreate", 12000), cu.symbol("cuCtxCreate_v3"));
  EXPECT_NE(cu.symbol("cuCtxCreate_v4"), nullptr);
}

TEST_F(ProcAddressTest, PerThreadFlagSelectsPtszAndPtdsVariants) {
  constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(lookup("cuLaunchKernel", 13000), cu.symbol("cuLaunchKernel"));
  EXPECT_EQ(lookup("cuLaunchKernel", 13000, kPerThread), cu.symbol("cuLaunchKernel_ptsz"));
  EXPECT_EQ(lookup("cuMemcpyHtoD", 13000, kPerThread), cu.symbol("cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(lookup("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM),
            cu.symbol("cuMemcpyHtoD_v2"));
  EXPECT_EQ(lookup("cuStreamBeginCapture", 10000, kPerThread),
            cu.symbol("cuStreamBeginCapture_ptsz"));
  EXPECT_EQ(lookup("cuStreamBeginCapture", 13000, kPerThread),
            cu.symbol("cuStreamBeginCapture_v2_ptsz"));
  EXPECT_EQ(lookup("cuInit", 13000, kPerThread), cu.symbol("cuInit"));  // no per-thread variant
  EXPECT_EQ(lookup("cuGetProcAddress", 13000), cu.symbol("cuGetProcAddress_v2"));
  EXPECT_EQ(lookup("cuGetProcAddress", 11030), cu.symbol("cuGetProcAddress"));
}

TEST_F(ProcAddressTest, ReportsUnknownSymbolsAndInsufficientVersions) {
  void* pfn = reinterpret_cast<void*>(0x1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_FOUND,
                  cu.cuGetProcAddress_v2("cuNoSuchFunction", &pfn, 13000, 0, &status));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(pfn, nullptr);
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_FOUND,
                  cu.cuGetProcAddress_v2("cuMemAllocAsync", &pfn, 11000, 0, &status));
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_CU_ERROR(CUDA_ERROR_NOT_FOUND, cu.cuGetProcAddress("cuMemAllocAsync", &pfn, 11000, 0));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuGetProcAddress_v2("cuInit", &pfn, 13000, 0x80, &status));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuGetProcAddress_v2(nullptr, &pfn, 13000, 0, &status));
  EXPECT_CU_ERROR(CUDA_ERROR_INVALID_VALUE,
                  cu.cuGetProcAddress_v2("cuInit", nullptr, 13000, 0, &status));
  ASSERT_CU(cu.cuGetProcAddress("cuMemAlloc", &pfn, 13000, 0));
  EXPECT_EQ(pfn, cu.symbol("cuMemAlloc_v2"));
}

TEST_F(ProcAddressTest, ReturnedPointersWork) {
  void* pfn = nullptr;
  ASSERT_CU(cu.cuGetProcAddress("cuMemAlloc", &pfn, 13000, 0));
  CUdeviceptr pointer = 0;
  ASSERT_CU(reinterpret_cast<PFN_cuMemAlloc_v3020>(pfn)(&pointer, 4096));
  ASSERT_CU(cu.cuGetProcAddress("cuMemFree", &pfn, 13000, 0));
  ASSERT_CU(reinterpret_cast<PFN_cuMemFree_v3020>(pfn)(pointer));
}

// One PFN_ typedef of cudaTypedefs.h: base name, version, per-thread suffix.
struct TypedefEntry {
  std::string base;
  int version;
  std::string suffix;
};

std::vector<TypedefEntry> read_typedefs() {
  std::ifstream file(FAKECUDA_CUDA_TYPEDEFS_PATH);
  std::stringstream text;
  text << file.rdbuf();
  std::string source = text.str();
  // Matches "PFN_<base>_v<digits>[_ptsz|_ptds])(" without std::regex (which trips
  // GCC 12's -Wmaybe-uninitialized under sanitizers).
  std::vector<TypedefEntry> entries;
  for (size_t at = source.find("PFN_cu"); at != std::string::npos;
       at = source.find("PFN_cu", at + 1)) {
    size_t close = source.find(")(", at);
    if (close == std::string::npos) break;
    std::string name = source.substr(at + 4, close - at - 4);
    std::string suffix;
    if (name.ends_with("_ptsz") || name.ends_with("_ptds")) {
      suffix = name.substr(name.size() - 5);
      name.resize(name.size() - 5);
    }
    constexpr const char* kIdentifier =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
    if (name.find_first_not_of(kIdentifier) != std::string::npos) continue;
    size_t version_at = name.rfind("_v");
    if (version_at == std::string::npos ||
        name.find_first_not_of("0123456789", version_at + 2) != std::string::npos ||
        version_at + 2 == name.size()) {
      continue;
    }
    entries.push_back({name.substr(0, version_at), std::stoi(name.substr(version_at + 2)), suffix});
  }
  return entries;
}

// The real driver's naming rule (see entry_points.def).
std::map<std::string, TypedefEntry> expected_exports(const std::vector<TypedefEntry>& entries) {
  std::map<std::string, std::set<int>> plain_versions;
  for (const TypedefEntry& e : entries) {
    if (e.suffix.empty()) plain_versions[e.base].insert(e.version);
  }
  auto plain_name = [&](const std::string& base, int version) {
    const std::set<int>& versions = plain_versions[base];
    int index = static_cast<int>(std::distance(versions.begin(), versions.find(version)));
    return index == 0 ? base : base + "_v" + std::to_string(index + 1);
  };
  std::map<std::string, TypedefEntry> names;
  for (const TypedefEntry& e : entries) {
    if (e.suffix.empty()) {
      names[plain_name(e.base, e.version)] = e;
      continue;
    }
    const std::set<int>& versions = plain_versions[e.base];
    auto newest = std::prev(versions.upper_bound(e.version));
    names[plain_name(e.base, *newest) + e.suffix] = e;
  }
  return names;
}

TEST_F(ProcAddressTest, ExportsFollowTheDriverNamingRuleAndAgreeWithGetProcAddress) {
  std::vector<TypedefEntry> entries = read_typedefs();
  ASSERT_GT(entries.size(), 500u);
  int exported = 0;
  for (const auto& [name, entry] : expected_exports(entries)) {
    void* address = cu.symbol(name.c_str());
    if (address == nullptr) continue;
    ++exported;
    cuuint64_t flags = entry.suffix.empty() ? CU_GET_PROC_ADDRESS_LEGACY_STREAM
                                            : CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    EXPECT_EQ(lookup(entry.base.c_str(), entry.version, flags), address) << name;
  }
  EXPECT_GE(exported, 270);  // the whole table of entry_points.def
}

TEST(ProcAddressBeforeInit, WorksWithoutCuInit) {
  DriverApi& cu = driver_api();
  cu.fakecuda_shutdown();
  void* pfn = nullptr;
  ASSERT_CU(cu.cuGetProcAddress("cuInit", &pfn, 13000, 0));
  EXPECT_EQ(pfn, cu.symbol("cuInit"));
}

}  // namespace
}  // namespace fakecuda_test
