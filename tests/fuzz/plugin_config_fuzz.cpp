// Fuzzer of the device plugin's per-node config file (the ConfigMap): the input is the
// file, JSON or key=value lines, read by load_config_file for node "node-a", then
// validate and resource_classes as main.cpp does. Checked, besides never throwing:
//  values   a JSON file that loads sets each setting to exactly the whole number it
//           holds, the node's entry winning over the plain one (a number that does not
//           fit must be refused, not wrapped into range);
//  classes  a valid config advertises disjoint index ranges that cover slices +
//           besteffort-slices of each GPU, each class with slices and an endpoint name
//           of its own, plain file names.
// Seeds: corpus/plugin_config/ (ConfigMaps as documented in docs/kubernetes.md).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "device_plugin/plugin_config.h"
#include "device_plugin/resource_class.h"
#include "fuzz_support.h"

namespace {

using namespace fracgpu;
using nlohmann::json;

constexpr const char* kNode = "node-a";

struct Setting {
  const char* key;
  int k8s::PluginConfig::*member;
};
constexpr Setting kSettings[] = {
    {"slices", &k8s::PluginConfig::slices},
    {"high-slices", &k8s::PluginConfig::high_slices},
    {"besteffort-slices", &k8s::PluginConfig::besteffort_slices},
    {"pod-resources-interval", &k8s::PluginConfig::pod_resources_interval}};

// The whole number a JSON file gives `key` (the node's entry first), if any.
std::optional<json> json_value(const json& doc, const char* key) {
  if (doc.contains("nodes") && doc["nodes"].is_object() && doc["nodes"].contains(kNode)) {
    const json& node = doc["nodes"][kNode];
    if (node.is_object() && node.contains(key)) return node[key];
  }
  if (doc.contains(key)) return doc[key];
  return std::nullopt;
}

void check_json_values(std::string_view text, const k8s::PluginConfig& loaded) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') return;
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return;
  const k8s::PluginConfig defaults;
  for (const Setting& s : kSettings) {
    const auto value = json_value(doc, s.key);
    const int got = loaded.*s.member;
    if (!value) {
      FUZZ_CHECK(got == defaults.*s.member, std::string(s.key) + " changed without being given");
      continue;
    }
    FUZZ_CHECK(value->is_number_integer(), std::string(s.key) + " accepted as " + value->dump());
    const bool fits = value->is_number_unsigned()
                          ? value->get<uint64_t>() <= uint64_t{std::numeric_limits<int>::max()}
                          : value->get<int64_t>() >= std::numeric_limits<int>::min() &&
                                value->get<int64_t>() <= std::numeric_limits<int>::max();
    FUZZ_CHECK(
        fits, std::string(s.key) + " " + value->dump() + " was accepted as " + std::to_string(got));
    FUZZ_CHECK(got == value->get<int64_t>(), std::string(s.key) + " is " + std::to_string(got) +
                                                 ", the file says " + value->dump());
  }
}

void check_classes(const k8s::PluginConfig& config) {
  const auto classes = k8s::resource_classes(config);
  FUZZ_CHECK(!classes.empty(), "a valid config advertises nothing");
  std::set<int> indices;
  std::set<std::string> endpoints, prefixes;
  int covered = 0;
  for (const auto& cls : classes) {
    FUZZ_CHECK(cls.count > 0 && cls.first_index >= 0, "class " + cls.label + " has no slices");
    FUZZ_CHECK(cls.slices_per_gpu == config.slices,
               "class " + cls.label + " sizes slices differently");
    for (int i = cls.first_index; i < cls.first_index + cls.count; ++i)
      FUZZ_CHECK(indices.insert(i).second, "slice index " + std::to_string(i) + " in two classes");
    covered += cls.count;
    FUZZ_CHECK(cls.endpoint_name.find('/') == std::string::npos &&
                   endpoints.insert(cls.endpoint_name).second,
               "endpoint " + cls.endpoint_name);
    FUZZ_CHECK(prefixes.insert(cls.tenant_prefix).second, "two classes name tenants alike");
  }
  FUZZ_CHECK(covered == config.slices + config.besteffort_slices,
             "the classes do not cover the slices");
  FUZZ_CHECK(*indices.rbegin() < config.slices + config.besteffort_slices, "an index out of range");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const std::filesystem::path file = fuzz::scratch_dir() / "plugin.conf";
  const std::string_view text = fuzz::as_text(data, size);
  try {
    fuzz::write_file(file, text);
    k8s::PluginConfig config;
    if (auto s = k8s::load_config_file(file.string(), kNode, config); !s) {
      FUZZ_CHECK(!s.error().empty(), "a refusal without its sentence");
      return 0;
    }
    check_json_values(text, config);
    if (k8s::validate(config)) check_classes(config);
  } catch (const std::exception& e) {
    fuzz::fail(std::string("reading the config threw: ") + e.what());
  }
  return 0;
}
