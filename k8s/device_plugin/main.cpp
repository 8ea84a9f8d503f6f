// fracgpu-device-plugin: advertises each GPU of the node broker as N slices of
// fracgpu.io/gpu-slice (some of them, optionally, as fracgpu.io/gpu-slice-high, plus
// optional extra fracgpu.io/gpu-slice-besteffort slices) to the kubelet and turns each
// container's slices into a broker tenant with the matching quota and priority. This
// file only reads flags and signals.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "common/logging.h"
#include "device_plugin/plugin_config.h"
#include "device_plugin/plugin_runner.h"

namespace {

std::atomic<bool> g_stop{false};

extern "C" void request_stop(int) {
  g_stop = true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fracgpu::k8s;
  PluginConfig config;
  std::string config_file;
  std::string node_name = std::getenv("NODE_NAME") ? std::getenv("NODE_NAME") : "";
  int slices_flag = config.slices;
  int high_flag = config.high_slices;
  int besteffort_flag = config.besteffort_slices;
  long health_ms = config.health_interval.count();
  int pod_resources_interval_flag = config.pod_resources_interval;
  std::string cdi_flag = cdi_mode_name(config.cdi_mode);

  CLI::App app{
      "fracgpu-device-plugin: GPU slices (fracgpu.io/gpu-slice, -high, -besteffort) for the "
      "kubelet"};
  app.add_option("--plugin-dir", config.plugin_dir, "the kubelet's device-plugin directory")
      ->capture_default_str();
  app.add_option("--broker-run-dir", config.broker_run_dir,
                 "the node broker's run directory (host path)")
      ->capture_default_str();
  auto* slices_option =
      app.add_option("--slices", slices_flag, "slices per GPU (overrides --config; default 8)");
  auto* high_option = app.add_option(
      "--high-slices", high_flag,
      "of each GPU's slices, how many are fracgpu.io/gpu-slice-high (overrides --config; "
      "default 0)");
  auto* besteffort_option =
      app.add_option("--besteffort-slices", besteffort_flag,
                     "extra unguaranteed fracgpu.io/gpu-slice-besteffort slices per GPU "
                     "(overrides --config; default 0)");
  app.add_option("--config", config_file,
                 "config file: JSON or key=value (slices, high-slices, besteffort-slices, "
                 "pod-resources-interval, each also <key>.<node>)");
  app.add_option("--node-name", node_name,
                 "this node's name, for per-node config entries (env NODE_NAME)");
  app.add_option("--shim-host-path", config.shim_host_path, "libfracgpu.so on the host")
      ->capture_default_str();
  app.add_option("--preload-host-path", config.preload_host_path,
                 "the ld.so.preload file on the host naming the shim")
      ->capture_default_str();
  app.add_option("--endpoint", config.endpoint_name, "our socket's name in the plugin directory")
      ->capture_default_str();
  app.add_option("--health-interval-ms", health_ms, "how often the broker's GPU list is re-read")
      ->capture_default_str();
  app.add_option("--pod-resources-socket", config.pod_resources_socket,
                 "the kubelet's PodResources API socket, read to label tenants with their pod")
      ->capture_default_str();
  auto* pod_resources_option = app.add_option(
      "--pod-resources-interval", pod_resources_interval_flag,
      "seconds between readings of the kubelet's PodResources API (0: off; overrides --config; "
      "default 10)");
  app.add_option("--cdi", cdi_flag,
                 "what Allocate returns: off (mounts and environment), both (those and the "
                 "tenant's CDI device, its spec written in --cdi-dir), only (the CDI device "
                 "alone: only for runtimes that apply CDI)")
      ->capture_default_str();
  app.add_option("--cdi-dir", config.cdi_dir,
                 "where the tenants' CDI specs are written (a directory the runtime reads)")
      ->capture_default_str();
  app.add_option("--log-level", config.log_level, "trace, debug, info, warn, error, critical, off")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help prints and succeeds; any other parse error is bad usage: status 2, like the CLI.
    return app.exit(e) == 0 ? 0 : 2;
  }

  // Logs go to stderr (the container log), in the broker's format.
  if (auto logging = fracgpu::broker::setup_logging(config.log_level, "fracgpu-device-plugin");
      !logging) {
    std::fprintf(stderr, "fracgpu-device-plugin: %s\n", logging.error().c_str());
    return 2;
  }
  if (!config_file.empty()) {
    if (auto loaded = load_config_file(config_file, node_name, config); !loaded) {
      spdlog::error("{}", loaded.error());
      return 2;
    }
  }
  if (slices_option->count() > 0) config.slices = slices_flag;
  if (high_option->count() > 0) config.high_slices = high_flag;
  if (besteffort_option->count() > 0) config.besteffort_slices = besteffort_flag;
  if (pod_resources_option->count() > 0)
    config.pod_resources_interval = pod_resources_interval_flag;
  if (health_ms < 10) {
    spdlog::error("--health-interval-ms must be at least 10, got {}", health_ms);
    return 2;
  }
  config.health_interval = std::chrono::milliseconds(health_ms);
  auto cdi_mode = parse_cdi_mode(cdi_flag);
  if (!cdi_mode) {
    spdlog::error("{}", cdi_mode.error());
    return 2;
  }
  config.cdi_mode = *cdi_mode;
  if (auto valid = validate(config); !valid) {
    spdlog::error("{}", valid.error());
    return 2;
  }

  struct sigaction action {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  spdlog::info(
      "fracgpu-device-plugin: {} slices per GPU ({} of them high) and {} best-effort slices, "
      "plugin dir {}, "
      "broker {}",
      config.slices, config.high_slices, config.besteffort_slices, config.plugin_dir,
      config.broker_run_dir);
  PluginRunner runner(config);
  return runner.run(g_stop);
}
