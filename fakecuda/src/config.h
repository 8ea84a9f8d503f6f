// Configuration of the simulated device, read from FAKECUDA_* environment variables.
// The process that creates the shared segment reads the sizing variables and stamps
// them into the segment; every later process (library or fakecuda-ctl) uses what the
// creator stamped, so one machine-wide device never has two different shapes. Values
// are parsed strictly: anything malformed falls back to the default with one line on
// stderr, because a silently misread "16G" would make every capacity test lie.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fakecuda {

inline constexpr uint32_t kMaxDevices = 8;

struct DeviceConfig {
  uint32_t device_count = 1;
  uint64_t memory_bytes = 16ull << 30;              // per device
  uint64_t context_footprint_bytes = 300ull << 20;  // charged per context
  uint64_t timeslice_us = 2000;
  // FAKECUDA_SHM_MODE: the segment file's mode. 0600 keeps the device to its creator's uid;
  // 0666 is what a real /dev/nvidia* node offers, so that a container user reaches it.
  uint32_t shm_mode = 0600;
};

// Parses "1048576", "512MiB", "16GiB", "16GB" ... (binary suffixes are powers of
// 1024, decimal ones powers of 1000). Returns nullopt on any malformed input.
std::optional<uint64_t> parse_size(std::string_view text);

// Parses a plain unsigned decimal integer within [min, max].
std::optional<uint64_t> parse_unsigned(std::string_view text, uint64_t min, uint64_t max);

// Reads FAKECUDA_DEVICE_COUNT, FAKECUDA_MEMORY, FAKECUDA_CONTEXT_FOOTPRINT,
// FAKECUDA_TIMESLICE_US and FAKECUDA_SHM_MODE (octal, 0600..0666, no execute bits); reports bad
// values on stderr (prefix given by the caller).
DeviceConfig read_device_config(const char* log_prefix);

// FAKECUDA_COPY_BANDWIDTH: the speed of this process's copies in bytes per second, for
// tests that need a copy to take a while (a swap to host killed half-way). Per process,
// read from its own environment (not stamped into the segment); 0 (unset or malformed,
// reported on stderr) keeps the device's own 1000 GB/s.
uint64_t copy_bytes_per_second(const char* log_prefix);

// FAKECUDA_SHM_NAME, or "/fracgpu-fakecuda-<uid>" when unset or not a valid
// shm_open name (one leading '/', no other '/', at most 200 characters).
std::string shared_segment_name(const char* log_prefix);

}  // namespace fakecuda
