// The built libfracgpu.so as a binary: it exports exactly the driver API (hooked or
// forwarded) plus dlopen, carries the driver's SONAME, depends on glibc alone, and the
// forwarder list matches the CUDA toolkit's own stub library.
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>

#include "core/hook_catalog.h"
#include "test_files.h"

namespace fracgpu {
namespace {

std::set<std::string> dynamic_exports(const std::string& library) {
  std::set<std::string> names;
  for (const std::string& line :
       testing::lines_of(testing::run_command("nm -D --defined-only " + library))) {
    auto space = line.rfind(' ');
    names.insert(line.substr(space + 1));
  }
  return names;
}

TEST(ShimBinary, ExportsExactlyTheDriverApiTheRedirectsAndTheNvmlHooks) {
  std::set<std::string> expected =
      testing::def_first_args(FRACGPU_DRIVER_EXPORTS_DEF, "FRACGPU_DRIVER_SYMBOL");
  for (const HookInfo& info : kHookCatalog) expected.insert(std::string(info.symbol));
  for (const auto& name : testing::def_first_args(FRACGPU_NVML_HOOKS_DEF, "FRACGPU_NVML_HOOK"))
    expected.insert(name);
  expected.insert("dlopen");
  expected.insert("dlsym");
  std::set<std::string> actual = dynamic_exports(FRACGPU_SHIM_PATH);
  ASSERT_FALSE(actual.empty()) << "nm found no exports in " << FRACGPU_SHIM_PATH;
  for (const auto& name : expected) EXPECT_TRUE(actual.count(name)) << "missing export " << name;
  for (const auto& name : actual) EXPECT_TRUE(expected.count(name)) << "unexpected export " << name;
}

TEST(ShimBinary, HookTableRowsAreAllExported) {
  std::set<std::string> actual = dynamic_exports(FRACGPU_SHIM_PATH);
  for (const HookInfo& info : kHookCatalog)
    EXPECT_TRUE(actual.count(std::string(info.symbol))) << info.symbol;
}

TEST(ShimBinary, CarriesTheDriverSonameAndNeedsOnlyGlibc) {
  std::string dynamic = testing::run_command(std::string("readelf -d ") + FRACGPU_SHIM_PATH);
  EXPECT_NE(dynamic.find("Library soname: [libcuda.so.1]"), std::string::npos);
  const std::set<std::string> glibc = {"libc.so.6",       "libm.so.6",  "libdl.so.2",
                                       "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2"};
  for (const std::string& line : testing::lines_of(dynamic)) {
    auto open = line.find("Shared library: [");
    if (open == std::string::npos) continue;
    std::string needed = line.substr(open + 17, line.find(']', open) - open - 17);
    EXPECT_TRUE(glibc.count(needed)) << "depends on " << needed;
  }
}

// The list is the toolkit stub's exports plus exactly the names recorded as "beyond the
// stub" (read from a real driver): nothing invented, nothing lost.
TEST(ShimBinary, ForwarderListIsTheToolkitStubPlusTheRealDriversExtras) {
  if (access(FRACGPU_CUDA_STUB, R_OK) != 0)
    GTEST_SKIP() << "no CUDA stub library at " << FRACGPU_CUDA_STUB;
  std::set<std::string> expected = dynamic_exports(FRACGPU_CUDA_STUB);
  for (const std::string& name :
       testing::lines_of(testing::read_file(FRACGPU_EXPORTS_BEYOND_STUB))) {
    expected.insert(name);
  }
  std::set<std::string> listed =
      testing::def_first_args(FRACGPU_DRIVER_EXPORTS_DEF, "FRACGPU_DRIVER_SYMBOL");
  EXPECT_EQ(expected, listed) << "regenerate with tools/gen-driver-exports.sh";
}

}  // namespace
}  // namespace fracgpu
