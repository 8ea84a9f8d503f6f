// The histograms of core/launch_profile.h (built only with FRACGPU_LAUNCH_PROFILE=ON): per
// piece of the cuLaunchKernel hook path, a 1-cycle-bin histogram of TSC cycles, written at
// exit as JSON (count, mean, p10/p50/p90 in cycles, and the TSC rate to turn them into ns).
// A profiling build only: the counters are relaxed load+store (a launch loop has one
// thread; a lost count between threads changes nothing measured here).
#include "core/launch_profile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#ifndef FRACGPU_LAUNCH_PROFILE_DIR
#define FRACGPU_LAUNCH_PROFILE_DIR "/tmp/fracgpu-launch-profile"
#endif

namespace fracgpu::launch_profile {

thread_local Marks t_marks __attribute__((tls_model("initial-exec"))) = {};

namespace {

constexpr int kBins = 32768;     // 1 cycle each: ~10 us at 3 GHz; longer calls land in the last
constexpr int kPieces = kMarks;  // piece 0: the whole call; piece i: from the previous mark to i
const char* const kNames[kPieces] = {"total",  "prologue",    "tenant",       "gate",  "section_in",
                                     "driver", "section_out", "after_launch", "return"};

struct Histogram {
  std::atomic<uint64_t> n{0};
  std::atomic<uint64_t> sum{0};
  std::atomic<uint64_t> bins[kBins] = {};
};
Histogram g_hist[kPieces];
std::atomic<uint64_t> g_first_tsc{0};
std::atomic<int64_t> g_first_ns{0};

int64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void add(Histogram& h, uint64_t cycles) noexcept {
  const int bin = cycles >= kBins ? kBins - 1 : static_cast<int>(cycles);
  h.n.store(h.n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  h.sum.store(h.sum.load(std::memory_order_relaxed) + cycles, std::memory_order_relaxed);
  h.bins[bin].store(h.bins[bin].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

double percentile(const Histogram& h, double q) noexcept {
  const uint64_t n = h.n.load(std::memory_order_relaxed);
  if (n == 0) return -1;
  const auto want = static_cast<uint64_t>(q * static_cast<double>(n - 1));
  uint64_t seen = 0;
  for (int i = 0; i < kBins; ++i) {
    seen += h.bins[i].load(std::memory_order_relaxed);
    if (seen > want) return i;
  }
  return kBins - 1;
}

// The smallest back-to-back rdtsc difference: what one mark adds to a piece.
uint64_t rdtsc_cost() noexcept {
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t a = __rdtsc();
    const uint64_t b = __rdtsc();
    if (b - a < best) best = b - a;
  }
  return best;
}

}  // namespace

void end() noexcept {
  uint64_t* tsc = t_marks.tsc;
  tsc[kExit] = __rdtsc();
  if (g_first_tsc.load(std::memory_order_relaxed) == 0) {
    g_first_ns.store(now_ns(), std::memory_order_relaxed);
    g_first_tsc.store(__rdtsc(), std::memory_order_relaxed);
  }
  add(g_hist[0], tsc[kExit] - tsc[kEntry]);
  int prev = kEntry;
  for (int m = kBody; m < kMarks; ++m) {
    if (tsc[m] == 0) continue;
    add(g_hist[m], tsc[m] - tsc[prev]);
    prev = m;
  }
  for (int m = 0; m < kMarks; ++m) tsc[m] = 0;
  t_marks.active = false;
}

}  // namespace fracgpu::launch_profile

// Written when the process exits normally, if the directory exists.
__attribute__((destructor)) static void fracgpu_write_launch_profile() {
  using namespace fracgpu::launch_profile;
  const uint64_t calls = g_hist[0].n.load(std::memory_order_relaxed);
  if (calls == 0) return;
  struct stat st {};
  if (stat(FRACGPU_LAUNCH_PROFILE_DIR, &st) != 0 || !S_ISDIR(st.st_mode)) return;
  const double ns = static_cast<double>(now_ns() - g_first_ns.load(std::memory_order_relaxed));
  const double cycles =
      static_cast<double>(__rdtsc() - g_first_tsc.load(std::memory_order_relaxed));
  const double ghz = ns > 0 ? cycles / ns : 0;
  char path[256];
  std::snprintf(path, sizeof path, "%s/launch-%d.json", FRACGPU_LAUNCH_PROFILE_DIR,
                static_cast<int>(getpid()));
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return;
  std::fprintf(f, "{\"pid\":%d,\"tsc_ghz\":%.6f,\"rdtsc_cycles\":%llu,\"calls\":%llu,\"pieces\":{",
               static_cast<int>(getpid()), ghz, static_cast<unsigned long long>(rdtsc_cost()),
               static_cast<unsigned long long>(calls));
  for (int p = 0; p < kPieces; ++p) {
    const Histogram& h = g_hist[p];
    const uint64_t n = h.n.load(std::memory_order_relaxed);
    std::fprintf(
        f, "%s\"%s\":{\"n\":%llu,\"mean\":%.3f,\"p10\":%.0f,\"p50\":%.0f,\"p90\":%.0f}",
        p ? "," : "", kNames[p], static_cast<unsigned long long>(n),
        n ? static_cast<double>(h.sum.load(std::memory_order_relaxed)) / static_cast<double>(n)
          : 0.0,
        percentile(h, 0.1), percentile(h, 0.5), percentile(h, 0.9));
  }
  std::fprintf(f, "}}\n");
  std::fclose(f);
}
