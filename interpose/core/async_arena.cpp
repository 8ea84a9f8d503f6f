// Implementation of AsyncArena (see async_arena.h): the best-fit books of blocks carved from
// swappable chunks, the stream-order reuse rule and the trim.
#include "core/async_arena.h"

#include <algorithm>
#include <memory>

#include "core/shim_log.h"

namespace fracgpu {
namespace {

constexpr uint64_t kNoGranule = ~0ull;

uint64_t round_up(uint64_t bytes, uint64_t to) {
  return (bytes + to - 1) / to * to;
}

// Per-thread default streams are told apart by a key no other thread ever gets (a thread
// that exits may still have work queued on its stream).
std::atomic<uint64_t> g_next_thread_key{1};
thread_local uint64_t t_thread_key = 0;

}  // namespace

StreamKey stream_key(CUstream stream, bool per_thread) noexcept {
  if (stream == nullptr) stream = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (stream != CU_STREAM_PER_THREAD) return reinterpret_cast<uintptr_t>(stream);
  if (t_thread_key == 0) t_thread_key = g_next_thread_key.fetch_add(1, std::memory_order_relaxed);
  return (t_thread_key << 8) | 0x2;  // never a stream handle: those are aligned pointers or 1, 2
}

uint64_t AsyncArena::granule(const TenantDevice& device) {
  std::atomic<uint64_t>& cached = granule_[device.index];
  uint64_t g = cached.load(std::memory_order_relaxed);
  if (g == 0) {
    g = port_.granularity(device);
    if (g == 0) g = kNoGranule;
    cached.store(g, std::memory_order_relaxed);
  }
  return g == kNoGranule ? 0 : g;
}

std::optional<CUresult> AsyncArena::allocate(const TenantDevice& device, CUdeviceptr* dptr,
                                             size_t size, StreamKey key, CUstream stream) {
  (void)stream;
  if (dptr == nullptr || size == 0 || device.index < 0 ||
      device.index >= static_cast<int>(kMaxDevices))
    return std::nullopt;
  const uint64_t g = granule(device);
  if (g == 0) return std::nullopt;
  if (size > (1ull << 62)) return CUDA_ERROR_OUT_OF_MEMORY;  // more than any device holds
  const uint64_t bytes = round_up(size, kAlign);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (take_pending(device.index, key, bytes, dptr) || take_ready(device.index, bytes, dptr))
      return CUDA_SUCCESS;
    if (!fences_.empty()) {
      poll(kPollBudget);
      if (take_ready(device.index, bytes, dptr)) return CUDA_SUCCESS;
    }
  }
  CUresult rc = grow(device, bytes, dptr);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY && trim(device.index, 0) > 0) rc = grow(device, bytes, dptr);
  if (rc == CUDA_ERROR_NOT_SUPPORTED) return std::nullopt;  // the chunk cannot be backed
  return rc;
}

// A new chunk: `bytes` of it live at its base, the rest a free block.
CUresult AsyncArena::grow(const TenantDevice& device, uint64_t bytes, CUdeviceptr* out) {
  const uint64_t g = granule(device);
  const uint64_t size = bytes > kSmallLimit ? round_up(bytes, g) : round_up(kSmallChunk, g);
  CUdeviceptr base = 0;
  const std::optional<CUresult> rc = port_.allocate_chunk(device, size, &base);
  if (!rc) return CUDA_ERROR_NOT_SUPPORTED;
  if (*rc != CUDA_SUCCESS) return *rc;
  std::lock_guard<std::mutex> lock(mutex_);
  chunks_[base] = Chunk{device.index, size};
  chunk_bytes_[device.index] += size;
  Block live;
  live.size = bytes;
  live.chunk = base;
  live.device = device.index;
  blocks_[base] = live;
  live_bytes_[device.index] += bytes;
  if (size > bytes) {
    Block rest = live;
    rest.size = size - bytes;
    rest.state = State::kReady;
    blocks_[base + bytes] = rest;
    ready_.insert({device.index, rest.size, base + bytes});
  }
  *out = base;
  return CUDA_SUCCESS;
}

bool AsyncArena::take_pending(int device, StreamKey key, uint64_t bytes, CUdeviceptr* out) {
  auto it = pending_.lower_bound({device, key, bytes, 0});
  if (it == pending_.end() || std::get<0>(*it) != device || std::get<1>(*it) != key ||
      std::get<2>(*it) > 2 * bytes)
    return false;
  const CUdeviceptr addr = std::get<3>(*it);
  pending_.erase(it);
  Block& b = blocks_[addr];
  retire_event(b);  // stream order covers it: the event is not needed any more
  b.state = State::kLive;
  live_bytes_[device] += b.size;
  *out = addr;
  return true;
}

bool AsyncArena::take_ready(int device, uint64_t bytes, CUdeviceptr* out) {
  auto it = ready_.lower_bound({device, bytes, 0});
  if (it == ready_.end() || std::get<0>(*it) != device) return false;
  const CUdeviceptr addr = std::get<2>(*it);
  ready_.erase(it);
  Block& b = blocks_[addr];
  if (b.size - bytes >= kAlign) {
    Block rest = b;
    rest.size = b.size - bytes;
    b.size = bytes;
    blocks_[addr + bytes] = rest;  // its right neighbour is not free: free blocks merge
    ready_.insert({device, rest.size, addr + bytes});
  }
  Block& taken = blocks_[addr];
  taken.state = State::kLive;
  live_bytes_[device] += taken.size;
  *out = addr;
  return true;
}

// The block is free for every stream: merged with its free neighbours of the same chunk.
void AsyncArena::make_ready(std::map<CUdeviceptr, Block>::iterator it) {
  it->second.state = State::kReady;
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.state == State::kReady &&
      next->second.chunk == it->second.chunk) {
    ready_.erase({next->second.device, next->second.size, next->first});
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.state == State::kReady && prev->second.chunk == it->second.chunk) {
      ready_.erase({prev->second.device, prev->second.size, prev->first});
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  ready_.insert({it->second.device, it->second.size, it->first});
}

void AsyncArena::retire_event(const Block& b) {
  if (b.event != nullptr) spares_.push_back({b.context, b.event});
}

CUevent AsyncArena::take_spare(CUcontext context) {
  for (std::size_t i = spares_.size(); i-- > 0;) {
    if (spares_[i].context != context) continue;
    const CUevent event = spares_[i].event;
    spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(i));
    return event;
  }
  return nullptr;
}

void AsyncArena::drop_spares(std::vector<CUevent>* out) {
  while (spares_.size() > kSpareEvents) {
    out->push_back(spares_.front().event);
    spares_.erase(spares_.begin());
  }
}

// Round robin over the pending frees, oldest first: completed ones become free for every
// stream; stale entries (the block was reused on its stream) are dropped.
void AsyncArena::poll(std::size_t budget) {
  std::vector<std::pair<CUdeviceptr, uint64_t>> asked;
  std::vector<CUevent> events;
  while (!fences_.empty() && asked.size() < budget) {
    const auto entry = fences_.front();
    fences_.pop_front();
    auto it = blocks_.find(entry.first);
    if (it == blocks_.end() || it->second.state != State::kPending ||
        it->second.fence != entry.second)
      continue;
    if (it->second.event == nullptr) continue;  // its record failed: its own stream only
    asked.push_back(entry);
    events.push_back(it->second.event);
  }
  if (asked.empty()) return;
  std::unique_ptr<bool[]> done(new bool[asked.size()]());
  port_.events_done(events.data(), done.get(), asked.size());
  for (std::size_t i = 0; i < asked.size(); ++i) {
    if (!done[i]) {
      fences_.push_back(asked[i]);
      continue;
    }
    auto it = blocks_.find(asked[i].first);
    Block& b = it->second;
    pending_.erase({b.device, b.stream, b.size, it->first});
    retire_event(b);
    b.event = nullptr;
    make_ready(it);
  }
}

// Entries of blocks reused on their own stream stay behind in fences_; dropped once they
// outnumber the live ones, so the queue stays proportional to the pending blocks.
void AsyncArena::compact_fences() {
  if (fences_.size() <= 2 * pending_.size() + 64) return;
  std::deque<std::pair<CUdeviceptr, uint64_t>> kept;
  for (const auto& entry : fences_) {
    auto it = blocks_.find(entry.first);
    if (it != blocks_.end() && it->second.state == State::kPending &&
        it->second.fence == entry.second)
      kept.push_back(entry);
  }
  fences_.swap(kept);
}

std::optional<CUresult> AsyncArena::free_async(CUdeviceptr ptr, StreamKey key, CUstream stream) {
  const CUcontext context = port_.current_context();
  CUevent event = nullptr;
  std::vector<CUevent> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return std::nullopt;
    if (it->second.state != State::kLive) return CUDA_ERROR_INVALID_VALUE;  // a second free
    event = take_spare(context);
  }
  if (event == nullptr) event = port_.create_event();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || it->second.state != State::kLive) {
      if (event != nullptr) spares_.push_back({context, event});
      return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile by another thread
    }
    Block& b = it->second;
    if (event != nullptr && port_.record_event(event, stream) != CUDA_SUCCESS) {
      spares_.push_back({context, event});
      event = nullptr;
      FRACGPU_LOG_CAPPED(LogLevel::kWarn, 4,
                         "cannot record an event at a stream-ordered free; the block at 0x%llx is "
                         "reused by its own stream only",
                         static_cast<unsigned long long>(ptr));
    }
    live_bytes_[b.device] -= b.size;
    b.state = State::kPending;
    b.stream = key;
    b.event = event;
    b.context = context;
    b.fence = next_fence_++;
    pending_.insert({b.device, key, b.size, ptr});
    fences_.push_back({ptr, b.fence});
    compact_fences();
    drop_spares(&dropped);
  }
  for (CUevent e : dropped) port_.destroy_event(e);
  return CUDA_SUCCESS;
}

std::optional<CUresult> AsyncArena::free_sync(CUdeviceptr ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return std::nullopt;
    if (it->second.state != State::kLive) return CUDA_ERROR_INVALID_VALUE;
  }
  port_.synchronize_context();  // work queued before the free may still use the block
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || it->second.state != State::kLive) return CUDA_ERROR_INVALID_VALUE;
  live_bytes_[it->second.device] -= it->second.size;
  make_ready(it);
  return CUDA_SUCCESS;
}

std::optional<CUresult> AsyncArena::free_captured(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end()) return std::nullopt;
  if (it->second.state != State::kLive) return CUDA_ERROR_INVALID_VALUE;
  it->second.state = State::kHeld;
  FRACGPU_LOG_CAPPED(
      LogLevel::kWarn, 4,
      "a stream-ordered free of swappable memory (0x%llx) was captured into a graph; "
      "its %llu bytes stay allocated",
      static_cast<unsigned long long>(ptr), static_cast<unsigned long long>(it->second.size));
  return CUDA_SUCCESS;
}

uint64_t AsyncArena::trim(int index, uint64_t keep) {
  std::vector<CUdeviceptr> idle;
  uint64_t returned = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    poll(fences_.size());
    uint64_t idle_bytes = 0;
    std::vector<std::pair<uint64_t, CUdeviceptr>> candidates;  // size, base
    for (const auto& [base, c] : chunks_) {
      if (c.device != index) continue;
      auto it = blocks_.find(base);
      if (it == blocks_.end() || it->second.state != State::kReady || it->second.size != c.size)
        continue;
      candidates.push_back({c.size, base});
      idle_bytes += c.size;
    }
    std::sort(candidates.rbegin(), candidates.rend());  // the largest go first
    for (const auto& [size, base] : candidates) {
      if (idle_bytes <= keep) break;
      ready_.erase({index, size, base});
      blocks_.erase(base);
      chunks_.erase(base);
      chunk_bytes_[index] -= size;
      idle_bytes -= size;
      returned += size;
      idle.push_back(base);
    }
  }
  for (CUdeviceptr base : idle) port_.free_chunk(base);
  return returned;
}

bool AsyncArena::owns(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  return blocks_.count(ptr) != 0;
}

void AsyncArena::after_fork_in_child() noexcept {
  // The child has none of its parent's CUDA state: no chunks, no events, no streams.
  new (&mutex_) std::mutex();
  blocks_.clear();
  chunks_.clear();
  ready_.clear();
  pending_.clear();
  fences_.clear();
  spares_.clear();
  std::fill(std::begin(chunk_bytes_), std::end(chunk_bytes_), 0);
  std::fill(std::begin(live_bytes_), std::end(live_bytes_), 0);
}

uint64_t AsyncArena::chunk_bytes(int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  return chunk_bytes_[index];
}

uint64_t AsyncArena::live_bytes(int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_bytes_[index];
}

std::size_t AsyncArena::chunks() {
  std::lock_guard<std::mutex> lock(mutex_);
  return chunks_.size();
}

std::size_t AsyncArena::pending_blocks() {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

}  // namespace fracgpu
