// Sizes and percentages as users type them: every accepted form, and every kind of
// bad input rejected with a sentence naming the flag.
#include "core/quantity_parser.h"

#include <gtest/gtest.h>

namespace fracgpu::broker {
namespace {

uint64_t size(const char* text) {
  auto r = parse_size(text, "--memory");
  EXPECT_TRUE(r.ok()) << text << ": " << r.error();
  return r.ok() ? *r : 0;
}

std::string size_error(const char* text) {
  auto r = parse_size(text, "--memory");
  EXPECT_FALSE(r.ok()) << text << " was accepted as " << (r.ok() ? *r : 0);
  return r.ok() ? "" : r.error();
}

TEST(ParseSize, PlainBytesAndBinaryUnits) {
  EXPECT_EQ(size("1073741824"), 1073741824u);
  EXPECT_EQ(size("512B"), 512u);
  EXPECT_EQ(size("1KiB"), 1024u);
  EXPECT_EQ(size("8MiB"), 8u << 20);
  EXPECT_EQ(size("8GiB"), 8ull << 30);
  EXPECT_EQ(size("2TiB"), 2ull << 40);
}

TEST(ParseSize, DecimalUnits) {
  EXPECT_EQ(size("1KB"), 1000u);
  EXPECT_EQ(size("1MB"), 1000000u);
  EXPECT_EQ(size("16GB"), 16000000000u);
  EXPECT_EQ(size("1TB"), 1000000000000u);
}

TEST(ParseSize, UnitIsCaseInsensitiveAndMayBeSpaced) {
  EXPECT_EQ(size("8gib"), 8ull << 30);
  EXPECT_EQ(size("8GIB"), 8ull << 30);
  EXPECT_EQ(size("8 GiB"), 8ull << 30);
  EXPECT_EQ(size("1gb"), 1000000000u);
  EXPECT_EQ(size("  4MiB  "), 4u << 20);
}

TEST(ParseSize, DecimalsAreExact) {
  EXPECT_EQ(size("1.5GiB"), 1610612736u);
  EXPECT_EQ(size("0.5MiB"), 512u * 1024);
  EXPECT_EQ(size("2.25GB"), 2250000000u);
  EXPECT_EQ(size(".5GiB"), 512ull << 20);
  EXPECT_EQ(size("0.1KiB"), 102u);  // rounded down to whole bytes
}

TEST(ParseSize, RejectsNegativeZeroAndGarbage) {
  EXPECT_NE(size_error("-1GiB").find("negative"), std::string::npos);
  EXPECT_NE(size_error("0").find("larger than zero"), std::string::npos);
  EXPECT_NE(size_error("0GiB").find("larger than zero"), std::string::npos);
  EXPECT_NE(size_error("abc").find("not a size"), std::string::npos);
  EXPECT_NE(size_error("8XB").find("unknown unit"), std::string::npos);
  EXPECT_NE(size_error("8G").find("unknown unit"), std::string::npos);  // ambiguous: GiB or GB?
  EXPECT_NE(size_error("8Gi").find("unknown unit"), std::string::npos);
  EXPECT_FALSE(size_error("").empty());
  EXPECT_FALSE(size_error("1.5").empty());  // fractional bytes
  EXPECT_FALSE(size_error("1.GiB").empty());
  EXPECT_FALSE(size_error("1e9").empty());
  EXPECT_FALSE(size_error("1GiB2").empty());
  EXPECT_FALSE(size_error("+1GiB").empty());
  EXPECT_FALSE(size_error("0x10").empty());
  EXPECT_NE(size_error("8XB").find("--memory"), std::string::npos);
}

TEST(ParseSize, RejectsOverflow) {
  EXPECT_EQ(size("18446744073709551615"), UINT64_MAX);
  EXPECT_NE(size_error("18446744073709551616").find("too large"), std::string::npos);
  EXPECT_NE(size_error("16777216TiB").find("too large"), std::string::npos);
  EXPECT_NE(size_error("99999999999999999999999GiB").find("too large"), std::string::npos);
}

TEST(ParseSize, ZeroAllowedWhereAsked) {
  auto r = parse_size_allow_zero("0", "--memory-request");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);
  EXPECT_FALSE(parse_size_allow_zero("-0", "--memory-request").ok());
}

TEST(ParsePercent, AcceptsOneToHundredWithOptionalPercent) {
  EXPECT_EQ(*parse_percent("30", "--compute"), 30u);
  EXPECT_EQ(*parse_percent("30%", "--compute"), 30u);
  EXPECT_EQ(*parse_percent("1", "--compute"), 1u);
  EXPECT_EQ(*parse_percent("100%", "--compute"), 100u);
}

TEST(ParsePercent, RejectsOutOfRangeAndGarbage) {
  for (const char* bad : {"0", "0%", "101", "-5", "30.5", "abc", "", "%", "30%%", "1000", "3 0"}) {
    auto r = parse_percent(bad, "--compute");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.error().find("--compute"), std::string::npos);
    }
  }
}

TEST(FormatSize, ShortHumanForms) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(512), "512 B");
  EXPECT_EQ(format_size(16ull << 30), "16 GiB");
  EXPECT_EQ(format_size(1610612736), "1.5 GiB");
  EXPECT_EQ(format_size(300ull << 20), "300 MiB");
}

}  // namespace
}  // namespace fracgpu::broker
