// The shim's flat-JSON reader: fields of the broker's replies, and garbage that must
// come back as "absent" rather than a crash or a wrong value.
#include "core/wire_json.h"

#include <gtest/gtest.h>

#include <random>

namespace fracgpu::wire {
namespace {

TEST(WireJson, ReadsTopLevelFields) {
  const std::string reply =
      R"({"ok":true,"protocol":1,"tenant":"team-a","slot":12,"quota":"quota","nested":{"slot":99},"list":[1,{"ok":false}],"neg":-5})";
  EXPECT_EQ(bool_field(reply, "ok"), true);
  EXPECT_EQ(int_field(reply, "slot"), 12);
  EXPECT_EQ(int_field(reply, "neg"), -5);
  EXPECT_EQ(string_field(reply, "tenant"), "team-a");
  EXPECT_EQ(int_field(reply, "missing"), std::nullopt);
  EXPECT_EQ(int_field(reply, "tenant"), std::nullopt);  // wrong type
  EXPECT_EQ(string_field(reply, "slot"), std::nullopt);
}

TEST(WireJson, KeysInsideStringsOrNestedValuesAreNotFields) {
  EXPECT_EQ(int_field(R"({"note":"\"slot\":7","x":1})", "slot"), std::nullopt);
  EXPECT_EQ(int_field(R"({"inner":{"slot":7}})", "slot"), std::nullopt);
  EXPECT_EQ(string_field(R"({"error":"quote \" and \\ inside"})", "error"),
            "quote \" and \\ inside");
}

TEST(WireJson, GarbageIsAbsentNeverACrash) {
  for (const char* bad : {"", "{", "}", "{\"ok\"", "{\"ok\":}", "[1,2]", "{\"slot\":12abc}",
                          "{\"slot\":99999999999999999999999}", "null", "{\"a\":{\"b\":[}"}) {
    EXPECT_EQ(int_field(bad, "slot"), std::nullopt) << bad;
    EXPECT_EQ(bool_field(bad, "ok"), std::nullopt) << bad;
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {
    std::string noise(rng() % 64, '\0');
    for (char& c : noise) c = "{}[]\":,ok0123slot \\tru"[rng() % 23];
    (void)int_field(noise, "slot");
    (void)string_field(noise, "ok");
  }
}

TEST(WireJson, QuoteEscapes) {
  EXPECT_EQ(quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(quote("line\nbreak"), R"("linebreak")");
}

}  // namespace
}  // namespace fracgpu::wire
