// What becomes of a host copy after its swap-out (see host_staging.h): copied back chunk by
// chunk, released (each chunk unregistered, then unmapped), or kept registered for the next
// swap-out up to the keep limit and trimmed once idle.
#include <sys/mman.h>

#include <vector>

#include "core/host_staging.h"

namespace fracgpu {

const HostBlock* HostStaging::block(void* host) const noexcept {
  std::lock_guard<std::mutex> lock(keep_mutex_);
  auto it = blocks_.find(host);
  return it != blocks_.end() ? &it->second : nullptr;
}

bool HostStaging::take_block(void* host, HostBlock* out) noexcept {
  std::lock_guard<std::mutex> lock(keep_mutex_);
  auto it = blocks_.find(host);
  if (it == blocks_.end()) return false;
  *out = std::move(it->second);
  blocks_.erase(it);
  return true;
}

bool HostStaging::take_kept(uint64_t capacity, HostChunk* chunk) noexcept {
  std::lock_guard<std::mutex> lock(keep_mutex_);
  auto it = kept_.find(capacity);
  if (it == kept_.end()) return false;
  *chunk = it->second.first;
  kept_bytes_ -= capacity;
  kept_.erase(it);
  return true;
}

CUresult HostStaging::copy_in(void* host, CUdeviceptr va) noexcept {
  std::vector<HostChunk> chunks;
  {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    auto it = blocks_.find(host);
    if (it == blocks_.end()) return CUDA_ERROR_INVALID_VALUE;
    chunks = it->second.chunks;
  }
  // One stream for all of it, one synchronisation at the end: a copy per chunk (a piece of
  // the reserve may be a single 2 MiB granule) then costs its launch, not a round trip.
  CUstream stream = nullptr;
  if (calls_.cuStreamCreate != nullptr && calls_.cuMemcpyHtoDAsync != nullptr &&
      calls_.cuStreamSynchronize != nullptr && calls_.cuStreamDestroy != nullptr &&
      calls_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
    stream = nullptr;
  CUresult rc = CUDA_SUCCESS;
  uint64_t offset = 0;
  for (const HostChunk& chunk : chunks) {
    rc = stream != nullptr ? calls_.cuMemcpyHtoDAsync(va + offset, chunk.base, chunk.bytes, stream)
                           : calls_.cuMemcpyHtoD(va + offset, chunk.base, chunk.bytes);
    if (rc != CUDA_SUCCESS) break;
    offset += chunk.bytes;
  }
  if (stream != nullptr) {
    // Also after a failure: nothing may still read the host copy when the caller reacts.
    const CUresult synced = calls_.cuStreamSynchronize(stream);
    calls_.cuStreamDestroy(stream);
    if (rc == CUDA_SUCCESS) rc = synced;
  }
  return rc;
}

void HostStaging::free_chunk(const HostChunk& chunk) noexcept {
  if (chunk.base == nullptr) return;
  if (chunk.reserve) {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    reserve_.give_back(chunk);
    return;
  }
  if (chunk.host_alloc) {
    calls_.cuMemFreeHost(chunk.base);
    return;
  }
  calls_.cuMemHostUnregister(chunk.base);  // each chunk is a registration of its own
  munmap(chunk.base, chunk.capacity);
}

void HostStaging::release(void* host) noexcept {
  HostBlock block;
  if (!take_block(host, &block)) return;
  for (const HostChunk& chunk : block.chunks) free_chunk(chunk);
}

void HostStaging::retire(void* host, int64_t now_ns) noexcept {
  HostBlock block;
  if (take_block(host, &block)) retire_block(block, now_ns);
}

void HostStaging::retire_block(HostBlock& block, int64_t now_ns) noexcept {
  std::vector<HostChunk> unkept;
  {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    for (const HostChunk& chunk : block.chunks) {
      if (chunk.reserve) {
        reserve_.give_back(chunk);
      } else if (!chunk.host_alloc && kept_bytes_ + chunk.capacity <= keep_limit_) {
        kept_.emplace(chunk.capacity, std::make_pair(chunk, now_ns));
        kept_bytes_ += chunk.capacity;
      } else {
        unkept.push_back(chunk);
      }
    }
  }
  block.chunks.clear();
  for (const HostChunk& chunk : unkept) free_chunk(chunk);
}

void HostStaging::set_keep_limit(uint64_t bytes) noexcept {
  std::vector<HostChunk> over;
  {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    keep_limit_ = bytes;
    while (kept_bytes_ > keep_limit_ && !kept_.empty()) {
      auto largest = std::prev(kept_.end());
      over.push_back(largest->second.first);
      kept_bytes_ -= largest->first;
      kept_.erase(largest);
    }
  }
  for (const HostChunk& chunk : over) free_chunk(chunk);
}

void HostStaging::trim(int64_t now_ns, int64_t idle_ns) noexcept {
  std::vector<HostChunk> idle;
  {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    for (auto it = kept_.begin(); it != kept_.end();) {
      if (now_ns - it->second.second < idle_ns) {
        ++it;
        continue;
      }
      idle.push_back(it->second.first);
      kept_bytes_ -= it->first;
      it = kept_.erase(it);
    }
  }
  for (const HostChunk& chunk : idle) free_chunk(chunk);
}

uint64_t HostStaging::kept_bytes() const noexcept {
  std::lock_guard<std::mutex> lock(keep_mutex_);
  return kept_bytes_;
}

void HostStaging::unpin_slab(void* base) noexcept {
  calls_.cuMemHostUnregister(base);
  munmap(base, HostReserve::kSlabBytes);
}

uint64_t HostStaging::shrink_reserve(uint64_t keep_free) noexcept {
  std::vector<void*> removed;
  {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    removed = reserve_.remove_free_slabs(keep_free);
  }
  for (void* slab : removed) unpin_slab(slab);
  return removed.size() * HostReserve::kSlabBytes;
}

uint64_t HostStaging::reserve_free_bytes() const noexcept {
  std::lock_guard<std::mutex> lock(keep_mutex_);
  return reserve_.free_bytes();
}

uint64_t HostStaging::reserve_capacity() const noexcept {
  std::lock_guard<std::mutex> lock(keep_mutex_);
  return reserve_.capacity();
}

uint64_t HostStaging::reserve_bytes_of(void* host) const noexcept {
  std::lock_guard<std::mutex> lock(keep_mutex_);
  auto it = blocks_.find(host);
  if (it == blocks_.end()) return 0;
  uint64_t bytes = 0;
  for (const HostChunk& chunk : it->second.chunks)
    if (chunk.reserve) bytes += chunk.capacity;
  return bytes;
}

}  // namespace fracgpu
