// Operations on the simulated MPS server records (see mps_state.h). The kernel table is
// a small discrete-event simulation that whichever process touches it advances: between
// two events (a kernel added, finished or removed, the engine taken or given back) every
// kernel runs at a constant rate, so advancing steps from one finish to the next and
// re-allocates the freed SMs at the instant they were freed, however late the process
// that owns the finished kernel wakes up.
#include "mps_state.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "precise_clock.h"
#include "process_table.h"
#include "shared_segment.h"

namespace fakecuda {
namespace {

constexpr double kFinishToleranceNs = 100;  // a kernel this close to done is done
constexpr double kEpsilon = 1e-9;

bool progressing(const MpsDeviceRecord& dev, const MpsKernelRecord& k) {
  return dev.holding != 0 && k.in_use != 0 && k.finished == 0 && k.allocation > kEpsilon;
}

// Charges `sm_ns` of SM time (allocation x wall time) to the kernel's process and device.
void charge(SegmentLayout* layout, const MpsServerRecord& server, uint32_t device,
            const MpsKernelRecord& k, double sm_ns) {
  if (sm_ns <= 0) return;
  const auto ns = static_cast<uint64_t>(sm_ns);
  const int32_t slot = server.clients[k.client].process_slot;
  if (slot >= 0 && static_cast<uint32_t>(slot) < kMaxProcesses)
    layout->processes[slot].busy_ns[device].fetch_add(ns, std::memory_order_relaxed);
  layout->devices[device].busy_ns.fetch_add(ns, std::memory_order_relaxed);
}

std::string canonical_dir(const std::string& dir) {
  char resolved[PATH_MAX];
  return ::realpath(dir.c_str(), resolved) != nullptr ? std::string(resolved) : dir;
}

std::optional<pid_t> read_pid_file(const std::string& dir) {
  std::ifstream file(dir + "/" + kMpsPidFileName);
  long pid = 0;
  if (!(file >> pid) || pid <= 0 || pid > INT32_MAX) return std::nullopt;
  return static_cast<pid_t>(pid);
}

void reset_device(MpsDeviceRecord& dev) {
  dev.sequence.fetch_add(1);
  dev.active.store(0);
  dev.holding = 0;
  dev.fault = 0;
  dev.last_update_ns = 0;
  dev.next_arrival = 1;
  dev.faults = 0;
  for (MpsKernelRecord& k : dev.kernels) k = MpsKernelRecord{};
}

void reset_client(MpsClientRecord& c) {
  c.in_use = 0;
  c.pid = 0;
  c.start_time = 0;
  c.uid = 0;
  c.priority = 0;
  c.fault_devices.store(0);
  c.process_slot = -1;
}

}  // namespace

MpsLock::MpsLock(SegmentLayout* layout, MpsServerRecord& server) : server_(server) {
  if (pthread_mutex_lock(&server_.guard) != EOWNERDEAD) return;
  pthread_mutex_consistent(&server_.guard);
  mps_purge_dead(layout, server_);  // the dead holder's half-done change
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    mps_allocate(server_, d);
    mps_notify(server_, d);
  }
}

MpsLock::~MpsLock() {
  pthread_mutex_unlock(&server_.guard);
}

int mps_register_server(SegmentLayout* layout, const std::string& pipe_dir, pid_t pid,
                        uint64_t start_time) {
  const std::string dir = canonical_dir(pipe_dir);
  for (uint32_t i = 0; i < kMaxMpsServers; ++i) {
    MpsServerRecord& server = layout->mps_servers[i];
    uint32_t state = server.state.load();
    const bool reusable = state == static_cast<uint32_t>(MpsServerState::Free) ||
                          (state != static_cast<uint32_t>(MpsServerState::Starting) &&
                           !process_alive(server.daemon_pid, server.daemon_start_time));
    if (!reusable || !server.state.compare_exchange_strong(
                         state, static_cast<uint32_t>(MpsServerState::Starting)))
      continue;
    {
      MpsLock lock(layout, server);
      server.daemon_pid = static_cast<int32_t>(pid);
      server.daemon_start_time = start_time;
      server.uid = 0;
      server.uid_set = 0;
      std::snprintf(server.pipe_dir, sizeof server.pipe_dir, "%s", dir.c_str());
      for (MpsClientRecord& c : server.clients) reset_client(c);
      for (MpsDeviceRecord& dev : server.devices) reset_device(dev);
    }
    server.state.store(static_cast<uint32_t>(MpsServerState::Running), std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void mps_stop_accepting(MpsServerRecord& server) {
  uint32_t running = static_cast<uint32_t>(MpsServerState::Running);
  server.state.compare_exchange_strong(running, static_cast<uint32_t>(MpsServerState::Stopping));
}

void mps_unregister_server(SegmentLayout* layout, MpsServerRecord& server) {
  {
    MpsLock lock(layout, server);
    for (uint32_t d = 0; d < kMaxDevices; ++d) mps_notify(server, d);
    server.daemon_pid = 0;
  }
  server.state.store(static_cast<uint32_t>(MpsServerState::Free), std::memory_order_release);
}

uint32_t mps_live_clients(SegmentLayout* layout, MpsServerRecord& server) {
  mps_purge_dead(layout, server);
  uint32_t n = 0;
  for (const MpsClientRecord& c : server.clients) n += c.in_use != 0 ? 1 : 0;
  return n;
}

void mps_set_holding(SegmentLayout* layout, MpsServerRecord& server, uint32_t device, bool holding,
                     int64_t now_ns) {
  mps_advance(layout, server, device, now_ns);  // progress up to now at the old state
  server.devices[device].holding = holding ? 1 : 0;
}

MpsServerRecord* mps_find_server(SegmentLayout* layout, const std::string& pipe_dir) {
  const std::optional<pid_t> pid = read_pid_file(pipe_dir);
  if (!pid) return nullptr;
  const std::string dir = canonical_dir(pipe_dir);
  for (MpsServerRecord& server : layout->mps_servers) {
    const uint32_t state = server.state.load(std::memory_order_acquire);
    if (state != static_cast<uint32_t>(MpsServerState::Running) &&
        state != static_cast<uint32_t>(MpsServerState::Stopping))
      continue;
    if (server.daemon_pid != *pid || dir != server.pipe_dir) continue;
    if (!process_alive(server.daemon_pid, server.daemon_start_time)) continue;
    return &server;
  }
  return nullptr;
}

MpsAdmission mps_admit_client(SegmentLayout* layout, MpsServerRecord& server, pid_t pid,
                              uint64_t start_time, uid_t uid, uint32_t priority,
                              int32_t process_slot, uint32_t* index) {
  if (server.state.load() != static_cast<uint32_t>(MpsServerState::Running))
    return MpsAdmission::kStopping;
  if (mps_live_clients(layout, server) == 0) server.uid_set = 0;
  if (server.uid_set != 0 && server.uid != static_cast<uint32_t>(uid))
    return MpsAdmission::kOtherUid;
  for (uint32_t i = 0; i < kMaxMpsClients; ++i) {
    MpsClientRecord& c = server.clients[i];
    if (c.in_use != 0) continue;
    reset_client(c);
    c.pid = static_cast<int32_t>(pid);
    c.start_time = start_time;
    c.uid = static_cast<uint32_t>(uid);
    c.priority = priority;
    c.process_slot = process_slot;
    c.in_use = 1;
    server.uid = static_cast<uint32_t>(uid);
    server.uid_set = 1;
    *index = i;
    return MpsAdmission::kAdmitted;
  }
  return MpsAdmission::kFull;
}

void mps_remove_client(SegmentLayout* layout, MpsServerRecord& server, uint32_t client) {
  const int64_t now = monotonic_ns();
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    MpsDeviceRecord& dev = server.devices[d];
    bool removed = false;
    for (int k = 0; k < static_cast<int>(kMaxMpsKernels); ++k) {
      if (dev.kernels[k].in_use == 0 || dev.kernels[k].client != client) continue;
      if (!removed) mps_advance(layout, server, d, now);
      mps_remove_kernel(server, d, k);
      removed = true;
    }
    if (removed) mps_notify(server, d);
  }
  reset_client(server.clients[client]);
  bool any = false;
  for (const MpsClientRecord& c : server.clients) any = any || c.in_use != 0;
  if (!any) server.uid_set = 0;
}

bool mps_advance(SegmentLayout* layout, MpsServerRecord& server, uint32_t device, int64_t now_ns) {
  MpsDeviceRecord& dev = server.devices[device];
  bool changed = false;
  double t = static_cast<double>(dev.last_update_ns);
  const double now = static_cast<double>(now_ns);
  while (dev.holding != 0 && t < now) {
    double step_end = now;
    bool any = false;
    for (const MpsKernelRecord& k : dev.kernels) {
      if (!progressing(dev, k)) continue;
      any = true;
      step_end = std::min(step_end, t + k.remaining_ns * k.demand / k.allocation);
    }
    if (!any) break;
    const double dt = std::max(0.0, step_end - t);
    bool finished_now = false;
    for (MpsKernelRecord& k : dev.kernels) {
      if (!progressing(dev, k)) continue;
      k.remaining_ns -= dt * k.allocation / k.demand;
      charge(layout, server, device, k, dt * k.allocation);
      if (k.remaining_ns <= kFinishToleranceNs) {
        k.remaining_ns = 0;
        k.finished = 1;
        k.allocation = 0;
        finished_now = true;
      }
    }
    t = step_end;
    if (finished_now) {
      mps_allocate(server, device);  // the freed SMs go on at the instant they were freed
      changed = true;
    }
  }
  dev.last_update_ns = std::max(dev.last_update_ns, now_ns);
  return changed;
}

void mps_allocate(MpsServerRecord& server, uint32_t device) {
  MpsDeviceRecord& dev = server.devices[device];
  double used = 0;
  int order[kMaxMpsKernels];
  int n = 0;
  for (int i = 0; i < static_cast<int>(kMaxMpsKernels); ++i) {
    const MpsKernelRecord& k = dev.kernels[i];
    if (k.in_use == 0 || k.finished != 0) continue;
    used += k.allocation;
    if (k.allocation + kEpsilon < k.demand) order[n++] = i;
  }
  double free = std::max(0.0, 1.0 - used);
  std::sort(order, order + n, [&](int a, int b) {
    const MpsKernelRecord &x = dev.kernels[a], &y = dev.kernels[b];
    return x.priority != y.priority ? x.priority < y.priority : x.arrival < y.arrival;
  });
  for (int i = 0; i < n && free > kEpsilon; ++i) {
    MpsKernelRecord& k = dev.kernels[order[i]];
    const double add = std::min(k.demand - k.allocation, free);
    k.allocation += add;
    free -= add;
  }
}

int mps_add_kernel(SegmentLayout* layout, MpsServerRecord& server, uint32_t device, uint32_t client,
                   uint64_t executor_id, double demand, int64_t duration_ns, int64_t now_ns) {
  MpsDeviceRecord& dev = server.devices[device];
  mps_advance(layout, server, device, now_ns);
  for (int i = 0; i < static_cast<int>(kMaxMpsKernels); ++i) {
    MpsKernelRecord& k = dev.kernels[i];
    if (k.in_use != 0) continue;
    k = MpsKernelRecord{};
    k.client = client;
    k.executor_id = executor_id;
    k.arrival = dev.next_arrival++;
    k.priority = server.clients[client].priority;
    k.demand = std::clamp(demand, 1e-6, 1.0);
    k.remaining_ns = static_cast<double>(std::max<int64_t>(duration_ns, 0));
    k.finished = k.remaining_ns <= kFinishToleranceNs ? 1 : 0;
    k.in_use = 1;
    if (dev.active.fetch_add(1) == 0)  // the server thread sleeps on `active` while idle
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&dev.active), FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
    mps_allocate(server, device);
    return i;
  }
  return -1;
}

void mps_remove_kernel(MpsServerRecord& server, uint32_t device, int kernel) {
  MpsDeviceRecord& dev = server.devices[device];
  if (kernel < 0 || dev.kernels[kernel].in_use == 0) return;
  dev.kernels[kernel] = MpsKernelRecord{};
  dev.active.fetch_sub(1);
  mps_allocate(server, device);
}

int64_t mps_next_event_ns(const MpsServerRecord& server, uint32_t device, int64_t now_ns) {
  const MpsDeviceRecord& dev = server.devices[device];
  double next = static_cast<double>(INT64_MAX);
  for (const MpsKernelRecord& k : dev.kernels) {
    if (!progressing(dev, k)) continue;
    next = std::min(
        next, static_cast<double>(dev.last_update_ns) + k.remaining_ns * k.demand / k.allocation);
  }
  if (next >= static_cast<double>(INT64_MAX)) return INT64_MAX;
  return std::max(now_ns, static_cast<int64_t>(std::ceil(next)));
}

void mps_notify(MpsServerRecord& server, uint32_t device) {
  std::atomic<uint32_t>& word = server.devices[device].sequence;
  word.fetch_add(1);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void mps_wait(MpsServerRecord& server, uint32_t device, uint32_t seen, int64_t timeout_ns) {
  if (timeout_ns <= 0) return;
  timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000),
                   static_cast<long>(timeout_ns % 1'000'000'000)};
  std::atomic<uint32_t>& word = server.devices[device].sequence;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

void mps_wait_for_work(MpsServerRecord& server, uint32_t device, int64_t timeout_ns) {
  timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000),
                   static_cast<long>(timeout_ns % 1'000'000'000)};
  std::atomic<uint32_t>& word = server.devices[device].active;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, 0, &timeout, nullptr, 0);
}

void mps_record_fault(MpsServerRecord& server, uint32_t device) {
  MpsDeviceRecord& dev = server.devices[device];
  dev.fault = 1;
  ++dev.faults;
  for (MpsClientRecord& c : server.clients)
    if (c.in_use != 0) c.fault_devices.fetch_or(1u << device);
}

bool mps_device_refuses_contexts(SegmentLayout* layout, MpsServerRecord& server, uint32_t device) {
  MpsDeviceRecord& dev = server.devices[device];
  if (dev.fault == 0) return false;
  mps_purge_dead(layout, server);
  for (const MpsClientRecord& c : server.clients)
    if (c.in_use != 0 && (c.fault_devices.load() & (1u << device)) != 0) return true;
  dev.fault = 0;  // every client the fault hit has exited: the server recovered
  return false;
}

void mps_purge_dead(SegmentLayout* layout, MpsServerRecord& server) {
  for (uint32_t i = 0; i < kMaxMpsClients; ++i) {
    const MpsClientRecord& c = server.clients[i];
    if (c.in_use != 0 && !process_alive(c.pid, c.start_time)) mps_remove_client(layout, server, i);
  }
}

const MpsServerRecord* mps_server_of(const SegmentLayout* layout, pid_t pid, uint64_t start_time,
                                     uint32_t* client) {
  for (const MpsServerRecord& server : layout->mps_servers) {
    const uint32_t state = server.state.load(std::memory_order_acquire);
    if (state != static_cast<uint32_t>(MpsServerState::Running) &&
        state != static_cast<uint32_t>(MpsServerState::Stopping))
      continue;
    if (!process_alive(server.daemon_pid, server.daemon_start_time)) continue;
    for (uint32_t i = 0; i < kMaxMpsClients; ++i) {
      const MpsClientRecord& c = server.clients[i];
      if (c.in_use != 0 && c.pid == static_cast<int32_t>(pid) && c.start_time == start_time) {
        *client = i;
        return &server;
      }
    }
  }
  return nullptr;
}

}  // namespace fakecuda
