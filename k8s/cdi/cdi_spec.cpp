// Building and checking one device's CDI spec (see cdi_spec.h).
#include "cdi/cdi_spec.h"

namespace fracgpu::k8s::cdi {
namespace {

bool letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool alnum(char c) {
  return letter(c) || (c >= '0' && c <= '9');
}

// First a letter, last a letter or digit, in between alphanumerics or one of `extra`.
Status check_name(const std::string& what, const std::string& name, const std::string& extra) {
  if (name.empty()) return Status::failure("the CDI " + what + " is empty");
  if (!letter(name.front()))
    return Status::failure("the CDI " + what + " \"" + name + "\" does not start with a letter");
  if (!alnum(name.back()))
    return Status::failure("the CDI " + what + " \"" + name +
                           "\" does not end with a letter or digit");
  for (char c : name) {
    if (!alnum(c) && extra.find(c) == std::string::npos)
      return Status::failure("the CDI " + what + " \"" + name + "\" has a '" + std::string(1, c) +
                             "' (allowed: letters, digits and \"" + extra + "\")");
  }
  return {};
}

Status check_path(const std::string& what, const std::string& path) {
  if (path.empty() || path.front() != '/')
    return Status::failure("the CDI " + what + " \"" + path + "\" is not an absolute path");
  return {};
}

}  // namespace

Status validate_kind(const std::string& kind) {
  const auto slash = kind.find('/');
  if (slash == std::string::npos || kind.find('/', slash + 1) != std::string::npos)
    return Status::failure("the CDI kind \"" + kind + "\" is not <vendor>/<class>");
  if (auto vendor = check_name("vendor", kind.substr(0, slash), "-_."); !vendor) return vendor;
  // No '.' in the class: loaders older than spec 0.6.0 (podman 4.3's) refuse it.
  return check_name("class", kind.substr(slash + 1), "-_");
}

Status validate_device_name(const std::string& name) {
  return check_name("device name", name, "-_.:");
}

Status validate_edits(const ContainerEdits& edits) {
  for (const auto& [key, value] : edits.env) {
    if (key.empty() || key.find('=') != std::string::npos)
      return Status::failure("the CDI environment variable name \"" + key + "\" is not valid");
  }
  for (const auto& m : edits.mounts) {
    if (auto s = check_path("mount's host path", m.host_path); !s) return s;
    if (auto s = check_path("mount's container path", m.container_path); !s) return s;
  }
  return {};
}

std::string qualified_name(const std::string& kind, const std::string& name) {
  return kind + "=" + name;
}

Result<nlohmann::json> device_spec(const std::string& kind, const std::string& name,
                                   const ContainerEdits& edits) {
  using R = Result<nlohmann::json>;
  for (const Status& s : {validate_kind(kind), validate_device_name(name), validate_edits(edits)})
    if (!s) return R::failure(s.error());
  nlohmann::json container_edits = nlohmann::json::object();
  if (!edits.env.empty()) {
    auto& env = container_edits["env"] = nlohmann::json::array();
    for (const auto& [key, value] : edits.env) env.push_back(key + "=" + value);
  }
  if (!edits.mounts.empty()) {
    auto& mounts = container_edits["mounts"] = nlohmann::json::array();
    for (const auto& m : edits.mounts) {
      nlohmann::json options = {"rbind", "nosuid", "nodev"};
      options.push_back(m.read_only ? "ro" : "rw");
      mounts.push_back({{"hostPath", m.host_path},
                        {"containerPath", m.container_path},
                        {"type", "bind"},
                        {"options", options}});
    }
  }
  if (container_edits.empty())
    return R::failure("the CDI device " + name + " has no container edits (runtimes refuse it)");
  return nlohmann::json{
      {"cdiVersion", kCdiVersion},
      {"kind", kind},
      {"devices", nlohmann::json::array({{{"name", name}, {"containerEdits", container_edits}}})}};
}

std::string spec_file_name(const std::string& kind, const std::string& name) {
  std::string base = kind;
  base[base.find('/')] = '-';
  return base + "_" + name + ".json";
}

std::string device_of_file(const std::string& kind, const std::string& file_name) {
  std::string prefix = kind;
  const auto slash = prefix.find('/');
  if (slash == std::string::npos) return "";
  prefix[slash] = '-';
  prefix += "_";
  static const std::string suffix = ".json";
  if (file_name.size() <= prefix.size() + suffix.size() || file_name.rfind(prefix, 0) != 0 ||
      file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  const std::string name =
      file_name.substr(prefix.size(), file_name.size() - prefix.size() - suffix.size());
  return validate_device_name(name) ? name : "";
}

}  // namespace fracgpu::k8s::cdi
