// The simulated MPS server's state in the shared device segment (shared_segment.h): one
// record per running fake control daemon (fakecuda-mps-control), holding its clients and,
// per device, the kernels its clients are running or have queued. The model, measured
// against the real thing on an H200 (driver 580, docs/design.md "MPS mode"):
//  * The server is ONE party of the device engine (device_engine.h): its clients' work
//    progresses only while the daemon's server thread holds the engine, so MPS clients
//    together time-slice against non-MPS contexts, as the real server's context does.
//  * Inside the server, kernels share the device spatially. A kernel demands a fraction
//    of the SMs (its grid's blocks / the SM count, at most 1) and progresses at
//    allocation / demand of its solo speed. Free SMs go to kernels in order of client
//    priority (CUDA_MPS_CLIENT_PRIORITY: 0 before 1), then arrival; a running kernel is
//    never preempted (its blocks run to completion). So a priority-0 kernel overtakes
//    queued priority-1 kernels but waits for the running one, which is what the H200
//    showed: a latency request next to a full-device batch kernel waits for that kernel
//    with and without CUDA_MPS_CLIENT_PRIORITY (p99 1.71 vs 1.74 ms at 1.65 ms kernels).
//  * Busy time is SM time: allocation x wall time, so concurrent clients' busy times add
//    up to at most the wall time, and a lone full-device kernel is charged its duration.
//  * Clients: the first client fixes the server's uid; a client of another uid waits in
//    cuInit while the server has clients (the real control daemon queues it until that
//    server exits). A fatal fault (CUDA_ERROR_ILLEGAL_ADDRESS) of one client reaches every
//    client of the server on that device, and the device refuses new contexts
//    (CUDA_ERROR_MPS_SERVER_NOT_READY) until all of those clients have exited.
// Everything here is guarded by the record's robust process-shared mutex (MpsLock); the
// futex word `sequence` of each device is bumped after every change of allocations.
// Cost: a lock, a scan of at most kMaxMpsKernels entries and a futex wake per kernel
// start and end of an MPS client; nothing for processes that are not MPS clients.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "config.h"

namespace fakecuda {

struct SegmentLayout;

inline constexpr uint32_t kMaxMpsServers = 4;
inline constexpr uint32_t kMaxMpsClients = 64;
inline constexpr uint32_t kMaxMpsKernels = 64;  // per device: one per client executor
inline constexpr size_t kMpsPipeDirMax = 256;
// The control daemon's pid file in the pipe directory, named as the real daemon names it.
inline constexpr const char* kMpsPidFileName = "nvidia-cuda-mps-control.pid";

enum class MpsServerState : uint32_t { Free = 0, Starting = 1, Running = 2, Stopping = 3 };

struct MpsClientRecord {
  uint32_t in_use;
  int32_t pid;
  uint64_t start_time;
  uint32_t uid;
  uint32_t priority;                    // 0 normal, 1 below normal
  std::atomic<uint32_t> fault_devices;  // bit d: it was a client when a fatal fault hit device d
  int32_t process_slot;                 // its SegmentLayout::processes index (busy accounting)
};

struct MpsKernelRecord {
  uint32_t in_use;
  uint32_t client;  // index into MpsServerRecord::clients
  uint64_t executor_id;
  uint64_t arrival;  // FIFO order among kernels of one priority
  uint32_t priority;
  uint32_t finished;    // its work is done (its SMs are free again)
  double demand;        // fraction of the device's SMs it can use
  double remaining_ns;  // solo (full-speed) time still to run
  double allocation;    // fraction of the SMs it holds now
};

struct MpsDeviceRecord {
  std::atomic<uint32_t> sequence;  // futex word: bumped after every change below
  std::atomic<uint32_t> active;    // kernels in the table (the server thread waits on it)
  uint32_t holding;                // the server thread holds this device's engine
  uint32_t fault;                  // a fatal fault is pending (see the banner)
  int64_t last_update_ns;
  uint64_t next_arrival;
  uint64_t faults;  // fatal faults seen (status)
  MpsKernelRecord kernels[kMaxMpsKernels];
};

struct alignas(64) MpsServerRecord {
  pthread_mutex_t guard;  // robust + process-shared
  std::atomic<uint32_t> state;
  int32_t daemon_pid;
  uint64_t daemon_start_time;
  uint32_t uid;      // what its clients run as (valid while uid_set)
  uint32_t uid_set;  // 0 until the first client, and again once it has none
  char pipe_dir[kMpsPipeDirMax];
  MpsClientRecord clients[kMaxMpsClients];
  MpsDeviceRecord devices[kMaxDevices];
};

// Holds a server record's guard. A holder that died mid-update leaves stale entries:
// the next locker purges dead clients and recomputes every device's allocations.
class MpsLock {
 public:
  MpsLock(SegmentLayout* layout, MpsServerRecord& server);
  ~MpsLock();
  MpsLock(const MpsLock&) = delete;
  MpsLock& operator=(const MpsLock&) = delete;

 private:
  MpsServerRecord& server_;
};

// --- the daemon's side -------------------------------------------------------------

// Claims a record for a daemon serving `pipe_dir` (records of dead daemons are reused).
// Returns the record's index, or -1 when every record is in use.
int mps_register_server(SegmentLayout* layout, const std::string& pipe_dir, pid_t pid,
                        uint64_t start_time);
// Stops accepting clients (quit): new ones are refused, present ones keep running.
void mps_stop_accepting(MpsServerRecord& server);
void mps_unregister_server(SegmentLayout* layout, MpsServerRecord& server);
// Live clients (dead ones are purged first). Caller holds the lock.
uint32_t mps_live_clients(SegmentLayout* layout, MpsServerRecord& server);
// The server thread took or gave back the device's engine. Caller holds the lock.
void mps_set_holding(SegmentLayout* layout, MpsServerRecord& server, uint32_t device, bool holding,
                     int64_t now_ns);

// --- the clients' side -------------------------------------------------------------

// The record of the live daemon whose pid file is in `pipe_dir` (nullptr: none; then the
// process is not an MPS client).
MpsServerRecord* mps_find_server(SegmentLayout* layout, const std::string& pipe_dir);

enum class MpsAdmission { kAdmitted, kOtherUid, kStopping, kFull };
// Adds the calling process as a client (`*index` set) unless the server serves another
// uid that still has clients, is stopping, or is full. Caller holds the lock.
MpsAdmission mps_admit_client(SegmentLayout* layout, MpsServerRecord& server, pid_t pid,
                              uint64_t start_time, uid_t uid, uint32_t priority,
                              int32_t process_slot, uint32_t* index);
void mps_remove_client(SegmentLayout* layout, MpsServerRecord& server, uint32_t client);

// Kernel table of one device. Caller holds the lock for all of these.
// Brings every kernel's progress and busy time up to `now_ns`; frees the SMs of
// kernels that finished. Returns true when allocations changed.
bool mps_advance(SegmentLayout* layout, MpsServerRecord& server, uint32_t device, int64_t now_ns);
// Hands free SMs to kernels by (priority, arrival), never taking any from a running one.
void mps_allocate(MpsServerRecord& server, uint32_t device);
// Adds a kernel and returns its index (-1: table full).
int mps_add_kernel(SegmentLayout* layout, MpsServerRecord& server, uint32_t device, uint32_t client,
                   uint64_t executor_id, double demand, int64_t duration_ns, int64_t now_ns);
void mps_remove_kernel(MpsServerRecord& server, uint32_t device, int kernel);
// When the next kernel of the device finishes at the current allocations (INT64_MAX: none
// is progressing).
int64_t mps_next_event_ns(const MpsServerRecord& server, uint32_t device, int64_t now_ns);
// Bumps the device's sequence and wakes everyone waiting on it.
void mps_notify(MpsServerRecord& server, uint32_t device);
// A client's fatal fault on `device`: every present client is hit (fault_devices) and the
// device refuses new contexts until they are gone.
void mps_record_fault(MpsServerRecord& server, uint32_t device);
// Whether new contexts on `device` are refused (clearing a fault whose clients are gone).
bool mps_device_refuses_contexts(SegmentLayout* layout, MpsServerRecord& server, uint32_t device);
// Removes the clients (and their kernels) whose processes died.
void mps_purge_dead(SegmentLayout* layout, MpsServerRecord& server);

// The server record a live process is a client of, and the client's index (for status).
const MpsServerRecord* mps_server_of(const SegmentLayout* layout, pid_t pid, uint64_t start_time,
                                     uint32_t* client);

// Waits on a device's sequence word for at most `timeout_ns` while it still equals `seen`.
void mps_wait(MpsServerRecord& server, uint32_t device, uint32_t seen, int64_t timeout_ns);
// The server thread's idle wait: until the device has a kernel (mps_add_kernel wakes it
// when the table stops being empty) or `timeout_ns` passed.
void mps_wait_for_work(MpsServerRecord& server, uint32_t device, int64_t timeout_ns);

}  // namespace fakecuda
