// Finding the real driver: the ld.so.cache parser (on synthetic caches and on this
// machine's own cache) and the candidate order.
#include "core/driver_locator.h"

#include <gtest/gtest.h>

#include <cstring>

#include "test_files.h"

namespace fracgpu {
namespace {

// Builds a glibc-ld.so.cache1.1 image, optionally behind an old-format header.
std::string make_cache(const std::vector<std::tuple<std::string, std::string, int32_t>>& libs,
                       bool old_prefix) {
  std::string header(48, '\0');
  std::memcpy(header.data(), "glibc-ld.so.cache1.1", 20);
  uint32_t n = static_cast<uint32_t>(libs.size());
  std::memcpy(header.data() + 20, &n, 4);
  std::string entries, strings;
  const std::size_t strings_at = 48 + 24 * libs.size();
  for (const auto& [name, path, flags] : libs) {
    std::string entry(24, '\0');
    uint32_t key = static_cast<uint32_t>(strings_at + strings.size());
    strings += name + '\0';
    uint32_t value = static_cast<uint32_t>(strings_at + strings.size());
    strings += path + '\0';
    std::memcpy(entry.data(), &flags, 4);
    std::memcpy(entry.data() + 4, &key, 4);
    std::memcpy(entry.data() + 8, &value, 4);
    entries += entry;
  }
  std::string prefix = old_prefix ? std::string("ld.so-1.7.0") + std::string(13, '\0') : "";
  return prefix + header + entries + strings;
}

TEST(LdSoCache, ParsesEntriesAndArchitecture) {
  auto entries = parse_ld_so_cache(
      make_cache({{"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x0303},
                  {"libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", 0x0003}},
                 true));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, "libcuda.so.1");
  EXPECT_EQ(entries[0].path, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_TRUE(entries[0].x86_64);
  EXPECT_FALSE(entries[1].x86_64);
}

TEST(LdSoCache, SurvivesGarbageAndTruncation) {
  EXPECT_TRUE(parse_ld_so_cache("").empty());
  EXPECT_TRUE(parse_ld_so_cache("not a cache at all").empty());
  std::string cache = make_cache({{"libcuda.so.1", "/x/libcuda.so.1", 0x0303}}, false);
  for (std::size_t cut = 0; cut < cache.size(); ++cut) {
    auto entries = parse_ld_so_cache(std::string_view(cache).substr(0, cut));
    EXPECT_LE(entries.size(), 1u);
  }
  std::string lying = cache;
  uint32_t huge = 0xffffffff;
  std::memcpy(lying.data() + 20, &huge, 4);  // claims 4 billion entries
  EXPECT_EQ(parse_ld_so_cache(lying).size(), 1u);
}

TEST(LdSoCache, ReadsThisMachinesCache) {
  auto entries = parse_ld_so_cache(testing::read_file("/etc/ld.so.cache"));
  bool libc = false;
  for (const auto& e : entries) libc |= e.name == "libc.so.6" && e.x86_64;
  EXPECT_TRUE(libc) << "libc.so.6 not found among " << entries.size() << " entries";
}

TEST(DriverCandidates, ExplicitPathIsExclusive) {
  DriverSearchInputs in;
  in.explicit_path = "/opt/driver/libcuda.so.1";
  in.ld_library_path = "/a:/b";
  EXPECT_EQ(driver_candidates(in), std::vector<std::string>{"/opt/driver/libcuda.so.1"});
}

TEST(DriverCandidates, LibraryPathThenCacheThenWellKnownDirs) {
  DriverSearchInputs in;
  in.ld_library_path = "/a::/b";
  in.ld_cache = {{"libcuda.so.1", "/cache/libcuda.so.1", true},
                 {"libcuda.so.1", "/cache32/libcuda.so.1", false},
                 {"libcudart.so.12", "/cache/libcudart.so.12", true}};
  auto c = driver_candidates(in);
  ASSERT_GE(c.size(), 4u);
  EXPECT_EQ(c[0], "/a/libcuda.so.1");
  EXPECT_EQ(c[1], "/b/libcuda.so.1");
  EXPECT_EQ(c[2], "/cache/libcuda.so.1");
  EXPECT_EQ(c[3], "/usr/local/nvidia/lib64/libcuda.so.1");
  for (const auto& path : c) EXPECT_EQ(path.find("cache32"), std::string::npos);
}

}  // namespace
}  // namespace fracgpu
