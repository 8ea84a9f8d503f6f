// fracgpu-broker: the per-node daemon (run in the foreground; systemd or a DaemonSet
// supervises it). All logic is in fracgpu_broker_core; this only parses the flags.
// `fracgpu-broker --probe` checks a running broker instead (health_probe.h).
#include <CLI/CLI.hpp>

#include "core/broker.h"
#include "core/health_probe.h"
#include "fracgpu/paths.h"

int main(int argc, char** argv) {
  fracgpu::broker::BrokerOptions options;
  CLI::App app{"fracgpu-broker: per-node broker of fracgpu GPU memory and compute quotas"};
  fracgpu::broker::add_broker_options(app, options, /*with_run_dir=*/true);
  bool probe = false;
  int probe_timeout_ms = 3000;
  app.add_flag("--probe", probe,
               "Do not run a broker: check that the broker of --run-dir answers on its admin "
               "socket, exit 0 if it does (the Kubernetes liveness and readiness probes)");
  app.add_option("--probe-timeout", probe_timeout_ms,
                 "With --probe: milliseconds to wait for the answer (default 3000)")
      ->check(CLI::Range(100, 60000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fracgpu-broker: %s\n", e.what());
    return 2;
  }
  if (probe) {
    const std::string run_dir =
        options.run_dir.empty() ? std::string(fracgpu::paths::kRunDir) : options.run_dir;
    return fracgpu::broker::run_health_probe(run_dir, std::chrono::milliseconds(probe_timeout_ms));
  }
  return fracgpu::broker::run_broker(std::move(options));
}
