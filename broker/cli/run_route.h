// Where `fracgpu run` takes its tenant from (issue 12, item 3: it never starts a private
// broker where a node broker runs). The node broker is recognised by its lock file,
// <run dir>/broker.lock, which the broker creates on start and which outlives a restart —
// the same fact the shim reads, through the same function (fracgpu/node_broker.h), so the
// CLI never sets up what the shim would then refuse. The choice itself is a pure function of what
// was found.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "fracgpu/node_broker.h"

namespace fracgpu::cli {

enum class RunRoute {
  kJoinTenant,     // --tenant NAME: register on the existing tenant's socket, no admin call
  kNodeAdmin,      // the admin socket answers us (root, or the broker's uid): create a tenant
  kPrivateBroker,  // no node broker here (or we are root): a private broker for the command
  kRefuse,         // a node broker runs, we may not create tenants: `message` says what to do
};

struct RunRouteChoice {
  RunRoute route = RunRoute::kRefuse;
  std::string message;  // for kRefuse: one sentence, without the "fracgpu: " prefix
};

struct RunSituation {
  bool joining = false;        // --tenant was given
  bool admin_answers = false;  // the admin socket at run_dir accepted us and answered
  std::optional<uid_t> node_broker_uid;
  uid_t caller_uid = 0;
  std::string run_dir;
};

RunRouteChoice choose_run_route(const RunSituation& situation);

}  // namespace fracgpu::cli
