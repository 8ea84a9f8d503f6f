// The private broker: a temporary directory and BrokerProcess (broker_launcher.h).
#include "client/private_broker.h"

#include "client/run_paths.h"

namespace fracgpu::client {

Status PrivateBroker::start() {
  auto dir = make_temp_dir("fracgpu");
  if (!dir) return Status::failure(dir.error());
  temp_dir_ = *dir;
  run_dir_ = temp_dir_ / "run";
  BrokerLaunch launch;
  launch.program = {"/proc/self/exe", "broker"};
  launch.run_dir = run_dir_;
  launch.state_dir = temp_dir_ / "state";
  launch.args = {"--log-level", "error"};
  launch.detach = true;
  launch.description = "the private broker";
  Status status = process_.start(launch);
  if (!status) stop();
  return status;
}

void PrivateBroker::stop() {
  process_.stop(std::chrono::seconds(5));
  if (!temp_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
    temp_dir_.clear();
  }
}

}  // namespace fracgpu::client
