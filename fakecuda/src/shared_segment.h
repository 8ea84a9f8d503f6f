// Layout of the machine-wide simulated device, kept in one POSIX shared-memory
// segment that every process using the fake driver (and fakecuda-ctl) maps. It holds
// what a real GPU tracks globally: per-device memory counters, per-process usage (so a
// dead process's memory can be reclaimed like the real driver does at exit) and the
// device engine that lets only one context execute at a time. Every field is either
// an address-free lock-free atomic or protected by the robust process-shared mutex of
// its engine, because processes may be SIGKILLed at any instruction.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "config.h"
#include "host_pid.h"
#include "mps_state.h"

namespace fakecuda {

inline constexpr uint64_t kSegmentMagic = 0x4655'4b45'4355'4441ull;  // "FUKECUDA"
inline constexpr uint32_t kSegmentLayoutVersion = 6;  // 5: MPS server records; 6: host pids
inline constexpr uint32_t kMaxProcesses = 256;
inline constexpr uint32_t kMaxEngineWaiters = 64;

struct alignas(64) DeviceRecord {
  uint64_t capacity_bytes;
  std::atomic<uint64_t> used_bytes;
  std::atomic<uint64_t> peak_used_bytes;
  std::atomic<uint64_t> kernels_executed;
  std::atomic<uint64_t> busy_ns;
};

// Lifecycle of a process slot. Exited slots keep their busy/kernel history (handy for
// tests and `fakecuda-ctl status`) until the slot is recycled.
enum class ProcessState : uint32_t { Free = 0, Claiming = 1, Live = 2, Reclaiming = 3, Exited = 4 };

struct alignas(64) ProcessRecord {
  std::atomic<uint32_t> state;
  int32_t pid;
  uint64_t start_time;  // field 22 of /proc/<pid>/stat: defeats pid reuse
  ProcessPlace place;   // its namespace and host pid (host_pid.h): what NVML reports
  std::atomic<uint64_t> used_bytes[kMaxDevices];
  std::atomic<uint64_t> busy_ns[kMaxDevices];
  std::atomic<uint64_t> kernels[kMaxDevices];
};

// Who holds or waits for an engine: one executor thread of one process.
struct EngineParty {
  int32_t pid;
  uint64_t start_time;
  uint64_t executor_id;
  ProcessPlace place;  // so that a party in another PID namespace is judged correctly
};

struct EngineWaiter {
  uint64_t ticket;  // 0 = empty entry; FIFO order among waiters
  EngineParty party;
};

struct alignas(64) EngineRecord {
  pthread_mutex_t guard;                // robust + process-shared; held only briefly
  std::atomic<uint32_t> wake_sequence;  // futex word, bumped whenever the engine frees up
  std::atomic<uint32_t> waiter_count;   // read without the guard to decide whether to yield
  EngineParty owner;                    // owner.pid == 0: engine free
  uint64_t next_ticket;
  std::atomic<uint64_t> handoffs;
  // Self-check of the engine's exclusivity: work chunks currently executing, and how
  // often a chunk started while another was running (must stay 0).
  std::atomic<uint32_t> running_chunks;
  std::atomic<uint64_t> overlap_violations;
  EngineWaiter waiters[kMaxEngineWaiters];
};

struct SegmentLayout {
  uint64_t magic;
  uint32_t layout_version;
  std::atomic<uint32_t> ready;  // set last by the creator (release)
  uint32_t device_count;
  uint32_t reserved;
  uint64_t timeslice_us;
  uint64_t context_footprint_bytes;
  uint64_t host_pid_ns;  // the creator's PID namespace: whose pids the device records
  DeviceRecord devices[kMaxDevices];
  EngineRecord engines[kMaxDevices];
  ProcessRecord processes[kMaxProcesses];
  MpsServerRecord mps_servers[kMaxMpsServers];  // simulated MPS (mps_state.h)
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

// A mapping of the segment. Opening creates it (race-free: O_EXCL decides the creator,
// others wait for `ready`) unless create_if_missing is false.
class SharedSegment {
 public:
  SharedSegment() = default;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  // Returns false and fills `error` when the segment cannot be opened or is foreign.
  bool open(const std::string& name, bool create_if_missing, const char* log_prefix,
            std::string& error);
  void close();

  SegmentLayout* layout() const { return layout_; }
  const std::string& name() const { return name_; }
  bool created_by_us() const { return created_; }

  // Removes the segment name; mappings that exist stay valid until unmapped.
  static bool destroy(const std::string& name);

 private:
  bool create(int fd, const char* log_prefix);
  bool attach_existing(int fd, std::string& error);

  SegmentLayout* layout_ = nullptr;
  std::string name_;
  bool created_ = false;
};

}  // namespace fakecuda
