// fracgpu-broker: the per-node daemon (run in the foreground; systemd or a DaemonSet
// supervises it). All logic is in fracgpu_broker_core; this only parses the flags.
#include <CLI/CLI.hpp>

#include "core/broker.h"

int main(int argc, char** argv) {
  fracgpu::broker::BrokerOptions options;
  CLI::App app{"fracgpu-broker: per-node broker of fracgpu GPU memory and compute quotas"};
  fracgpu::broker::add_broker_options(app, options, /*with_run_dir=*/true);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fracgpu-broker: %s\n", e.what());
    return 2;
  }
  return fracgpu::broker::run_broker(std::move(options));
}
