// HostStaging: the pinned host copies of swapped allocations (core/swap_engine.h), made at
// the host link's speed (docs/design.md "Overcommit and swap").
//
// Pinning host memory — faulting pages in, zeroing them, registering them with the driver —
// is slower per core than the link copies, so one allocation's copy is a pipeline: its host
// copy is one anonymous mapping (transparent huge pages advised) divided into chunks
// (chunk_bytes), a small pool of worker threads populates (MADV_POPULATE_WRITE, else one
// write per page) and registers (cuMemHostRegister of the sub-range) the chunks in order,
// on several cores at once, while the swap thread copies each chunk that is ready with
// cuMemcpyDtoHAsync on a non-blocking stream of its own and synchronises once at the end.
// Where the driver cannot register host memory, each chunk is cuMemHostAlloc'd by the swap
// thread instead (no workers). A failure anywhere (mmap, populate, register, copy) waits for
// the copies in flight, unregisters and unmaps what was made, and returns the error: the
// allocation is untouched and stays resident.
//
// The swap reserve (core/host_reserve.h): slabs pinned ahead by grow_reserve (on the
// workers, while nothing is copied) are what a copy_out takes first, piece by piece; only
// what the reserve does not cover is pinned as it goes. A host copy's pieces return to the
// reserve when it is retired or released.
//
// Reuse: the chunks of a host copy that came back (swap-in) are kept, still registered, for
// the next swap-out of this process (a chunk of the same size is taken instead of pinning a
// new one), up to the bytes of the last swap-out round and for at most kKeepIdleNs; then
// they are unregistered and unmapped by the swap thread. Cost: up to one swap-out round's
// bytes of pinned host memory, held up to kKeepIdleNs after a swap-in, which the broker's
// host budget does not see.
//
// Threads and capture safety: the workers start at the first swap-out (none in a process
// that never swaps), min(8, CPUs this process may run on) of them, detached, sleeping on a
// condition variable between swap-outs. They run in relaxed capture mode and call the
// driver only to push/pop the allocation's context (thread-local) and cuMemHostRegister /
// cuMemHostUnregister — "potentially unsafe" under a global-mode capture like every
// allocation of pinned memory; the swap-out already runs only while no capture is open and
// keeps captures from beginning meanwhile (CaptureTracker::run_unless_capturing).
//
// Cost: nothing on the application's calls; per swap-out, one stream creation and one
// registration and one copy per chunk; per swap-in, one stream creation and one queued copy per
// chunk, synchronised once.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/driver_calls.h"
#include "core/host_reserve.h"

namespace fracgpu {

class CaptureTracker;

// The host copy of one allocation: its chunks in device-address order.
struct HostBlock {
  std::vector<HostChunk> chunks;
  bool empty() const noexcept { return chunks.empty(); }
};

// Where a swap-out's time went (summed over the allocations of a round by add()).
struct CopyOutStats {
  uint64_t bytes = 0;
  uint64_t reused_bytes = 0;   // copied into kept chunks or the reserve: no pinning
  uint64_t reserve_bytes = 0;  // of which into the reserve
  int64_t total_ns = 0;
  int64_t pin_thread_ns = 0;  // populating and registering, summed over the threads
  int64_t pin_wall_ns = 0;    // from the start until the last chunk was pinned
  int64_t stall_ns = 0;       // the swap thread waiting for a chunk to be pinned
  int64_t drain_ns = 0;       // the swap thread waiting for the last copies (final sync)
  unsigned threads = 0;
  void add(const CopyOutStats& other) noexcept;
};

class HostStaging {
 public:
  // Kept chunks unused this long are unpinned (trim).
  static constexpr int64_t kKeepIdleNs = 30'000'000'000;
  static constexpr uint64_t kMaxChunk = 64ull << 20;

  // `captures` (may be null): the workers put themselves in relaxed capture mode with it.
  // `workers` 0: min(8, CPUs of this process's affinity mask).
  HostStaging(const DriverCalls& calls, const CaptureTracker* captures, unsigned workers = 0);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Copies [va, va + size) into a new host copy, named by *host (its first byte) from then
  // on. `context` is the memory's context, current on the calling thread (the workers push
  // it to register). One copy_out at a time (the swap engine's mutex). On failure *host is
  // null and nothing is left behind.
  CUresult copy_out(CUcontext context, CUdeviceptr va, uint64_t size, void** host,
                    CopyOutStats* stats) noexcept;
  // Copies host copy `host` back to [va, ...) (a synchronous copy per chunk).
  CUresult copy_in(void* host, CUdeviceptr va) noexcept;
  // Host copy `host` is no longer needed: its chunks are kept for reuse or freed.
  void retire(void* host, int64_t now_ns) noexcept;
  // Unregisters and frees every chunk of `host` now (a swapped allocation is freed).
  void release(void* host) noexcept;
  // The chunks of host copy `host` (tests); null when there is none.
  const HostBlock* block(void* host) const noexcept;
  // A swap-out round moved `bytes`: what may be kept for the next one.
  void set_keep_limit(uint64_t bytes) noexcept;
  // Frees kept chunks retired more than kKeepIdleNs before `now_ns` (all: idle_ns 0).
  void trim(int64_t now_ns, int64_t idle_ns = kKeepIdleNs) noexcept;
  uint64_t kept_bytes() const noexcept;

  // --- The swap reserve ---
  // Pins about `bytes` more (whole slabs) on the workers, `context` current for them;
  // returns the bytes added (less where host memory ran out).
  uint64_t grow_reserve(CUcontext context, uint64_t bytes) noexcept;
  // Unpins whole free slabs while more than `keep_free` bytes of the reserve are free;
  // returns the bytes unpinned.
  uint64_t shrink_reserve(uint64_t keep_free) noexcept;
  uint64_t reserve_free_bytes() const noexcept;
  uint64_t reserve_capacity() const noexcept;
  // The bytes of host copy `host` held in reserve pieces (free again once it is retired).
  uint64_t reserve_bytes_of(void* host) const noexcept;
  unsigned workers() const noexcept { return wanted_workers_; }
  // The child has no workers and no registrations of its parent.
  void after_fork_in_child() noexcept;

  // The chunk size for an allocation of `size`: at most kMaxChunk, small enough that every
  // worker gets a chunk of a smaller allocation, a multiple of 2 MiB (at least 4 MiB).
  static uint64_t chunk_bytes(uint64_t size, unsigned workers) noexcept;

  struct Job;  // one copy_out's pipeline (host_staging.cpp)

 private:
  bool can_register() const noexcept;
  CUresult copy_out_registered(CUcontext context, CUdeviceptr va, uint64_t size, HostBlock* out,
                               CopyOutStats* stats, bool* pin_failed) noexcept;
  bool take_block(void* host, HostBlock* out) noexcept;
  void retire_block(HostBlock& block, int64_t now_ns) noexcept;
  CUresult copy_out_host_alloc(CUdeviceptr va, uint64_t size, HostBlock* out,
                               CopyOutStats* stats) noexcept;
  CUresult plan_chunks(uint64_t size, std::vector<HostChunk>* chunks,
                       std::vector<bool>* reused) noexcept;
  bool take_kept(uint64_t capacity, HostChunk* chunk) noexcept;
  CUresult pin_all(Job& job) noexcept;
  void post_job(Job& job) noexcept;
  void end_job() noexcept;
  void unpin_slab(void* base) noexcept;
  CUresult run_copies(Job& job, CUdeviceptr va, CopyOutStats* stats, bool* pin_failed) noexcept;
  void free_chunk(const HostChunk& chunk) noexcept;
  void start_workers() noexcept;
  static void* worker_main(void* staging) noexcept;
  void serve_jobs() noexcept;

  const DriverCalls& calls_;
  const CaptureTracker* captures_;
  const unsigned wanted_workers_;

  // The pool: workers wait for a job, count themselves in (busy_) while they work on it.
  std::mutex pool_mutex_;
  // Futex words bumped after each change a waiter may wait for (std::condition_variable
  // would link libstdc++'s thread-exit machinery, newer than the shim's glibc floor).
  std::atomic<uint32_t> pool_wake_{0};  // a job posted, or stopping
  std::atomic<uint32_t> pool_idle_{0};  // a worker left a job, or stopped
  Job* job_ = nullptr;
  uint64_t job_serial_ = 0;
  unsigned busy_ = 0;   // workers inside the posted job
  unsigned alive_ = 0;  // workers started and not stopped
  bool workers_started_ = false;
  bool stopping_ = false;  // the destructor's

  // The host copies by their first byte; kept chunks by capacity, with the time they were
  // retired.
  mutable std::mutex keep_mutex_;
  std::map<void*, HostBlock> blocks_;
  std::multimap<uint64_t, std::pair<HostChunk, int64_t>> kept_;
  uint64_t kept_bytes_ = 0;
  uint64_t keep_limit_ = 0;
  HostReserve reserve_;  // under keep_mutex_
};

}  // namespace fracgpu
