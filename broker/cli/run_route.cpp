// The route of `fracgpu run` (see run_route.h). One stat at start-up; nothing else.
#include "cli/run_route.h"

namespace fracgpu::cli {

RunRouteChoice choose_run_route(const RunSituation& s) {
  if (s.joining) {
    if (s.admin_answers || s.node_broker_uid) return {RunRoute::kJoinTenant, ""};
    return {RunRoute::kRefuse,
            "--tenant joins a tenant of the node's fracgpu broker, and no broker "
            "has served " +
                s.run_dir + " (start one, or give its --run-dir)"};
  }
  if (s.admin_answers) return {RunRoute::kNodeAdmin, ""};
  // A private broker beside the node's would hand out memory the node guaranteed to
  // others (and the shim would refuse its socket anyway): only root or the broker's own
  // uid, for whom the node's rules are theirs to set, may have one.
  if (s.node_broker_uid && s.caller_uid != 0 && s.caller_uid != *s.node_broker_uid) {
    return {
        RunRoute::kRefuse,
        "the node's fracgpu broker serves " + s.run_dir + " (uid " + std::to_string(s.caller_uid) +
            " may not create tenants there, and `fracgpu run` does not start a private broker "
            "beside it); ask an administrator for a tenant (fracgpu tenant create NAME --owner " +
            "USER --memory SIZE) and run with: fracgpu run --tenant NAME -- CMD"};
  }
  return {RunRoute::kPrivateBroker, ""};
}

}  // namespace fracgpu::cli
