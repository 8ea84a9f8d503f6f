// Unit tests of AsyncArena (interpose/core/async_arena.h) over a fake port: a chunk source
// with a cap that charges what it hands out, and events that complete only when the test
// says the work queued before them on their stream has run. Stream-order reuse (same stream
// at once, others after the event), bounded polling, trim, exact charging, sizes at the
// edges, captured and synchronous frees, fork, and many threads racing.
#include "core/async_arena.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace fracgpu {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
const TenantDevice kDevice{0, 0};

CUstream stream(uintptr_t n) {
  return reinterpret_cast<CUstream>(n * 0x100);
}

class FakePort final : public ArenaPort {
 public:
  explicit FakePort(uint64_t cap) : cap_(cap) {}

  uint64_t granularity(const TenantDevice&) override { return granule; }
  std::optional<CUresult> allocate_chunk(const TenantDevice&, uint64_t bytes,
                                         CUdeviceptr* base) override {
    std::lock_guard<std::mutex> lock(mutex_);
    EXPECT_EQ(bytes % granule, 0u) << "chunks are granule multiples";
    if (!backs) return std::nullopt;
    if (charged_ + bytes > cap_) return CUDA_ERROR_OUT_OF_MEMORY;
    charged_ += bytes;
    *base = next_;
    chunks_[next_] = bytes;
    next_ += bytes + granule;  // a hole between chunks: neighbours never merge across them
    ++chunk_allocations;
    return CUDA_SUCCESS;
  }
  void free_chunk(CUdeviceptr base) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = chunks_.find(base);
    ASSERT_NE(it, chunks_.end()) << "freed a chunk never allocated";
    charged_ -= it->second;
    chunks_.erase(it);
  }
  CUcontext current_context() override { return reinterpret_cast<CUcontext>(0x1000); }
  CUevent create_event() override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* e = new FakeEvent();
    events_.insert(e);
    ++created;
    return reinterpret_cast<CUevent>(e);
  }
  CUresult record_event(CUevent event, CUstream s) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* e = reinterpret_cast<FakeEvent*>(event);
    EXPECT_EQ(events_.count(e), 1u) << "recorded a destroyed event";
    e->stream = s;
    e->done = false;
    return CUDA_SUCCESS;
  }
  void events_done(const CUevent* events, bool* done, std::size_t n) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < n; ++i) {
      auto* e = reinterpret_cast<FakeEvent*>(events[i]);
      EXPECT_EQ(events_.count(e), 1u);
      done[i] = e->done;
      ++queries;
    }
  }
  void destroy_event(CUevent event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* e = reinterpret_cast<FakeEvent*>(event);
    events_.erase(e);
    delete e;
  }
  void synchronize_context() override {
    complete_all();
    ++syncs;
  }

  // The work queued so far on `s` has run: its events complete.
  void complete(CUstream s) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (FakeEvent* e : events_)
      if (e->stream == s) e->done = true;
  }
  void complete_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (FakeEvent* e : events_) e->done = true;
  }
  uint64_t charged() {
    std::lock_guard<std::mutex> lock(mutex_);
    return charged_;
  }
  ~FakePort() override {
    for (FakeEvent* e : events_) delete e;
  }

  uint64_t granule = 2 * kMiB;
  bool backs = true;
  std::atomic<int> chunk_allocations{0}, created{0}, queries{0}, syncs{0};

 private:
  struct FakeEvent {
    CUstream stream = nullptr;
    bool done = true;  // never recorded: complete, like the driver's
  };
  std::mutex mutex_;
  uint64_t cap_;
  uint64_t charged_ = 0;
  CUdeviceptr next_ = 0x7f0000000000ull;
  std::map<CUdeviceptr, uint64_t> chunks_;
  std::set<FakeEvent*> events_;
};

class AsyncArenaTest : public ::testing::Test {
 protected:
  CUdeviceptr alloc(size_t size, CUstream s) {
    CUdeviceptr p = 0;
    auto rc = arena.allocate(kDevice, &p, size, stream_key(s, false), s);
    EXPECT_TRUE(rc.has_value());
    EXPECT_EQ(rc.value_or(CUDA_ERROR_UNKNOWN), CUDA_SUCCESS);
    return p;
  }
  void free(CUdeviceptr p, CUstream s) {
    EXPECT_EQ(arena.free_async(p, stream_key(s, false), s), std::optional<CUresult>(CUDA_SUCCESS));
  }
  void expect_books_exact() {
    EXPECT_EQ(port.charged(), arena.chunk_bytes(0)) << "chunks are charged once, by the port";
  }

  FakePort port{16 * 1024 * kMiB};
  AsyncArena arena{port};
};

TEST_F(AsyncArenaTest, ABlockFreedOnAStreamIsReusedAtOnceByThatStream) {
  const CUdeviceptr a = alloc(4096, stream(1));
  free(a, stream(1));
  EXPECT_EQ(alloc(4096, stream(1)), a) << "stream order makes the reuse safe";
  EXPECT_EQ(port.queries.load(), 0) << "no event is needed for it";
  EXPECT_EQ(arena.chunks(), 1u);
  // Big blocks too (a chunk of their own).
  const CUdeviceptr big = alloc(32 * kMiB, stream(1));
  free(big, stream(1));
  EXPECT_EQ(alloc(32 * kMiB, stream(1)), big);
  EXPECT_EQ(arena.chunks(), 2u);
  expect_books_exact();
}

TEST_F(AsyncArenaTest, AnotherStreamReusesABlockOnlyAfterTheEventOfItsFreeCompleted) {
  const CUdeviceptr a = alloc(8 * kMiB, stream(1));
  free(a, stream(1));  // work queued on stream 1 before the free has not run
  const CUdeviceptr b = alloc(8 * kMiB, stream(2));
  EXPECT_NE(b, a) << "stream 2 must not get memory stream 1 may still use";
  EXPECT_GE(port.queries.load(), 1);
  port.complete(stream(1));
  EXPECT_EQ(alloc(8 * kMiB, stream(3)), a) << "once its event completed, any stream may";
  EXPECT_EQ(arena.pending_blocks(), 0u);
  expect_books_exact();
}

TEST_F(AsyncArenaTest, ASmallRequestDoesNotTakeABigBlockPendingOnItsStream) {
  const CUdeviceptr big = alloc(64 * kMiB, stream(1));
  free(big, stream(1));
  const CUdeviceptr small = alloc(4096, stream(1));
  EXPECT_NE(small, big);
  port.complete(stream(1));
  EXPECT_EQ(alloc(64 * kMiB, stream(2)), big);
}

TEST_F(AsyncArenaTest, PollingIsBoundedPerAllocation) {
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 40; ++i) blocks.push_back(alloc(kMiB, stream(1)));  // no free remainder
  for (CUdeviceptr p : blocks) free(p, stream(1));
  const int before = port.queries.load();
  alloc(kMiB, stream(2));
  EXPECT_LE(port.queries.load() - before, static_cast<int>(AsyncArena::kPollBudget));
  EXPECT_GE(port.queries.load() - before, 1);
}

TEST_F(AsyncArenaTest, PerThreadDefaultStreamsAreDifferentStreams) {
  const StreamKey mine = stream_key(nullptr, true);
  EXPECT_EQ(stream_key(CU_STREAM_PER_THREAD, false), mine);
  StreamKey other = 0;
  std::thread([&] { other = stream_key(nullptr, true); }).join();
  EXPECT_NE(other, mine);
  EXPECT_EQ(stream_key(nullptr, false), stream_key(CU_STREAM_LEGACY, true)) << "the legacy stream";
  EXPECT_NE(stream_key(nullptr, false), mine);

  // A block freed on this thread's per-thread stream is not another thread's to reuse at once.
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(arena.allocate(kDevice, &a, 8 * kMiB, mine, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(arena.free_async(a, mine, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  std::thread([&] {
    arena.allocate(kDevice, &b, 8 * kMiB, stream_key(nullptr, true), CU_STREAM_PER_THREAD);
  }).join();
  EXPECT_NE(b, a);
}

TEST_F(AsyncArenaTest, TrimReturnsIdleChunksOnlyOnceTheirEventsCompleted) {
  const CUdeviceptr a = alloc(8 * kMiB, stream(1));
  const CUdeviceptr b = alloc(8 * kMiB, stream(2));
  const CUdeviceptr small = alloc(4096, stream(1));
  free(a, stream(1));
  free(b, stream(2));
  free(small, stream(1));
  port.complete(stream(1));
  EXPECT_EQ(arena.trim(0, 0), 8 * kMiB + 2 * kMiB) << "stream 2 has not reached its free";
  EXPECT_EQ(port.charged(), 8 * kMiB);
  port.complete(stream(2));
  EXPECT_EQ(arena.trim(0, 0), 8 * kMiB);
  EXPECT_EQ(port.charged(), 0u);
  EXPECT_EQ(arena.chunks(), 0u);
  expect_books_exact();
}

TEST_F(AsyncArenaTest, TrimKeepsWhatItIsAskedToKeepAndNeverALiveChunk) {
  const CUdeviceptr a = alloc(8 * kMiB, stream(1));
  const CUdeviceptr b = alloc(4 * kMiB, stream(1));
  alloc(4 * kMiB, stream(1));  // stays live
  free(a, stream(1));
  free(b, stream(1));
  port.complete_all();
  EXPECT_EQ(arena.trim(0, 4 * kMiB), 8 * kMiB) << "the largest idle chunk goes first";
  EXPECT_EQ(arena.trim(0, 0), 4 * kMiB);
  EXPECT_EQ(arena.chunk_bytes(0), 4 * kMiB);
  expect_books_exact();
}

TEST_F(AsyncArenaTest, FreedNeighboursMergeSoThatTheirChunkBecomesIdle) {
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(alloc(512 * 1024, stream(1)));
  EXPECT_EQ(arena.chunks(), 1u) << "small blocks share a 2 MiB chunk";
  for (CUdeviceptr p : {blocks[2], blocks[0], blocks[3], blocks[1]}) free(p, stream(1));
  port.complete_all();
  EXPECT_EQ(arena.trim(0, 0), 2 * kMiB);
  EXPECT_EQ(port.charged(), 0u);
}

TEST_F(AsyncArenaTest, ChargesAreExactlyTheChunksAndLiveBytesTheRoundedBlocks) {
  alloc(1, stream(1));
  alloc(513, stream(1));
  alloc(3 * kMiB + 1, stream(1));
  EXPECT_EQ(arena.live_bytes(0), 512u + 1024u + 3 * kMiB + 512);
  EXPECT_EQ(arena.chunk_bytes(0), 2 * kMiB + 4 * kMiB) << "a shared chunk and a rounded own one";
  expect_books_exact();
}

TEST_F(AsyncArenaTest, SizesAtTheEdges) {
  FakePort capped(1024 * kMiB);
  AsyncArena edge(capped);
  CUdeviceptr p = 0;
  EXPECT_FALSE(edge.allocate(kDevice, &p, 0, 1, stream(1)).has_value())
      << "size 0: the driver's answer (CUDA_ERROR_INVALID_VALUE)";
  EXPECT_FALSE(edge.allocate(kDevice, nullptr, 4096, 1, stream(1)).has_value());
  EXPECT_EQ(edge.allocate(kDevice, &p, 1ull << 40, 1, stream(1)), CUDA_ERROR_OUT_OF_MEMORY)
      << "beyond the cap";
  EXPECT_EQ(edge.allocate(kDevice, &p, SIZE_MAX, 1, stream(1)), CUDA_ERROR_OUT_OF_MEMORY)
      << "no overflow in the rounding";
  EXPECT_EQ(capped.charged(), 0u);
  EXPECT_EQ(edge.allocate(kDevice, &p, 1024 * kMiB, 1, stream(1)), CUDA_SUCCESS) << "the cap";
  EXPECT_EQ(capped.charged(), 1024 * kMiB);
  EXPECT_EQ(edge.allocate(kDevice, &p, 1, 1, stream(1)), CUDA_ERROR_OUT_OF_MEMORY)
      << "nothing left";
  EXPECT_EQ(edge.chunk_bytes(0), 1024 * kMiB);
}

TEST_F(AsyncArenaTest, OutOfMemoryReturnsIdleChunksAndTriesAgain) {
  FakePort small_port(16 * kMiB);
  AsyncArena small(small_port);
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(small.allocate(kDevice, &a, 8 * kMiB, 1, stream(1)), CUDA_SUCCESS);
  ASSERT_EQ(small.allocate(kDevice, &b, 8 * kMiB, 1, stream(1)), CUDA_SUCCESS);
  ASSERT_EQ(small.free_async(a, 1, stream(1)), CUDA_SUCCESS);
  ASSERT_EQ(small.free_async(b, 1, stream(1)), CUDA_SUCCESS);
  small_port.complete_all();
  EXPECT_EQ(small.allocate(kDevice, &c, 16 * kMiB, 2, stream(2)), CUDA_SUCCESS);
  EXPECT_EQ(small_port.charged(), 16 * kMiB);
  EXPECT_EQ(small.chunk_bytes(0), 16 * kMiB);
  EXPECT_EQ(small.allocate(kDevice, &c, 4096, 2, stream(2)), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(AsyncArenaTest, TheLastSizeInASharedChunkAndTheFirstWithItsOwn) {
  alloc(AsyncArena::kSmallLimit, stream(1));
  alloc(AsyncArena::kSmallLimit, stream(1));
  EXPECT_EQ(arena.chunks(), 1u);
  alloc(AsyncArena::kSmallLimit + 1, stream(1));
  EXPECT_EQ(arena.chunks(), 2u);
  EXPECT_EQ(arena.chunk_bytes(0), 4 * kMiB);
}

TEST_F(AsyncArenaTest, MemoryThatCannotBeBackedGoesToTheDriver) {
  port.backs = false;
  CUdeviceptr p = 0;
  EXPECT_FALSE(arena.allocate(kDevice, &p, 4096, 1, stream(1)).has_value());
  FakePort no_vmm(1024 * kMiB);
  no_vmm.granule = 0;
  AsyncArena other(no_vmm);
  EXPECT_FALSE(other.allocate(kDevice, &p, 4096, 1, stream(1)).has_value());
}

TEST_F(AsyncArenaTest, FreesOfOtherPointersAreTheDriversAndASecondFreeIsRefused) {
  EXPECT_FALSE(arena.free_async(0x1234, 1, stream(1)).has_value());
  EXPECT_FALSE(arena.free_sync(0x1234).has_value());
  const CUdeviceptr a = alloc(4096, stream(1));
  EXPECT_FALSE(arena.free_async(a + 512, 1, stream(1)).has_value()) << "not a block's start";
  free(a, stream(1));
  EXPECT_EQ(arena.free_async(a, stream_key(stream(1), false), stream(1)), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(AsyncArenaTest, ASynchronousFreeWaitsForTheContextAndFreesForEveryStream) {
  const CUdeviceptr a = alloc(8 * kMiB, stream(1));
  EXPECT_EQ(arena.free_sync(a), CUDA_SUCCESS);
  EXPECT_EQ(port.syncs.load(), 1);
  EXPECT_EQ(alloc(8 * kMiB, stream(2)), a);
}

TEST_F(AsyncArenaTest, AFreeCapturedIntoAGraphHoldsTheBlock) {
  const CUdeviceptr a = alloc(8 * kMiB, stream(1));
  EXPECT_EQ(arena.free_captured(a), CUDA_SUCCESS);
  port.complete_all();
  EXPECT_NE(alloc(8 * kMiB, stream(1)), a);
  EXPECT_EQ(arena.trim(0, 0), 0u) << "its chunk is not idle";
  expect_books_exact();
}

TEST_F(AsyncArenaTest, EventsAreReusedNotCreatedPerFree) {
  for (int i = 0; i < 200; ++i) {
    const CUdeviceptr a = alloc(4096, stream(1));
    free(a, stream(1));
  }
  EXPECT_LE(port.created.load(), 2) << "a block reused on its stream gives its event back";
}

TEST_F(AsyncArenaTest, AForkedChildForgetsEverything) {
  alloc(4096, stream(1));
  arena.after_fork_in_child();
  EXPECT_EQ(arena.chunks(), 0u);
  EXPECT_EQ(arena.live_bytes(0), 0u);
  EXPECT_EQ(arena.chunk_bytes(0), 0u);
}

// Many threads, each on its own stream, racing allocations and frees: live blocks never
// overlap, memory freed on one stream goes to another only after that stream's work before
// the free has run (its events completed), and the books come out exact.
TEST_F(AsyncArenaTest, ManyThreadsNeverShareMemoryOutOfStreamOrder) {
  struct Freed {
    uint64_t size;
    int stream;
  };
  std::mutex shadow_mutex;
  std::map<CUdeviceptr, uint64_t> live;  // start -> rounded size
  std::map<CUdeviceptr, Freed> freed;    // freed on a stream that has not run to the free yet
  std::atomic<int> overlaps{0}, early_reuses{0}, failures{0};
  auto claim = [&](CUdeviceptr p, uint64_t size, int stream_no) {
    std::lock_guard<std::mutex> lock(shadow_mutex);
    auto next = live.lower_bound(p);
    if (next != live.end() && next->first < p + size) ++overlaps;
    if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > p) ++overlaps;
    live[p] = size;
    for (auto it = freed.begin(); it != freed.end();) {
      if (it->first < p + size && p < it->first + it->second.size) {
        if (it->second.stream != stream_no) ++early_reuses;
        it = freed.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto release = [&](CUdeviceptr p, int stream_no) {
    std::lock_guard<std::mutex> lock(shadow_mutex);
    freed[p] = Freed{live[p], stream_no};
    live.erase(p);
  };
  auto completed = [&](int stream_no) {
    std::lock_guard<std::mutex> lock(shadow_mutex);
    for (auto it = freed.begin(); it != freed.end();)
      it = it->second.stream == stream_no ? freed.erase(it) : std::next(it);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      const CUstream s = stream(static_cast<uintptr_t>(t + 1));
      const StreamKey key = stream_key(s, false);
      std::vector<CUdeviceptr> mine;
      for (int i = 0; i < 1500; ++i) {
        if (mine.size() < 16 && rng() % 3 != 0) {
          const uint64_t size = rng() % 4 == 0 ? (rng() % 6 + 1) * kMiB : (rng() % 64 + 1) * 1024;
          CUdeviceptr p = 0;
          if (arena.allocate(kDevice, &p, size, key, s) != CUDA_SUCCESS) {
            ++failures;
            continue;
          }
          claim(p, (size + 511) / 512 * 512, t);
          mine.push_back(p);
        } else if (!mine.empty()) {
          const std::size_t at = rng() % mine.size();
          release(mine[at], t);
          if (arena.free_async(mine[at], key, s) != CUDA_SUCCESS) ++failures;
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(at));
        }
        if (i % 50 == 0) {
          completed(t);  // the books first: the arena may hand the memory out right after
          port.complete(s);
        }
      }
      for (CUdeviceptr p : mine) {
        release(p, t);
        arena.free_async(p, key, s);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(early_reuses.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(arena.live_bytes(0), 0u);
  expect_books_exact();
  port.complete_all();
  arena.trim(0, 0);
  EXPECT_EQ(port.charged(), 0u);
  EXPECT_EQ(arena.chunks(), 0u);
}

}  // namespace
}  // namespace fracgpu
