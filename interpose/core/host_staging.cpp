// The swap-out pipeline of HostStaging (see host_staging.h): chunks planned over one mapping
// (or taken from the kept ones), pinned in order by the worker pool, copied as they become
// ready by the swap thread on a stream of its own; the unwinding of every failure; the pool.
// host_staging_copies.cpp holds what becomes of a host copy afterwards.
#include "core/host_staging.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <new>

#include "core/capture_tracker.h"
#include "core/shim_log.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/monotonic_clock.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux >= 5.14
#endif

namespace fracgpu {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kHugePage = 2ull << 20;
constexpr uint64_t kMinChunk = 4ull << 20;
constexpr unsigned kMaxWorkers = 8;

enum ChunkState : uint8_t { kPending, kReady, kFailed };

uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

unsigned cpus_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  const int count = CPU_COUNT(&set);
  return count > 0 ? static_cast<unsigned>(count) : 1;
}

// Set once MADV_POPULATE_WRITE proved unknown to the kernel (EINVAL before 5.14).
std::atomic<bool> g_no_populate{false};

// Faults the range in, writable and zeroed, so that registering it only pins. False when
// the kernel has no memory for it.
bool populate(void* base, uint64_t bytes) {
  if (!g_no_populate.load(std::memory_order_relaxed)) {
    if (madvise(base, bytes, MADV_POPULATE_WRITE) == 0) return true;
    if (errno != EINVAL) return false;
    g_no_populate.store(true, std::memory_order_relaxed);
  }
  volatile char* page = static_cast<volatile char*>(base);
  for (uint64_t offset = 0; offset < bytes; offset += kPage) page[offset] = 0;
  return true;
}

// Anonymous memory starting on a 2 MiB boundary (so every chunk of a multiple of 2 MiB
// is made of whole huge pages), huge pages advised: pinning a 2 MiB page costs about what
// a 4 KiB one does.
void* map_aligned(uint64_t bytes) {
  const uint64_t slop = bytes >= kHugePage ? kHugePage : 0;
  void* raw =
      mmap(nullptr, bytes + slop, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = slop != 0 ? round_up(start, kHugePage) : start;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + bytes + slop;
  if (end > aligned + bytes)
    munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

// Waits (under `lock`, released while asleep) until `done()`: whoever makes it true does so
// under the same lock and bumps `word` after, so the wait cannot miss it.
constexpr int64_t kWaitSliceNs = 60'000'000'000;  // a guard only: every change wakes
template <typename Done>
void wait_on(std::atomic<uint32_t>& word, std::unique_lock<std::mutex>& lock, Done done) {
  while (!done()) {
    const uint32_t seen = word.load(std::memory_order_acquire);
    lock.unlock();
    futex_wait_for(word, seen, kWaitSliceNs);
    lock.lock();
  }
}

void bump(std::atomic<uint32_t>& word) {
  word.fetch_add(1, std::memory_order_release);
  futex_wake_all(word);
}

void atomic_max(std::atomic<int64_t>& value, int64_t candidate) {
  int64_t seen = value.load(std::memory_order_relaxed);
  while (seen < candidate &&
         !value.compare_exchange_weak(seen, candidate, std::memory_order_relaxed)) {
  }
}

}  // namespace

// One copy_out: the chunks, their states, the claims. Lives on the swap thread's stack; the
// workers touch it only between joining it and leaving it (counted in busy_).
struct HostStaging::Job {
  const DriverCalls* calls = nullptr;
  CUcontext context = nullptr;
  std::vector<HostChunk> chunks;
  std::unique_ptr<std::atomic<uint8_t>[]> state;
  std::atomic<size_t> next{0};  // the next chunk to claim (in order: the first is pinned first)
  std::atomic<bool> abort{false};
  std::atomic<CUresult> error{CUDA_SUCCESS};
  std::atomic<int64_t> pin_ns{0};
  std::atomic<int64_t> last_ready_ns{0};
  std::atomic<unsigned> threads{0};
  std::mutex mutex;                // state changes, for `ready`
  std::atomic<uint32_t> ready{0};  // futex word: bumped after each state change

  // Populates and registers chunk `i` (claimed by the caller).
  void prepare(size_t i) noexcept {
    const int64_t begin = monotonic_ns();
    const HostChunk& chunk = chunks[i];
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (populate(chunk.base, chunk.capacity))
      rc = calls->cuMemHostRegister(chunk.base, chunk.capacity, CU_MEMHOSTREGISTER_PORTABLE);
    const int64_t end = monotonic_ns();
    pin_ns.fetch_add(end - begin, std::memory_order_relaxed);
    atomic_max(last_ready_ns, end);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (rc == CUDA_SUCCESS) {
        state[i].store(kReady, std::memory_order_release);
      } else {
        CUresult none = CUDA_SUCCESS;
        error.compare_exchange_strong(none, rc);
        state[i].store(kFailed, std::memory_order_release);
        abort.store(true, std::memory_order_release);
      }
    }
    bump(ready);
  }

  // Returns once chunk `i` is no longer pending (pinning it on this thread when no worker
  // has claimed it yet) or the job was aborted. True when this thread pinned it.
  bool await_chunk(size_t i) noexcept {
    bool pinned_here = false;
    for (;;) {
      if (state[i].load(std::memory_order_acquire) != kPending ||
          abort.load(std::memory_order_acquire))
        return pinned_here;
      size_t unclaimed = i;
      if (next.compare_exchange_strong(unclaimed, i + 1, std::memory_order_acq_rel)) {
        prepare(i);
        pinned_here = true;
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex);
      wait_on(ready, lock, [&] {
        return state[i].load(std::memory_order_acquire) != kPending ||
               abort.load(std::memory_order_acquire);
      });
    }
  }

  // A worker's share: claims chunks in order until none is left or the job fails.
  void work() noexcept {
    bool pinned = false;
    while (!abort.load(std::memory_order_acquire)) {
      const size_t i = next.fetch_add(1, std::memory_order_acq_rel);
      if (i >= chunks.size()) break;
      if (state[i].load(std::memory_order_acquire) != kPending) continue;  // kept: pinned
      prepare(i);
      pinned = true;
    }
    if (pinned) threads.fetch_add(1, std::memory_order_relaxed);
  }
};

void CopyOutStats::add(const CopyOutStats& other) noexcept {
  bytes += other.bytes;
  reused_bytes += other.reused_bytes;
  reserve_bytes += other.reserve_bytes;
  total_ns += other.total_ns;
  pin_thread_ns += other.pin_thread_ns;
  pin_wall_ns += other.pin_wall_ns;
  stall_ns += other.stall_ns;
  drain_ns += other.drain_ns;
  threads = std::max(threads, other.threads);
}

HostStaging::HostStaging(const DriverCalls& calls, const CaptureTracker* captures, unsigned workers)
    : calls_(calls),
      captures_(captures),
      wanted_workers_(workers != 0 ? workers : std::min(kMaxWorkers, cpus_available())) {}

HostStaging::~HostStaging() {
  // Only unit tests destroy one (the shim's lives until exit): the workers leave first.
  std::unique_lock<std::mutex> lock(pool_mutex_);
  stopping_ = true;
  bump(pool_wake_);
  wait_on(pool_idle_, lock, [&] { return alive_ == 0; });
  lock.unlock();
  std::vector<void*> slabs;
  {
    std::lock_guard<std::mutex> keep(keep_mutex_);
    slabs = reserve_.remove_all();
  }
  for (void* slab : slabs) unpin_slab(slab);
}

uint64_t HostStaging::chunk_bytes(uint64_t size, unsigned workers) noexcept {
  // At least two chunks per worker: the first copy starts after one chunk's pinning, and
  // every worker has a chunk to pin meanwhile.
  const uint64_t parts = 2ull * std::max(workers, 1u);
  const uint64_t share = round_up((size + parts - 1) / parts, kHugePage);
  return std::clamp<uint64_t>(share, kMinChunk, kMaxChunk);
}

bool HostStaging::can_register() const noexcept {
  return calls_.cuMemHostRegister != nullptr && calls_.cuMemHostUnregister != nullptr;
}

CUresult HostStaging::copy_out(CUcontext context, CUdeviceptr va, uint64_t size, void** host,
                               CopyOutStats* stats) noexcept {
  *host = nullptr;
  HostBlock out;
  CopyOutStats mine;
  const int64_t start = monotonic_ns();
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  bool pin_failed = true;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (can_register()) rc = copy_out_registered(context, va, size, &out, &mine, &pin_failed);
  // Where registration is refused (or missing), pinned allocations of the driver's own.
  if (rc != CUDA_SUCCESS && pin_failed && calls_.cuMemHostAlloc != nullptr &&
      calls_.cuMemFreeHost != nullptr) {
    if (can_register())
      FRACGPU_LOG_CAPPED(LogLevel::kInfo, 4,
                         "cannot register host memory for a swap-out (CUDA error %d); pinned "
                         "allocations of the driver instead (slower)",
                         static_cast<int>(rc));
    rc = copy_out_host_alloc(va, size, &out, &mine);
  }
  if (rc != CUDA_SUCCESS) return rc;
  mine.bytes = size;
  mine.total_ns = monotonic_ns() - start;
  if (stats != nullptr) stats->add(mine);
  *host = out.chunks.front().base;
  std::lock_guard<std::mutex> lock(keep_mutex_);
  blocks_[*host] = std::move(out);
  return CUDA_SUCCESS;
}

// The chunks of an allocation of `size`: pieces of the reserve for as much of it as the
// reserve has free, then kept ones where one of the size is there, the others carved in
// order out of one new mapping. `reused[i]` says which are already pinned.
CUresult HostStaging::plan_chunks(uint64_t size, std::vector<HostChunk>* chunks,
                                  std::vector<bool>* reused) noexcept {
  uint64_t covered = 0;
  {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    covered = reserve_.take(size, chunks);
  }
  reused->assign(chunks->size(), true);
  const uint64_t chunk = chunk_bytes(size - covered, wanted_workers_);
  uint64_t fresh = 0;
  for (uint64_t offset = covered; offset < size; offset += chunk) {
    HostChunk c;
    c.bytes = std::min(chunk, size - offset);
    c.capacity = round_up(c.bytes, kPage);
    const bool kept = take_kept(c.capacity, &c);
    c.bytes = std::min(chunk, size - offset);
    if (!kept) fresh += c.capacity;
    chunks->push_back(c);
    reused->push_back(kept);
  }
  if (fresh == 0) return CUDA_SUCCESS;
  char* mapping = static_cast<char*>(map_aligned(fresh));
  if (mapping == nullptr) {
    for (size_t i = 0; i < chunks->size(); ++i)
      if ((*reused)[i]) free_chunk((*chunks)[i]);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < chunks->size(); ++i) {
    if ((*reused)[i]) continue;
    (*chunks)[i].base = mapping;
    mapping += (*chunks)[i].capacity;
  }
  return CUDA_SUCCESS;
}

CUresult HostStaging::copy_out_registered(CUcontext context, CUdeviceptr va, uint64_t size,
                                          HostBlock* out, CopyOutStats* stats,
                                          bool* pin_failed) noexcept {
  Job job;
  job.calls = &calls_;
  job.context = context;
  std::vector<bool> reused;
  *pin_failed = true;
  if (CUresult rc = plan_chunks(size, &job.chunks, &reused); rc != CUDA_SUCCESS) return rc;
  const size_t count = job.chunks.size();
  job.state.reset(new (std::nothrow) std::atomic<uint8_t>[count]);
  if (!job.state) {
    for (size_t i = 0; i < count; ++i)
      reused[i] ? free_chunk(job.chunks[i])
                : void(munmap(job.chunks[i].base, job.chunks[i].capacity));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < count; ++i) {
    job.state[i].store(reused[i] ? kReady : kPending, std::memory_order_relaxed);
    if (reused[i]) stats->reused_bytes += job.chunks[i].bytes;
    if (job.chunks[i].reserve) stats->reserve_bytes += job.chunks[i].bytes;
  }
  const int64_t start = monotonic_ns();
  post_job(job);
  const CUresult rc = run_copies(job, va, stats, pin_failed);
  const int64_t pinned_at = job.last_ready_ns.load(std::memory_order_relaxed);
  stats->pin_wall_ns = pinned_at > start ? pinned_at - start : 0;
  stats->pin_thread_ns = job.pin_ns.load(std::memory_order_relaxed);
  stats->threads = job.threads.load(std::memory_order_relaxed);
  if (rc != CUDA_SUCCESS) {
    // Nothing is copied in flight any more (run_copies synchronised): undo every chunk (a
    // reserve piece goes back to the reserve).
    for (size_t i = 0; i < count; ++i) {
      if (job.chunks[i].reserve) {
        free_chunk(job.chunks[i]);
        continue;
      }
      if (job.state[i].load(std::memory_order_acquire) == kReady)
        calls_.cuMemHostUnregister(job.chunks[i].base);
      munmap(job.chunks[i].base, job.chunks[i].capacity);
    }
    return rc;
  }
  out->chunks = std::move(job.chunks);
  return CUDA_SUCCESS;
}

// The swap thread's part: copies chunk after chunk as each is pinned (pinning one itself
// when no worker has claimed it yet), then waits for the workers to leave the job and for
// the copies to finish. `pin_failed`: false when the failure was a copy's.
CUresult HostStaging::run_copies(Job& job, CUdeviceptr va, CopyOutStats* stats,
                                 bool* pin_failed) noexcept {
  CUstream stream = nullptr;
  if (calls_.cuStreamCreate != nullptr && calls_.cuMemcpyDtoHAsync != nullptr &&
      calls_.cuStreamSynchronize != nullptr && calls_.cuStreamDestroy != nullptr &&
      calls_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
    stream = nullptr;  // then synchronous copies: they still overlap the pinning
  CUresult rc = CUDA_SUCCESS;
  bool helped = false;
  uint64_t offset = 0;
  for (size_t i = 0; i < job.chunks.size(); ++i) {
    const int64_t wait_start = monotonic_ns();
    helped |= job.await_chunk(i);
    stats->stall_ns += monotonic_ns() - wait_start;
    if (job.state[i].load(std::memory_order_acquire) != kReady) {
      rc = job.error.load();
      if (rc == CUDA_SUCCESS) rc = CUDA_ERROR_OUT_OF_MEMORY;
      break;
    }
    const HostChunk& chunk = job.chunks[i];
    rc = stream != nullptr ? calls_.cuMemcpyDtoHAsync(chunk.base, va + offset, chunk.bytes, stream)
                           : calls_.cuMemcpyDtoH(chunk.base, va + offset, chunk.bytes);
    if (rc != CUDA_SUCCESS) {
      *pin_failed = false;
      break;
    }
    offset += chunk.bytes;
  }
  if (rc != CUDA_SUCCESS) job.abort.store(true, std::memory_order_release);
  end_job();
  if (helped) job.threads.fetch_add(1, std::memory_order_relaxed);
  if (stream != nullptr) {
    const int64_t drain_start = monotonic_ns();
    const CUresult synced = calls_.cuStreamSynchronize(stream);
    stats->drain_ns += monotonic_ns() - drain_start;
    calls_.cuStreamDestroy(stream);
    if (rc == CUDA_SUCCESS && synced != CUDA_SUCCESS) {
      rc = synced;
      *pin_failed = false;
    }
  }
  return rc;
}

// The workers (and this thread, for what none has claimed) pin every chunk of `job`; no
// copies. Returns once all are pinned or failed and no worker is inside the job.
CUresult HostStaging::pin_all(Job& job) noexcept {
  post_job(job);
  for (size_t i = 0; i < job.chunks.size() && !job.abort.load(std::memory_order_acquire); ++i)
    job.await_chunk(i);
  end_job();
  return job.error.load();
}

// Hands `job` to the workers (started at the first job).
void HostStaging::post_job(Job& job) noexcept {
  start_workers();
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    job_ = &job;
    ++job_serial_;
  }
  bump(pool_wake_);
}

// Takes the job back: late wakers find nothing; returns once no worker is inside it.
void HostStaging::end_job() noexcept {
  std::unique_lock<std::mutex> lock(pool_mutex_);
  job_ = nullptr;
  wait_on(pool_idle_, lock, [&] { return busy_ == 0; });
}

// Slabs pinned in one job; those that failed (host memory ran out) are unmapped. A chunk
// nobody claimed after an abort stays kPending: unmapped too.
uint64_t HostStaging::grow_reserve(CUcontext context, uint64_t bytes) noexcept {
  if (!can_register() || bytes == 0) return 0;
  constexpr uint64_t kSlab = HostReserve::kSlabBytes;
  const uint64_t count = (bytes + kSlab - 1) / kSlab;
  char* mapping = static_cast<char*>(map_aligned(count * kSlab));
  if (mapping == nullptr) return 0;
  Job job;
  job.calls = &calls_;
  job.context = context;
  job.state.reset(new (std::nothrow) std::atomic<uint8_t>[count]);
  if (!job.state) {
    munmap(mapping, count * kSlab);
    return 0;
  }
  for (uint64_t i = 0; i < count; ++i) {
    HostChunk slab;
    slab.base = mapping + i * kSlab;
    slab.capacity = slab.bytes = kSlab;
    job.chunks.push_back(slab);
    job.state[i].store(kPending, std::memory_order_relaxed);
  }
  const CUresult rc = pin_all(job);
  uint64_t added = 0;
  std::lock_guard<std::mutex> lock(keep_mutex_);
  for (uint64_t i = 0; i < count; ++i) {
    if (job.state[i].load(std::memory_order_acquire) == kReady) {
      reserve_.add_slab(job.chunks[i].base);
      added += kSlab;
    } else {
      munmap(job.chunks[i].base, kSlab);
    }
  }
  if (rc != CUDA_SUCCESS)
    FRACGPU_LOG_CAPPED(LogLevel::kInfo, 4,
                       "the swap reserve stays at %.1f MiB: pinning more host memory failed "
                       "(CUDA error %d)",
                       static_cast<double>(reserve_.capacity()) / (1 << 20), static_cast<int>(rc));
  return added;
}

// No registration: the driver's pinned allocations, one per chunk, by this thread.
CUresult HostStaging::copy_out_host_alloc(CUdeviceptr va, uint64_t size, HostBlock* out,
                                          CopyOutStats* stats) noexcept {
  const uint64_t chunk = chunk_bytes(size, wanted_workers_);
  std::vector<HostChunk> chunks;
  CUresult rc = CUDA_SUCCESS;
  for (uint64_t offset = 0; offset < size && rc == CUDA_SUCCESS; offset += chunk) {
    HostChunk c;
    c.bytes = c.capacity = std::min(chunk, size - offset);
    c.host_alloc = true;
    const int64_t begin = monotonic_ns();
    rc = calls_.cuMemHostAlloc(&c.base, c.capacity, CU_MEMHOSTALLOC_PORTABLE);
    stats->pin_thread_ns += monotonic_ns() - begin;
    if (rc != CUDA_SUCCESS) break;
    chunks.push_back(c);
    rc = calls_.cuMemcpyDtoH(c.base, va + offset, c.bytes);
  }
  if (rc != CUDA_SUCCESS) {
    for (const HostChunk& c : chunks) calls_.cuMemFreeHost(c.base);
    return rc;
  }
  stats->pin_wall_ns = stats->pin_thread_ns;
  stats->threads = 1;
  out->chunks = std::move(chunks);
  return CUDA_SUCCESS;
}

void HostStaging::start_workers() noexcept {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  if (workers_started_) return;
  workers_started_ = true;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  for (unsigned i = 0; i < wanted_workers_; ++i) {
    pthread_t thread;
    // A worker that cannot start is missing help, not an error: the swap thread pins
    // whatever no worker has claimed.
    if (pthread_create(&thread, &attr, &HostStaging::worker_main, this) == 0) ++alive_;
  }
  pthread_attr_destroy(&attr);
}

void* HostStaging::worker_main(void* arg) noexcept {
  auto& staging = *static_cast<HostStaging*>(arg);
  if (staging.captures_ != nullptr) staging.captures_->relax_this_thread();
  staging.serve_jobs();
  return nullptr;
}

void HostStaging::serve_jobs() noexcept {
  std::unique_lock<std::mutex> lock(pool_mutex_);
  uint64_t seen = 0;
  for (;;) {
    wait_on(pool_wake_, lock,
            [&] { return stopping_ || (job_ != nullptr && job_serial_ != seen); });
    if (stopping_) break;
    seen = job_serial_;
    Job& job = *job_;
    ++busy_;
    lock.unlock();
    // Registration needs the memory's context current on this thread.
    bool pushed = job.context != nullptr && calls_.cuCtxPushCurrent != nullptr &&
                  calls_.cuCtxPushCurrent(job.context) == CUDA_SUCCESS;
    job.work();
    CUcontext popped = nullptr;
    if (pushed) calls_.cuCtxPopCurrent(&popped);
    lock.lock();
    --busy_;
    bump(pool_idle_);
  }
  --alive_;
  bump(pool_idle_);
}

void HostStaging::after_fork_in_child() noexcept {
  // The child has none of the parent's threads or registrations: the mappings it inherited
  // are dropped without the driver.
  new (&pool_mutex_) std::mutex();
  pool_wake_.store(0, std::memory_order_relaxed);
  pool_idle_.store(0, std::memory_order_relaxed);
  job_ = nullptr;
  busy_ = 0;
  alive_ = 0;
  workers_started_ = false;
  new (&keep_mutex_) std::mutex();
  for (void* slab : reserve_.remove_all()) munmap(slab, HostReserve::kSlabBytes);
  for (const auto& [capacity, kept] : kept_)
    if (!kept.first.host_alloc) munmap(kept.first.base, capacity);
  kept_.clear();
  blocks_.clear();  // the engine forgets the allocations these belong to
  kept_bytes_ = 0;
}

}  // namespace fracgpu
