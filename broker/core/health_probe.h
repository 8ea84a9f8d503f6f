// `fracgpu-broker --probe`: the Kubernetes liveness and readiness check (exec probe). It
// asks the broker's event loop itself, over the admin socket (0600, root's; a Unix socket
// no pod reaches), for its GPU list, and succeeds only on a well-formed "ok" reply within
// the timeout. Unlike an HTTP GET of /healthz on the metrics port, it proves the loop that
// serves tenants is alive, and no other pod can make it fail by holding connections to a
// port: the admin socket keeps room for root above its connection cap (connection_limits.h).
#pragma once

#include <chrono>
#include <filesystem>

namespace fracgpu::broker {

// 0 when the broker of `run_dir` answered within `timeout`; 1 otherwise, with one line on
// stderr saying why.
int run_health_probe(const std::filesystem::path& run_dir, std::chrono::milliseconds timeout);

}  // namespace fracgpu::broker
