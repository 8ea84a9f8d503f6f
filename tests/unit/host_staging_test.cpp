// HostStaging (interpose/core/host_staging.h) over a fake driver port: "device" memory is a
// buffer of this test, asynchronous copies are queued and run at the stream's
// synchronisation (so a copy still in flight when its chunk is unregistered is caught).
// Chunks are copied in order and intact, at the edges of the chunk size too; every failure
// (registration, copy, synchronisation) unwinds every registration and mapping; a refused
// registration falls back to cuMemHostAlloc; release unregisters every chunk; kept chunks
// are reused without pinning and trimmed.
#include "core/host_staging.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace fracgpu {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
const CUcontext kContext = reinterpret_cast<CUcontext>(0xc0c0);
const CUstream kStream = reinterpret_cast<CUstream>(0x5157);

struct FakeHostDriver {
  std::mutex mutex;
  std::map<uintptr_t, uint64_t> registered;  // start -> bytes
  std::set<uintptr_t> ever_registered;
  std::set<void*> host_allocs;
  struct Copy {
    void* dst;
    const void* src;
    uint64_t bytes;
  };
  std::vector<Copy> queued;          // on the stream, not yet run
  std::vector<uint64_t> copy_order;  // source offsets, in the order queued
  uintptr_t device_base = 0;
  int registers = 0, unregisters = 0, allocs = 0, frees = 0, copies = 0;
  int fail_register_at = -1;  // the n-th registration (0-based) fails; -2: all fail
  int fail_copy_at = -1;
  bool fail_sync = false;
  unsigned stream_flags = ~0u;
  int streams_created = 0, streams_destroyed = 0;
  int async_copies_in = 0;
  int violations = 0;  // a copy into unpinned memory, an unregister under a queued copy,
                       // a registration without the context, an overlapping registration
};
FakeHostDriver* g = nullptr;
thread_local CUcontext t_current = nullptr;

bool pinned(const void* p, uint64_t bytes) {  // under g->mutex
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = g->registered.upper_bound(address);
  if (it != g->registered.begin()) {
    --it;
    if (address >= it->first && address + bytes <= it->first + it->second) return true;
  }
  return g->host_allocs.count(const_cast<void*>(p)) != 0;
}

CUresult fake_register(void* p, size_t bytes, unsigned) {
  std::lock_guard<std::mutex> lock(g->mutex);
  const int n = g->registers++;
  if (t_current != kContext) ++g->violations;
  if (g->fail_register_at == -2 || n == g->fail_register_at) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto start = reinterpret_cast<uintptr_t>(p);
  for (const auto& [base, size] : g->registered)
    if (start < base + size && base < start + bytes) ++g->violations;
  g->registered[start] = bytes;
  g->ever_registered.insert(start);
  return CUDA_SUCCESS;
}
CUresult fake_unregister(void* p) {
  std::lock_guard<std::mutex> lock(g->mutex);
  auto it = g->registered.find(reinterpret_cast<uintptr_t>(p));
  if (it == g->registered.end()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  for (const auto& copy : g->queued) {
    const auto dst = reinterpret_cast<uintptr_t>(copy.dst);
    if (dst >= it->first && dst < it->first + it->second) ++g->violations;
  }
  g->registered.erase(it);
  ++g->unregisters;
  return CUDA_SUCCESS;
}
CUresult fake_host_alloc(void** p, size_t bytes, unsigned) {
  std::lock_guard<std::mutex> lock(g->mutex);
  *p = std::malloc(bytes);
  g->host_allocs.insert(*p);
  ++g->allocs;
  return CUDA_SUCCESS;
}
CUresult fake_free_host(void* p) {
  std::lock_guard<std::mutex> lock(g->mutex);
  if (g->host_allocs.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  ++g->frees;
  return CUDA_SUCCESS;
}
CUresult fake_stream_create(CUstream* stream, unsigned flags) {
  g->stream_flags = flags;
  ++g->streams_created;
  *stream = kStream;
  return CUDA_SUCCESS;
}
CUresult fake_stream_destroy(CUstream) {
  ++g->streams_destroyed;
  return CUDA_SUCCESS;
}
CUresult fake_sync(CUstream stream) {
  std::lock_guard<std::mutex> lock(g->mutex);
  if (stream != kStream) ++g->violations;
  for (const auto& copy : g->queued) std::memcpy(copy.dst, copy.src, copy.bytes);
  g->queued.clear();
  return g->fail_sync ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}
CUresult fake_copy_async(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(g->mutex);
  if (g->copies++ == g->fail_copy_at) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (stream != kStream || !pinned(dst, bytes)) ++g->violations;
  g->queued.push_back({dst, reinterpret_cast<const void*>(src), bytes});
  g->copy_order.push_back(src - g->device_base);
  return CUDA_SUCCESS;
}
CUresult fake_copy_sync(void* dst, CUdeviceptr src, size_t bytes) {
  std::lock_guard<std::mutex> lock(g->mutex);
  if (g->copies++ == g->fail_copy_at) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (!pinned(dst, bytes)) ++g->violations;
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  g->copy_order.push_back(src - g->device_base);
  return CUDA_SUCCESS;
}
CUresult fake_copy_in(CUdeviceptr dst, const void* src, size_t bytes) {
  std::lock_guard<std::mutex> lock(g->mutex);
  if (!pinned(src, bytes)) ++g->violations;
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return CUDA_SUCCESS;
}
CUresult fake_copy_in_async(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  std::lock_guard<std::mutex> lock(g->mutex);
  if (stream != kStream || !pinned(src, bytes)) ++g->violations;
  g->queued.push_back({reinterpret_cast<void*>(dst), src, bytes});  // runs at the sync
  ++g->async_copies_in;
  return CUDA_SUCCESS;
}
CUresult fake_push(CUcontext ctx) {
  t_current = ctx;
  return CUDA_SUCCESS;
}
CUresult fake_pop(CUcontext* ctx) {
  *ctx = t_current;
  t_current = nullptr;
  return CUDA_SUCCESS;
}

bool mapped(uintptr_t address) {
  unsigned char resident = 0;
  return mincore(reinterpret_cast<void*>(address & ~uintptr_t{4095}), 4096, &resident) == 0 ||
         errno != ENOMEM;
}

class HostStagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g = &driver;
    calls.cuMemHostRegister = fake_register;
    calls.cuMemHostUnregister = fake_unregister;
    calls.cuMemHostAlloc = fake_host_alloc;
    calls.cuMemFreeHost = fake_free_host;
    calls.cuStreamCreate = fake_stream_create;
    calls.cuStreamDestroy = fake_stream_destroy;
    calls.cuStreamSynchronize = fake_sync;
    calls.cuMemcpyDtoHAsync = fake_copy_async;
    calls.cuMemcpyDtoH = fake_copy_sync;
    calls.cuMemcpyHtoD = fake_copy_in;
    calls.cuMemcpyHtoDAsync = fake_copy_in_async;
    calls.cuCtxPushCurrent = fake_push;
    calls.cuCtxPopCurrent = fake_pop;
    t_current = kContext;  // the swap engine's ContextScope
  }
  void TearDown() override { g = nullptr; }

  // "Device" memory of `bytes` with a pattern no two chunks share.
  CUdeviceptr device(uint64_t bytes) {
    memory.resize(bytes / 8);
    for (size_t i = 0; i < memory.size(); ++i) memory[i] = i * 0x9e3779b97f4a7c15ull;
    driver.device_base = reinterpret_cast<uintptr_t>(memory.data());
    return driver.device_base;
  }
  // The host copy back in a fresh "device" buffer: equal to the original?
  bool round_trips(HostStaging& staging, void* host) {
    std::vector<uint64_t> back(memory.size());
    if (staging.copy_in(host, reinterpret_cast<CUdeviceptr>(back.data())) != CUDA_SUCCESS)
      return false;
    return back == memory;
  }
  // Copies out `bytes` and checks the copy: chunks in order, contiguous offsets, intact.
  void expect_staged(HostStaging& staging, uint64_t bytes, unsigned workers) {
    const CUdeviceptr va = device(bytes);
    void* host = nullptr;
    CopyOutStats stats;
    ASSERT_EQ(staging.copy_out(kContext, va, bytes, &host, &stats), CUDA_SUCCESS);
    ASSERT_NE(host, nullptr);
    const HostBlock* block = staging.block(host);
    ASSERT_NE(block, nullptr);
    const uint64_t chunk = HostStaging::chunk_bytes(bytes, workers);
    EXPECT_EQ(block->chunks.size(), (bytes + chunk - 1) / chunk);
    uint64_t offset = 0;
    for (size_t i = 0; i < block->chunks.size(); ++i) {
      EXPECT_EQ(block->chunks[i].bytes, std::min(chunk, bytes - offset));
      EXPECT_EQ(driver.copy_order.at(i), offset) << "chunk " << i << " copied out of order";
      EXPECT_EQ(driver.registered.count(reinterpret_cast<uintptr_t>(block->chunks[i].base)), 1u);
      offset += block->chunks[i].bytes;
    }
    EXPECT_EQ(offset, bytes);
    EXPECT_EQ(driver.copy_order.size(), block->chunks.size());
    EXPECT_EQ(stats.bytes, bytes);
    EXPECT_TRUE(round_trips(staging, host));
    EXPECT_EQ(driver.stream_flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
    EXPECT_EQ(driver.streams_created, driver.streams_destroyed);
    const size_t chunks = block->chunks.size();
    std::vector<uintptr_t> bases;
    for (const HostChunk& c : block->chunks) bases.push_back(reinterpret_cast<uintptr_t>(c.base));
    staging.release(host);
    EXPECT_EQ(staging.block(host), nullptr);
    EXPECT_EQ(driver.unregisters, static_cast<int>(chunks));
    EXPECT_TRUE(driver.registered.empty());
    for (uintptr_t base : bases) EXPECT_FALSE(mapped(base));
    EXPECT_EQ(driver.violations, 0);
  }
  // After a failed copy_out: nothing registered, mapped or allocated is left.
  void expect_unwound() {
    EXPECT_TRUE(driver.registered.empty());
    EXPECT_TRUE(driver.queued.empty());
    EXPECT_EQ(driver.allocs, driver.frees);
    for (uintptr_t base : driver.ever_registered) EXPECT_FALSE(mapped(base));
    EXPECT_EQ(driver.streams_created, driver.streams_destroyed);
    EXPECT_EQ(driver.violations, 0);
  }

  FakeHostDriver driver;
  DriverCalls calls;
  std::vector<uint64_t> memory;
};

TEST_F(HostStagingTest, ChunksAreCopiedInOrderAndIntactAndReleaseUnregistersEach) {
  HostStaging staging(calls, nullptr, 4);
  expect_staged(staging, 40 * kMiB + 12 * 4096, 4);  // not a multiple of the chunk
}

TEST_F(HostStagingTest, ASizeThatIsAMultipleOfTheChunk) {
  HostStaging staging(calls, nullptr, 2);
  ASSERT_EQ(HostStaging::chunk_bytes(32 * kMiB, 2), 8 * kMiB);
  expect_staged(staging, 32 * kMiB, 2);
}

TEST_F(HostStagingTest, AOneChunkAllocation) {
  HostStaging staging(calls, nullptr, 8);
  expect_staged(staging, 2 * kMiB, 8);
}

TEST_F(HostStagingTest, ChunkSizesStayBetweenTheirBounds) {
  EXPECT_EQ(HostStaging::chunk_bytes(1 * kMiB, 8), 4 * kMiB);
  EXPECT_EQ(HostStaging::chunk_bytes(15ull << 30, 8), HostStaging::kMaxChunk);
  EXPECT_EQ(HostStaging::chunk_bytes(256 * kMiB, 8), 16 * kMiB);
  EXPECT_EQ(HostStaging::chunk_bytes(100 * kMiB, 1) % (2 * kMiB), 0u);
}

TEST_F(HostStagingTest, WithoutWorkersTheSwapThreadPinsEveryChunk) {
  HostStaging staging(calls, nullptr, 1);
  expect_staged(staging, 9 * kMiB, 1);
}

TEST_F(HostStagingTest, ARegistrationFailureInTheMiddleUnwindsEverything) {
  HostStaging staging(calls, nullptr, 4);
  calls.cuMemHostAlloc = nullptr;  // no fallback: the error comes back
  driver.fail_register_at = 4;
  const CUdeviceptr va = device(40 * kMiB);
  void* host = reinterpret_cast<void*>(1);
  EXPECT_EQ(staging.copy_out(kContext, va, 40 * kMiB, &host, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(host, nullptr);
  EXPECT_GE(driver.ever_registered.size(), 1u);
  expect_unwound();
}

TEST_F(HostStagingTest, ARefusedRegistrationFallsBackToHostAllocations) {
  HostStaging staging(calls, nullptr, 4);
  driver.fail_register_at = -2;
  const CUdeviceptr va = device(20 * kMiB + 4096);
  void* host = nullptr;
  ASSERT_EQ(staging.copy_out(kContext, va, 20 * kMiB + 4096, &host, nullptr), CUDA_SUCCESS);
  const HostBlock* block = staging.block(host);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(driver.allocs, static_cast<int>(block->chunks.size()));
  EXPECT_TRUE(round_trips(staging, host));
  staging.release(host);
  EXPECT_EQ(driver.frees, driver.allocs);
  EXPECT_TRUE(driver.registered.empty());
}

TEST_F(HostStagingTest, ACopyFailureUnwindsAfterTheCopiesInFlight) {
  HostStaging staging(calls, nullptr, 4);
  driver.fail_copy_at = 3;
  const CUdeviceptr va = device(40 * kMiB);
  void* host = nullptr;
  EXPECT_EQ(staging.copy_out(kContext, va, 40 * kMiB, &host, nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(host, nullptr);
  EXPECT_EQ(driver.allocs, 0);  // a copy's failure is not the pinning's: no second attempt
  expect_unwound();
}

TEST_F(HostStagingTest, AFailedSynchronisationUnwinds) {
  HostStaging staging(calls, nullptr, 2);
  driver.fail_sync = true;
  const CUdeviceptr va = device(16 * kMiB);
  void* host = nullptr;
  EXPECT_EQ(staging.copy_out(kContext, va, 16 * kMiB, &host, nullptr), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(host, nullptr);
  expect_unwound();
}

TEST_F(HostStagingTest, WithoutStreamsTheCopiesAreSynchronousAndStillIntact) {
  calls.cuStreamCreate = nullptr;
  HostStaging staging(calls, nullptr, 2);
  const CUdeviceptr va = device(24 * kMiB);
  void* host = nullptr;
  ASSERT_EQ(staging.copy_out(kContext, va, 24 * kMiB, &host, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(driver.streams_created, 0);
  EXPECT_TRUE(round_trips(staging, host));
  staging.release(host);
  EXPECT_TRUE(driver.registered.empty());
  EXPECT_EQ(driver.violations, 0);
}

TEST_F(HostStagingTest, RetiredChunksAreReusedWithoutPinningAndTrimmedWhenIdle) {
  HostStaging staging(calls, nullptr, 2);
  const uint64_t bytes = 24 * kMiB;
  const CUdeviceptr va = device(bytes);
  void* host = nullptr;
  ASSERT_EQ(staging.copy_out(kContext, va, bytes, &host, nullptr), CUDA_SUCCESS);
  const int pinned_once = driver.registers;
  staging.set_keep_limit(bytes);
  staging.retire(host, 1000);
  EXPECT_EQ(staging.kept_bytes(), bytes);
  EXPECT_EQ(driver.unregisters, 0);

  for (uint64_t& word : memory) word = ~word;  // new contents
  CopyOutStats stats;
  ASSERT_EQ(staging.copy_out(kContext, va, bytes, &host, &stats), CUDA_SUCCESS);
  EXPECT_EQ(driver.registers, pinned_once);  // nothing pinned again
  EXPECT_EQ(stats.reused_bytes, bytes);
  EXPECT_EQ(staging.kept_bytes(), 0u);
  EXPECT_TRUE(round_trips(staging, host));

  staging.retire(host, 2000);
  staging.trim(2000 + HostStaging::kKeepIdleNs - 1);
  EXPECT_EQ(staging.kept_bytes(), bytes);  // not idle long enough
  staging.trim(2000 + HostStaging::kKeepIdleNs);
  EXPECT_EQ(staging.kept_bytes(), 0u);
  EXPECT_TRUE(driver.registered.empty());
  EXPECT_EQ(driver.violations, 0);
}

TEST_F(HostStagingTest, RetiringPastTheKeepLimitUnpins) {
  HostStaging staging(calls, nullptr, 2);
  const uint64_t bytes = 16 * kMiB;
  const CUdeviceptr va = device(bytes);
  void* host = nullptr;
  ASSERT_EQ(staging.copy_out(kContext, va, bytes, &host, nullptr), CUDA_SUCCESS);
  const size_t chunks = staging.block(host)->chunks.size();
  staging.set_keep_limit(HostStaging::chunk_bytes(bytes, 2));  // room for one chunk
  staging.retire(host, 0);
  EXPECT_EQ(staging.kept_bytes(), HostStaging::chunk_bytes(bytes, 2));
  EXPECT_EQ(driver.unregisters, static_cast<int>(chunks) - 1);
  staging.set_keep_limit(0);  // a lower limit unpins what is over it
  EXPECT_EQ(staging.kept_bytes(), 0u);
  EXPECT_TRUE(driver.registered.empty());
}

// The swap reserve: slabs pinned ahead take a swap-out without a registration; what the
// reserve does not cover is pinned as it goes; pieces come back at retire, release and on
// every failure; whole free slabs are unpinned when the reserve shrinks.
TEST_F(HostStagingTest, ASwapOutIntoTheReserveRegistersNothing) {
  HostStaging staging(calls, nullptr, 2);
  constexpr uint64_t kSlab = HostReserve::kSlabBytes;
  ASSERT_EQ(staging.grow_reserve(kContext, 2 * kSlab), 2 * kSlab);
  EXPECT_EQ(driver.registers, 2);
  EXPECT_EQ(staging.reserve_free_bytes(), 2 * kSlab);
  const uint64_t bytes = 100 * kMiB;
  const CUdeviceptr va = device(bytes);
  void* host = nullptr;
  CopyOutStats stats;
  ASSERT_EQ(staging.copy_out(kContext, va, bytes, &host, &stats), CUDA_SUCCESS);
  EXPECT_EQ(driver.registers, 2) << "nothing pinned for the swap-out";
  EXPECT_EQ(stats.reserve_bytes, bytes);
  EXPECT_EQ(stats.reused_bytes, bytes);
  EXPECT_EQ(staging.reserve_free_bytes(), 2 * kSlab - bytes);
  EXPECT_EQ(staging.reserve_bytes_of(host), bytes);
  const int queued_before = driver.async_copies_in;
  EXPECT_TRUE(round_trips(staging, host));
  EXPECT_EQ(driver.async_copies_in - queued_before, 2) << "a queued copy per piece, one sync";
  EXPECT_TRUE(driver.queued.empty());
  staging.retire(host, 0);
  EXPECT_EQ(staging.reserve_free_bytes(), 2 * kSlab);
  EXPECT_EQ(driver.unregisters, 0) << "the reserve stays pinned";
  EXPECT_EQ(staging.shrink_reserve(kSlab), kSlab);
  EXPECT_EQ(staging.reserve_capacity(), kSlab);
  EXPECT_EQ(staging.shrink_reserve(0), kSlab);
  EXPECT_TRUE(driver.registered.empty());
  EXPECT_EQ(driver.violations, 0);
}

TEST_F(HostStagingTest, WhatTheReserveDoesNotCoverIsPinnedAsItGoes) {
  HostStaging staging(calls, nullptr, 2);
  constexpr uint64_t kSlab = HostReserve::kSlabBytes;
  ASSERT_EQ(staging.grow_reserve(kContext, kSlab), kSlab);
  const uint64_t bytes = kSlab + 36 * kMiB;
  const CUdeviceptr va = device(bytes);
  void* host = nullptr;
  CopyOutStats stats;
  ASSERT_EQ(staging.copy_out(kContext, va, bytes, &host, &stats), CUDA_SUCCESS);
  EXPECT_EQ(stats.reserve_bytes, kSlab);
  EXPECT_GT(driver.registers, 1);
  EXPECT_EQ(staging.reserve_free_bytes(), 0u);
  EXPECT_TRUE(round_trips(staging, host));
  staging.release(host);  // the allocation was freed while on host
  EXPECT_EQ(staging.reserve_free_bytes(), kSlab);
  EXPECT_EQ(driver.registered.size(), 1u) << "only the reserve's slab is still pinned";
  staging.shrink_reserve(0);
  EXPECT_TRUE(driver.registered.empty());
  EXPECT_EQ(driver.violations, 0);
}

TEST_F(HostStagingTest, AFailedSwapOutGivesTheReservePiecesBack) {
  HostStaging staging(calls, nullptr, 2);
  constexpr uint64_t kSlab = HostReserve::kSlabBytes;
  ASSERT_EQ(staging.grow_reserve(kContext, kSlab), kSlab);
  driver.fail_copy_at = 0;  // the one piece's copy
  const CUdeviceptr va = device(40 * kMiB);
  void* host = nullptr;
  EXPECT_EQ(staging.copy_out(kContext, va, 40 * kMiB, &host, nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(host, nullptr);
  EXPECT_EQ(staging.reserve_free_bytes(), kSlab);
  EXPECT_EQ(driver.registered.size(), 1u);
  EXPECT_EQ(driver.unregisters, 0);
  staging.shrink_reserve(0);
  expect_unwound();
}

TEST_F(HostStagingTest, GrowingTheReserveStopsWhereRegistrationFails) {
  HostStaging staging(calls, nullptr, 1);
  constexpr uint64_t kSlab = HostReserve::kSlabBytes;
  driver.fail_register_at = 1;  // the second slab
  const uint64_t added = staging.grow_reserve(kContext, 4 * kSlab);
  EXPECT_LT(added, 4 * kSlab);
  EXPECT_EQ(added, driver.registered.size() * kSlab) << "what is in the reserve is pinned";
  EXPECT_EQ(staging.reserve_capacity(), added);
  staging.shrink_reserve(0);
  expect_unwound();
}

TEST_F(HostStagingTest, AForkedChildForgetsTheParentsCopies) {
  HostStaging staging(calls, nullptr, 2);
  const CUdeviceptr va = device(8 * kMiB);
  void* host = nullptr;
  ASSERT_EQ(staging.copy_out(kContext, va, 8 * kMiB, &host, nullptr), CUDA_SUCCESS);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    staging.after_fork_in_child();
#if defined(FRACGPU_SANITIZER_THREAD)
    // ThreadSanitizer cannot start threads in the child of a multi-threaded process: there,
    // only the forgetting is checked.
    _exit(staging.block(host) == nullptr ? 0 : 1);
#endif
    // No workers in the child: a copy out starts its own and works.
    void* again = nullptr;
    const bool ok = staging.block(host) == nullptr &&
                    staging.copy_out(kContext, va, 8 * kMiB, &again, nullptr) == CUDA_SUCCESS &&
                    round_trips(staging, again);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  staging.release(host);
  EXPECT_TRUE(driver.registered.empty());
}

}  // namespace
}  // namespace fracgpu
