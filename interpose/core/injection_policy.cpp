// The rules of injection_policy.h. Pure: facts in, a plan (or a verdict) out.
#include "core/injection_policy.h"

#include <sys/stat.h>

#include "fracgpu/paths.h"

namespace fracgpu {
namespace {

bool trusted(uid_t uid, uid_t node_broker_uid) {
  return uid == 0 || uid == node_broker_uid;
}

std::string uid_text(uid_t uid) {
  return "uid " + std::to_string(uid);
}

std::string trusted_text(uid_t node_broker_uid) {
  return node_broker_uid == 0 ? std::string("root")
                              : "root or the broker's " + uid_text(node_broker_uid);
}

InjectionPlan registering(const std::string& socket_path) {
  InjectionPlan plan;
  plan.action = InjectionPlan::Action::kRegister;
  plan.socket_path = socket_path;
  return plan;
}

}  // namespace

InjectionPlan plan_injection(const ShimConfig& config, const NodeFacts& facts) {
  // a) A pod: the node put this process in a tenant, whatever its environment says.
  if (facts.pod_socket) {
    InjectionPlan plan = registering(paths::kDefaultTenantSocket);
    if (config.disabled) {
      plan.warnings.push_back(std::string("FRACGPU_DISABLE is ignored: the node placed this "
                                          "process in a tenant (") +
                              paths::kDefaultTenantSocket + " exists)");
    }
    if (config.socket_explicit && config.socket_path != paths::kDefaultTenantSocket) {
      plan.warnings.push_back("FRACGPU_SOCKET=" + config.socket_path +
                              " is ignored: the node placed this process in the tenant of " +
                              paths::kDefaultTenantSocket);
    }
    return plan;
  }
  // b) A host with a node broker: a named socket must be the node's (checked at connect).
  if (config.socket_explicit && facts.node_broker_uid) {
    InjectionPlan plan = registering(config.socket_path);
    plan.node_broker_uid = facts.node_broker_uid;
    if (config.disabled) {
      plan.warnings.push_back(
          "FRACGPU_DISABLE is ignored: FRACGPU_SOCKET names a tenant socket "
          "on a node whose fracgpu broker sets the caps");
    }
    return plan;
  }
  // c) No node broker: the user's own choices, unless the node preloaded the shim.
  if (config.socket_explicit && facts.preloaded_by_node) {
    InjectionPlan plan = registering(config.socket_path);
    if (config.disabled) {
      plan.warnings.push_back(
          "FRACGPU_DISABLE is ignored: the node preloads fracgpu "
          "(/etc/ld.so.preload) and FRACGPU_SOCKET names a tenant");
    }
    return plan;
  }
  if (config.disabled) {
    InjectionPlan plan;
    plan.action = InjectionPlan::Action::kPassThrough;
    return plan;
  }
  if (config.socket_explicit) return registering(config.socket_path);
  return InjectionPlan{};
}

std::optional<std::string> untrusted_server(const std::string& socket_path, uid_t server_uid,
                                            uid_t node_broker_uid) {
  if (trusted(server_uid, node_broker_uid)) return std::nullopt;
  return "FRACGPU_SOCKET=" + socket_path + " is served by " + uid_text(server_uid) +
         ", not by this node's fracgpu broker (" + trusted_text(node_broker_uid) +
         "); CUDA is unavailable to this process";
}

std::optional<std::string> unsafe_socket_path(const std::vector<PathEntry>& entries,
                                              uid_t node_broker_uid) {
  if (entries.empty()) return std::string("FRACGPU_SOCKET names no path");
  for (std::size_t i = 0; i + 1 < entries.size(); ++i) {
    const PathEntry& dir = entries[i];
    const PathEntry& next = entries[i + 1];
    std::string why;
    if (!trusted(dir.uid, node_broker_uid)) {
      why = dir.path + " belongs to " + uid_text(dir.uid);
    } else if ((dir.mode & (S_IWGRP | S_IWOTH)) != 0) {
      // A sticky directory (/tmp) lets others add names, but not rename or remove ours.
      if ((dir.mode & S_ISVTX) == 0) {
        why = dir.path + " is writable by other users";
      } else if (!trusted(next.uid, node_broker_uid)) {
        why = next.path + " belongs to " + uid_text(next.uid) + " in the shared directory " +
              dir.path;
      }
    }
    if (!why.empty()) {
      return "FRACGPU_SOCKET=" + entries.back().path + " is not a socket of this node's fracgpu " +
             "broker: " + why + ", so a process other than " + trusted_text(node_broker_uid) +
             " could replace it; CUDA is unavailable to this process";
    }
  }
  return std::nullopt;
}

std::string node_broker_evidence(const std::string& run_dir, uid_t node_broker_uid) {
  return ". This host counts as a node with a fracgpu broker because " + run_dir + "/" +
         paths::kBrokerLockName + " exists (owned by " + uid_text(node_broker_uid) +
         "); a node broker leaves it behind when it stops, until root removes " + run_dir;
}

}  // namespace fracgpu
