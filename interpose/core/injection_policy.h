// Whether this process's environment may steer it out of a cap the node set (issue 12,
// item 3). The decisions only: the facts they read (is there a pod's tenant socket, a node
// broker, does /etc/ld.so.preload name this shim, who owns each directory on the way to a
// socket) are gathered by shim_config.h's read_node_facts/inspect_path, so every rule is
// unit-tested with invented facts. Runs once, at the first CUDA call; never on a hot path.
//
// The rules, in order:
//  a) In a pod (the default tenant socket exists): FRACGPU_DISABLE and FRACGPU_SOCKET are
//     ignored, with a warning each; the process registers at the default socket, and fails
//     closed if it cannot.
//  b) On a host where a node broker has served kRunDir (its broker.lock exists): a
//     FRACGPU_SOCKET must be served by root or by the node broker's uid, and every directory
//     on the way to it must be one that only they can change (else another uid could swap
//     the socket between the check and the registration); otherwise the process fails
//     closed. FRACGPU_DISABLE is ignored when FRACGPU_SOCKET is set: the socket is the
//     node's, or the process fails closed anyway.
//  c) Otherwise (no node broker; a user's own private broker) as before: FRACGPU_DISABLE is
//     honoured, FRACGPU_SOCKET used — except that a shim the node preloaded through
//     /etc/ld.so.preload ignores FRACGPU_DISABLE when there is a tenant to join.
// With no socket to register at, nothing can be escaped: FRACGPU_DISABLE is then honoured
// silently (the shim only forwards either way).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "core/shim_config.h"

namespace fracgpu {

struct InjectionPlan {
  enum class Action {
    kPassThrough,  // FRACGPU_DISABLE honoured: hooks only forward
    kNoTenant,     // hooks active, no tenant: bodies forward
    kRegister,     // register at socket_path; a broker that does not answer fails closed
  };
  Action action = Action::kNoTenant;
  std::string socket_path;
  // Rule b: the socket's server must be root or this uid, and its path safe (see below).
  std::optional<uid_t> node_broker_uid;
  std::vector<std::string> warnings;  // one line each, for the shim's logger
};

InjectionPlan plan_injection(const ShimConfig& config, const NodeFacts& facts);

// Rule b at connect time: nullopt when `server_uid` may serve a tenant socket on a node whose
// broker runs as `node_broker_uid`, else the error line (naming the path and the uid).
std::optional<std::string> untrusted_server(const std::string& socket_path, uid_t server_uid,
                                            uid_t node_broker_uid);

// Rule b's path check, over inspect_path's entries ("/" first, the socket last): nullopt
// when no uid other than root and the node broker's could replace the socket, else why.
// Safe means: every directory is owned by a trusted uid and is writable by nobody else,
// or is sticky (like /tmp) and the next entry is owned by a trusted uid.
std::optional<std::string> unsafe_socket_path(const std::vector<PathEntry>& entries,
                                              uid_t node_broker_uid);

// Appended to rule b's refusals: why this host counts as a node with a broker — the lock
// file in `run_dir`, which a broker that stopped leaves behind — so that a refusal beside a
// stale node layout names the file to look at, not only the socket.
std::string node_broker_evidence(const std::string& run_dir, uid_t node_broker_uid);

}  // namespace fracgpu
