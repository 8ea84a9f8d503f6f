// Config file parsing for the device plugin (formats in plugin_config.h).
#include "device_plugin/plugin_config.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "device_plugin/slice_ids.h"

namespace fracgpu::k8s {
namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

std::optional<int> parse_int(const std::string& text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The integer settings a config file may hold, each also allowed per node.
struct IntSetting {
  const char* key;
  int PluginConfig::*member;
};
constexpr IntSetting kIntSettings[] = {
    {"slices", &PluginConfig::slices},
    {"high-slices", &PluginConfig::high_slices},
    {"besteffort-slices", &PluginConfig::besteffort_slices},
    {"pod-resources-interval", &PluginConfig::pod_resources_interval}};

const IntSetting* find_setting(const std::string& key) {
  for (const auto& setting : kIntSettings) {
    if (key == setting.key) return &setting;
  }
  return nullptr;
}

// Values found in a file, per setting: the plain one and the one for this node.
struct FoundValues {
  std::optional<int> plain[std::size(kIntSettings)];
  std::optional<int> for_node[std::size(kIntSettings)];

  void apply(PluginConfig& config) const {
    for (std::size_t i = 0; i < std::size(kIntSettings); ++i) {
      if (for_node[i]) {
        config.*kIntSettings[i].member = *for_node[i];
      } else if (plain[i]) {
        config.*kIntSettings[i].member = *plain[i];
      }
    }
  }
};

Status ints_from_json(const nlohmann::json& doc, const std::string& where,
                      std::optional<int> (&out)[std::size(kIntSettings)]) {
  for (std::size_t i = 0; i < std::size(kIntSettings); ++i) {
    const char* key = kIntSettings[i].key;
    if (!doc.contains(key)) continue;
    const auto& value = doc[key];
    if (!value.is_number_integer())
      return Status::failure(where + ": \"" + key + "\" must be a whole number");
    // get<int> alone would wrap a larger number into range (4294967304 slices -> 8).
    const bool fits = value.is_number_unsigned()
                          ? value.get<uint64_t>() <= uint64_t{std::numeric_limits<int>::max()}
                          : value.get<int64_t>() >= std::numeric_limits<int>::min() &&
                                value.get<int64_t>() <= std::numeric_limits<int>::max();
    if (!fits)
      return Status::failure(where + ": \"" + key + "\" " + value.dump() + " is out of range");
    out[i] = value.get<int>();
  }
  return {};
}

Status load_json(const std::string& path, const std::string& text, const std::string& node_name,
                 PluginConfig& config) {
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (!doc.is_object()) return Status::failure(path + " is not a JSON object");
  FoundValues found;
  if (auto s = ints_from_json(doc, path, found.plain); !s) return s;
  if (doc.contains("nodes") && doc["nodes"].is_object() && !node_name.empty() &&
      doc["nodes"].contains(node_name)) {
    const auto& node = doc["nodes"][node_name];
    if (!node.is_object())
      return Status::failure(path + ": nodes." + node_name + " must be an object");
    if (auto s = ints_from_json(node, path + " nodes." + node_name, found.for_node); !s) return s;
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "nodes" && !find_setting(key))
      spdlog::warn("{}: ignoring unknown setting \"{}\"", path, key);
  }
  found.apply(config);
  return {};
}

Status load_key_values(const std::string& path, const std::string& text,
                       const std::string& node_name, PluginConfig& config) {
  FoundValues found;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    const std::string where = path + ":" + std::to_string(number);
    if (eq == std::string::npos)
      return Status::failure(where + ": expected key=value, got \"" + line + "\"");
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    // "<setting>.<node>": node names may contain dots, setting names do not.
    const auto dot = key.find('.');
    const IntSetting* setting = find_setting(key.substr(0, dot));
    if (!setting) {
      spdlog::warn("{}: ignoring unknown setting \"{}\"", where, key);
      continue;
    }
    const bool is_node_key = dot != std::string::npos;
    if (is_node_key && key.substr(dot + 1) != node_name) continue;
    auto parsed = parse_int(value);
    if (!parsed)
      return Status::failure(where + ": " + key + " must be a whole number, got \"" + value + "\"");
    const auto i = static_cast<std::size_t>(setting - kIntSettings);
    (is_node_key ? found.for_node : found.plain)[i] = *parsed;
  }
  found.apply(config);
  return {};
}

}  // namespace

Result<CdiMode> parse_cdi_mode(const std::string& text) {
  for (CdiMode mode : {CdiMode::off, CdiMode::both, CdiMode::only}) {
    if (text == cdi_mode_name(mode)) return mode;
  }
  return Result<CdiMode>::failure("--cdi must be off, both or only, got \"" + text + "\"");
}

const char* cdi_mode_name(CdiMode mode) {
  switch (mode) {
    case CdiMode::off:
      return "off";
    case CdiMode::both:
      return "both";
    case CdiMode::only:
      return "only";
  }
  return "?";
}

Status load_config_file(const std::string& path, const std::string& node_name,
                        PluginConfig& config) {
  std::ifstream in(path);
  if (!in) return Status::failure("cannot read the config file " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{')
    return load_json(path, text, node_name, config);
  return load_key_values(path, text, node_name, config);
}

Status validate(const PluginConfig& config) {
  if (config.slices < 1 || config.slices > kMaxSlicesPerGpu) {
    return Status::failure("slices per GPU must be between 1 and " +
                           std::to_string(kMaxSlicesPerGpu) + ", got " +
                           std::to_string(config.slices));
  }
  if (config.high_slices < 0 || config.high_slices > config.slices) {
    return Status::failure(
        "high-slices must be between 0 and slices (" + std::to_string(config.slices) +
        "): high slices are carved out of each GPU's " + std::to_string(config.slices) +
        " slices, got " + std::to_string(config.high_slices));
  }
  const int besteffort_max = kMaxSlicesPerGpu - config.slices;
  if (config.besteffort_slices < 0 || config.besteffort_slices > besteffort_max) {
    return Status::failure(
        "besteffort-slices must be between 0 and " + std::to_string(besteffort_max) +
        " (slices + besteffort-slices at most " + std::to_string(kMaxSlicesPerGpu) + "), got " +
        std::to_string(config.besteffort_slices));
  }
  if (config.plugin_dir.empty() || config.plugin_dir.front() != '/') {
    return Status::failure("--plugin-dir must be an absolute path, got \"" + config.plugin_dir +
                           "\"");
  }
  if (config.broker_run_dir.empty() || config.broker_run_dir.front() != '/') {
    return Status::failure("--broker-run-dir must be an absolute path, got \"" +
                           config.broker_run_dir + "\"");
  }
  if (config.shim_host_path.empty() || config.shim_host_path.front() != '/') {
    return Status::failure("--shim-host-path must be an absolute path, got \"" +
                           config.shim_host_path + "\"");
  }
  if (config.preload_host_path.empty() || config.preload_host_path.front() != '/') {
    return Status::failure("--preload-host-path must be an absolute path, got \"" +
                           config.preload_host_path + "\"");
  }
  if (config.pod_resources_interval < 0 ||
      config.pod_resources_interval > kMaxPodResourcesInterval) {
    return Status::failure("pod-resources-interval must be between 0 (off) and " +
                           std::to_string(kMaxPodResourcesInterval) + " seconds, got " +
                           std::to_string(config.pod_resources_interval));
  }
  if (config.pod_resources_socket.empty() || config.pod_resources_socket.front() != '/') {
    return Status::failure("--pod-resources-socket must be an absolute path, got \"" +
                           config.pod_resources_socket + "\"");
  }
  if (config.endpoint_name.empty() || config.endpoint_name.find('/') != std::string::npos ||
      config.endpoint_name == kKubeletSocketName) {
    return Status::failure("the endpoint must be a plain socket name other than kubelet.sock");
  }
  return {};
}

}  // namespace fracgpu::k8s
