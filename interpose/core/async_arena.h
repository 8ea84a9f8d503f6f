// AsyncArena: stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync of the
// device's default or current pool, cuMemFreeAsync) of a tenant that may swap, served from
// memory the broker can move to host: the driver's pools keep physical memory the shim
// cannot move, so a borrower using them (PyTorch's `backend:cudaMallocAsync`) would keep
// what a guaranteed tenant is owed.
//
// Chunks come from SwapEngine's swappable path (the ArenaPort): charged once to the ledger
// there, moved to host and back with every other swappable allocation, never counted by
// MemoryPools. Blocks are carved from chunks: sizes rounded up to 512 B; a request of more
// than 1 MiB gets a chunk of its own granule-rounded size (no other block shares its pages,
// so it leaves the GPU whole when freed and trimmed), smaller ones share 2 MiB chunks (the
// H200's VMM granule: one physical handle per chunk, like the driver's pool). Free blocks
// sit in a best-fit map and merge with free neighbours of their chunk.
//
// Stream order (CUDA's rule for pools: memory may be reused once no compliant access can
// overlap): a block freed by cuMemFreeAsync(p, s) is reused at once by an allocation on the
// same stream s (stream order makes that safe; only blocks of at most twice the request, so
// a small request does not pin a big block to one stream), by any other stream only after an
// event recorded on s at the free has completed. The per-thread default stream is a
// different stream in each thread (its key is the thread's, never reused); the legacy
// stream is one stream (its implicit synchronisation with blocking streams is not relied
// upon: other streams wait for the event like any). Events come from a small pool of the
// arena's own (CU_EVENT_DISABLE_TIMING, per context), are queried on the allocation path
// only when no block fits (at most kPollBudget per call, round robin) and all of them at a
// trim. A synchronous cuMemFree of an arena block synchronises the context first (what
// cuMemFree of stream-ordered memory does) and the block is free for every stream.
// A cuMemFreeAsync of an arena block on a capturing stream cannot become a graph free node
// (the driver does not know the pointer): the block is held — never reused, still charged —
// and one warning says so (PyTorch defers such frees until capture ends).
//
// cuMemPoolTrimTo(default or current pool, keep): chunks whose blocks are all free and
// whose events completed go back to SwapEngine (freed, uncharged) until at most `keep`
// idle bytes remain. Pointer attributes of arena memory are the VMM chunk's:
// CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE is not the default pool, RANGE_START/RANGE_SIZE
// describe the chunk, not the block.
//
// Thread safety: one mutex over the books, held for map operations only. The driver calls
// made under it are cuEventRecord (at a free, so that the block never becomes visible to
// other streams before its event exists) and cuEventQuery (polling): both are the real
// driver's functions (no re-entry into the shim), neither blocks, and a query runs in
// relaxed capture mode (ArenaPort::events_done) so that it cannot invalidate another
// thread's global-mode capture. Chunks are allocated and freed, events created and
// destroyed, outside it.
// Fork: the child forgets everything (SwapEngine forgets the chunks' backing likewise).
// Process exit: never destroyed, like SwapEngine.
// Cost: an allocation or free that finds its block pays the mutex and two or three
// ordered-map operations (~0.2-0.5 µs); a free also one cuEventRecord. A miss pays up to
// kPollBudget event queries, then a chunk (SwapEngine's four VMM calls and a ledger CAS).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/device_resolver.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

// What the arena needs from the shim and the driver (a fake in unit tests).
class ArenaPort {
 public:
  virtual ~ArenaPort() = default;
  // The VMM granule of `device` for swappable chunks; 0: no swappable memory there.
  virtual uint64_t granularity(const TenantDevice& device) = 0;
  // A swappable chunk of `bytes` (a granule multiple), charged; nullopt: this memory cannot
  // be backed (the caller goes to the driver's pool).
  virtual std::optional<CUresult> allocate_chunk(const TenantDevice& device, uint64_t bytes,
                                                 CUdeviceptr* base) = 0;
  virtual void free_chunk(CUdeviceptr base) = 0;  // freed and uncharged
  virtual CUcontext current_context() = 0;
  virtual CUevent create_event() = 0;  // in the current context; null on failure
  virtual CUresult record_event(CUevent event, CUstream stream) = 0;
  // done[i] = events[i] completed (a failed query is "not yet"); relaxed capture mode.
  virtual void events_done(const CUevent* events, bool* done, std::size_t n) = 0;
  virtual void destroy_event(CUevent event) = 0;
  virtual void synchronize_context() = 0;  // what cuMemFree implies
};

// A stream as the arena tells streams apart: the handle, or for the per-thread default
// stream a key of the calling thread's own.
using StreamKey = uint64_t;
StreamKey stream_key(CUstream stream, bool per_thread) noexcept;

class AsyncArena {
 public:
  static constexpr uint64_t kAlign = 512;              // the driver's pools round to 512 B too
  static constexpr uint64_t kSmallChunk = 2ull << 20;  // shared by requests up to kSmallLimit
  static constexpr uint64_t kSmallLimit = 1ull << 20;
  static constexpr std::size_t kPollBudget = 8;    // event queries per allocation, at most
  static constexpr std::size_t kSpareEvents = 64;  // kept for reuse; more are destroyed

  explicit AsyncArena(ArenaPort& port) : port_(port) {}
  AsyncArena(const AsyncArena&) = delete;
  AsyncArena& operator=(const AsyncArena&) = delete;

  // nullopt: not served here (size 0 — the driver answers CUDA_ERROR_INVALID_VALUE — or no
  // swappable memory on the device): the caller goes to the driver.
  std::optional<CUresult> allocate(const TenantDevice& device, CUdeviceptr* dptr, size_t size,
                                   StreamKey key, CUstream stream);
  // nullopt: `ptr` is not an arena block (the driver's).
  std::optional<CUresult> free_async(CUdeviceptr ptr, StreamKey key, CUstream stream);
  std::optional<CUresult> free_sync(CUdeviceptr ptr);
  std::optional<CUresult> free_captured(CUdeviceptr ptr);
  // Idle chunks of tenant device `index` go back until at most `keep` idle bytes remain;
  // returns the bytes returned.
  uint64_t trim(int index, uint64_t keep);
  bool owns(CUdeviceptr ptr);
  void after_fork_in_child() noexcept;

  // Books (tests and status).
  uint64_t chunk_bytes(int index);
  uint64_t live_bytes(int index);
  std::size_t chunks();
  std::size_t pending_blocks();

 private:
  enum class State : uint8_t { kLive, kPending, kReady, kHeld };
  struct Block {
    uint64_t size = 0;
    CUdeviceptr chunk = 0;
    int device = 0;
    State state = State::kLive;
    StreamKey stream = 0;     // kPending: the stream of its free
    CUevent event = nullptr;  // kPending: recorded there at the free (null: never completes)
    CUcontext context = nullptr;
    uint64_t fence = 0;  // kPending: which free (stale entries of fences_ differ)
  };
  struct Chunk {
    int device = 0;
    uint64_t size = 0;
  };
  struct Spare {
    CUcontext context;
    CUevent event;
  };
  using ReadyKey = std::tuple<int, uint64_t, CUdeviceptr>;               // device, size, address
  using PendingKey = std::tuple<int, StreamKey, uint64_t, CUdeviceptr>;  // + the free's stream

  uint64_t granule(const TenantDevice& device);
  bool take_pending(int device, StreamKey key, uint64_t bytes, CUdeviceptr* out);  // under mutex_
  bool take_ready(int device, uint64_t bytes, CUdeviceptr* out);                   // under mutex_
  void make_ready(std::map<CUdeviceptr, Block>::iterator it);                      // under mutex_
  void retire_event(const Block& b);                                               // under mutex_
  void poll(std::size_t budget);                                                   // under mutex_
  void compact_fences();                                                           // under mutex_
  CUresult grow(const TenantDevice& device, uint64_t bytes, CUdeviceptr* out);
  CUevent take_spare(CUcontext context);        // under mutex_
  void drop_spares(std::vector<CUevent>* out);  // under mutex_: what exceeds kSpareEvents

  ArenaPort& port_;
  std::atomic<uint64_t> granule_[kMaxDevices] = {};  // 0 not asked yet; ~0 none
  std::mutex mutex_;
  std::map<CUdeviceptr, Block> blocks_;
  std::map<CUdeviceptr, Chunk> chunks_;
  std::set<ReadyKey> ready_;
  std::set<PendingKey> pending_;
  std::deque<std::pair<CUdeviceptr, uint64_t>> fences_;  // pending frees, oldest first
  uint64_t next_fence_ = 1;
  std::vector<Spare> spares_;
  uint64_t chunk_bytes_[kMaxDevices] = {};
  uint64_t live_bytes_[kMaxDevices] = {};
};

}  // namespace fracgpu
