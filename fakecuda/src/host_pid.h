// Host PIDs, as the real driver records them. The NVIDIA kernel module knows a process by
// its pid in the machine's (the host's) PID namespace, so NVML, nvidia-smi and fracgpu's
// audit see host pids even for processes in containers with their own PID namespace. The
// simulated device does the same: each process records, besides its own pid (for /proc
// lookups in its own namespace), its PID namespace and its pid and start time in the
// device's host namespace (the namespace of the process that created the segment).
//
// A process in the host namespace knows its host pid (getpid()). One in another namespace
// cannot learn it from its own /proc, so it asks the device's "pid helper"
// (`fakecuda-ctl pid-helper`, running in the host namespace, the stand-in for the kernel
// module): it connects to the helper's unix socket and the helper replies with the pid the
// kernel reports for the peer (SO_PEERCRED translates it into the helper's namespace).
// Without a reachable helper such a process cannot use the device: cuInit fails with one
// line on stderr, rather than recording a pid nobody can match.
//
// Liveness across namespaces: a sweeper checks a process by its own pid when they share a
// namespace, by its host pid when the sweeper is in the host namespace, and otherwise leaves
// it alone (a container cannot see the host's processes: it must not reclaim their memory).
// Cost: one stat of /proc/self/ns/pid per registration and per sweep; a connect + one
// read per registration of a process outside the host namespace.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace fakecuda {

// Where a process is, beyond its own pid: stamped into its process slot and engine entries.
struct ProcessPlace {
  uint64_t pid_ns = 0;   // inode of its PID namespace; 0: unknown (no /proc)
  uint64_t host_ns = 0;  // inode of the device's host PID namespace
  int32_t host_pid = 0;  // its pid there: what NVML and `fakecuda-ctl status` report
  uint32_t reserved = 0;
  uint64_t host_start_time = 0;  // its start time as the host's /proc reports it
};

// Inode of the calling process's PID namespace (/proc/self/ns/pid), 0 when unreadable.
uint64_t own_pid_namespace();

// FAKECUDA_PID_SOCKET, or "/dev/shm/<segment name>.pids" next to the segment's file.
std::string pid_helper_socket(const std::string& segment_name);

// The caller's place on a device whose host namespace is `host_ns`: its own pid when it
// is in that namespace, else the pid helper's answer. nullopt + `error` when neither works.
std::optional<ProcessPlace> resolve_own_place(uint64_t host_ns, const std::string& segment_name,
                                              std::string& error);

// Whether `pid`/`start_time` (in the namespace `place.pid_ns`) is alive, seen from here:
// by its own pid in the same namespace, by its host pid from the host namespace; a process
// this namespace cannot see counts as alive (and not stopped).
bool process_alive(int32_t pid, uint64_t start_time, const ProcessPlace& place);
bool process_stopped(int32_t pid, const ProcessPlace& place);

// The helper: serves the socket `path` until `stop` is set (checked every 200 ms). Each
// connection gets one line "<pid> <start_time> <host_ns>\n" for the peer, then is closed.
// `mode` is the socket file's mode (who may ask); `ready` runs once it accepts connections.
// Returns false + `error` on setup failure.
bool serve_pid_helper(const std::string& path, unsigned mode, const volatile int& stop,
                      const std::function<void()>& ready, std::string& error);

}  // namespace fakecuda
