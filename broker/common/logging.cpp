// spdlog set-up shared by the broker and the device plugin (see logging.h).
#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace fracgpu::broker {

Status setup_logging(const std::string& level, const std::string& name) {
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return Status::failure("--log-level '" + level +
                           "' is not one of trace, debug, info, warn, error, critical, off");
  }
  auto logger = spdlog::get(name);
  if (!logger) logger = spdlog::stderr_logger_mt(name);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %n %l: %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return {};
}

}  // namespace fracgpu::broker
