// The node's memory as the kernel reports it, for the overcommit policies: its size (the
// host budget's `auto`, the swap reserves' floor) and what it can still give now
// (MemAvailable of /proc/meminfo: what the swap reserves must leave free,
// core/guarantee_enforcer.h). Cost: one read of a small procfs file per call (tens of µs);
// the enforcer calls it once per tick, only while reserves are in play.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fracgpu::broker {

// The node's physical memory in bytes (0 when the system does not say).
uint64_t node_memory_bytes();

// MemAvailable of `meminfo` (a /proc/meminfo format file), in bytes; nullopt when the file
// cannot be read or has no such line (a kernel before 3.14), or the line is malformed.
std::optional<uint64_t> mem_available(const std::string& meminfo = "/proc/meminfo");

}  // namespace fracgpu::broker
