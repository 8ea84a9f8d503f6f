// The one logger set-up of fracgpu's daemons (fracgpu-broker, fracgpu-device-plugin):
// spdlog to stderr (the terminal, or the container's log) with timestamps, named after
// the program, as the default logger.
#pragma once

#include <string>

#include "common/result.h"

namespace fracgpu::broker {

// Makes `name` the default logger at `level` (trace|debug|info|warn|error|critical|off).
// An unknown level changes nothing and comes back as the one-sentence error.
Status setup_logging(const std::string& level, const std::string& name);

}  // namespace fracgpu::broker
