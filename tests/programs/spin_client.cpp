// fracgpu-spin-client: a compute-bound tenant process for the compute-share tests, the
// demo and benchmarks. It launches `fracgpu_fake_spin` kernels of --kernel-us
// microseconds back to back through the driver API (cuLaunchKernel, so the shim's launch
// gate applies), synchronising the stream every --stream-sync-every launches so that
// work queues like under a real framework, but never unboundedly. It stops after
// --seconds, or at SIGTERM/SIGINT (finishing the launches in flight), and prints
// nothing unless --report is given.
//
// Latency mode (--think-us): the client behaves like a request-serving tenant. A request
// is --stream-sync-every launches followed by cuStreamSynchronize; its latency runs from
// the first launch call to the sync's return (gate wait included). Between requests the
// host "thinks" (sleeps) as --arrivals says: `regular` sleeps --think-us after each
// request; `poisson` sleeps an exponentially distributed time of mean --think-us (capped
// at 100 means; drawn from a generator seeded with --seed, so a run is repeatable), i.e.
// requests arrive as a Poisson process while the last one is not pending; `burst` issues
// --burst-size requests back to back, then sleeps --think-us. The report then also
// carries percentiles of the request latency in microseconds, over requests that started
// after --warmup-ms.
//
//   fracgpu-spin-client [--kernel-us N] [--seconds S] [--report FILE|-]
//                       [--stream-sync-every K] [--stream legacy|created]
//                       [--think-us T] [--warmup-ms W] [--device N] [--blocks B]
//                       [--arrivals regular|poisson|burst] [--seed S] [--burst-size N]
//
//   --kernel-us N           kernel length in microseconds, 1..10000000 (default 1000)
//   --seconds S             run time in seconds, > 0 (default 10)
//   --report FILE           at the end, write one JSON line {"kernels":N,"seconds":S}
//                           (S: wall time from the first launch to the last completion;
//                           "-" = stdout)
//   --stream-sync-every K   cuStreamSynchronize after every K launches, 1..100000 (default 8)
//   --stream legacy|created the legacy default stream (default) or a cuStreamCreate'd one
//   --think-us T            latency mode: the think time T in microseconds (0..10000000)
//                           after a request (a mean for poisson, after each burst for
//                           burst); the report adds "requests" (counted) and
//                           "latency_us":{"p50","p90","p99","p999","max","mean"}
//   --device N              the device ordinal to run on, 0..63 (default 0)
//   --blocks B              blocks per launch, 1..65535 (default 1). The simulated GPU's
//                           MPS clients share its SMs by blocks (132 = the whole device);
//                           on a real GPU each block spins --kernel-us, so B above the SM
//                           count makes a launch take several times longer there
//   --warmup-ms W           latency mode: requests starting in the first W ms (0..600000,
//                           default 0) run but are not counted
//   --arrivals A            latency mode: how requests follow each other (default regular,
//                           see above); the report adds "arrivals":A
//   --seed S                poisson: the generator's seed, 0..2^32-1 (default 1)
//   --burst-size N          burst: requests per burst, 1..10000 (default 4)
//
// The module is the PTX below: the simulated driver accepts any image and resolves the
// name to its own spin kernel; a real driver JIT-compiles it, and the kernel busy-waits
// on %globaltimer, so the same binary also loads a real GPU for the given time.
// Errors: one line on stderr, exit 1; bad arguments: exit 2.
#include <cuda.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char* kSpinPtx = R"(
.version 6.0
.target sm_50
.address_size 64
.visible .entry fracgpu_fake_spin(.param .u32 fracgpu_fake_spin_param_0)
{
  .reg .pred %p;
  .reg .b32 %r<2>;
  .reg .b64 %rd<6>;
  ld.param.u32 %r1, [fracgpu_fake_spin_param_0];
  cvt.u64.u32 %rd1, %r1;
  mul.lo.u64 %rd2, %rd1, 1000;
  mov.u64 %rd3, %globaltimer;
$L_spin:
  mov.u64 %rd4, %globaltimer;
  sub.u64 %rd5, %rd4, %rd3;
  setp.lt.u64 %p, %rd5, %rd2;
  @%p bra $L_spin;
  ret;
}
)";

enum class Arrivals { kRegular, kPoisson, kBurst };

const char* arrivals_name(Arrivals a) {
  switch (a) {
    case Arrivals::kPoisson:
      return "poisson";
    case Arrivals::kBurst:
      return "burst";
    case Arrivals::kRegular:
      break;
  }
  return "regular";
}

struct Options {
  uint32_t kernel_us = 1000;
  double seconds = 10;
  std::string report;
  unsigned long sync_every = 8;
  bool created_stream = false;
  bool latency_mode = false;
  unsigned long think_us = 0;
  unsigned long warmup_ms = 0;
  int device = 0;
  unsigned blocks = 1;
  Arrivals arrivals = Arrivals::kRegular;
  uint32_t seed = 1;
  unsigned long burst_size = 4;
};

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop.store(true);
}

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "fracgpu-spin-client: %s\n"
               "usage: fracgpu-spin-client [--kernel-us N] [--seconds S] [--report FILE|-] "
               "[--stream-sync-every K] [--stream legacy|created] [--think-us T] [--warmup-ms W] "
               "[--device N] [--blocks B] [--arrivals regular|poisson|burst] [--seed S] "
               "[--burst-size N]\n",
               problem.c_str());
  std::exit(2);
}

bool parse_unsigned(const char* text, unsigned long lo, unsigned long hi, unsigned long* out) {
  if (*text == '\0' || std::strchr(text, '-') != nullptr) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(a + " needs a value");
    const char* v = argv[++i];
    unsigned long n = 0;
    if (a == "--kernel-us") {
      if (!parse_unsigned(v, 1, 10'000'000, &n)) usage("--kernel-us must be 1..10000000");
      o.kernel_us = static_cast<uint32_t>(n);
    } else if (a == "--blocks") {
      if (!parse_unsigned(v, 1, 65535, &n)) usage("--blocks must be 1..65535");
      o.blocks = static_cast<unsigned>(n);
    } else if (a == "--device") {
      if (!parse_unsigned(v, 0, 63, &n)) usage("--device must be 0..63");
      o.device = static_cast<int>(n);
    } else if (a == "--seconds") {
      char* end = nullptr;
      o.seconds = std::strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !std::isfinite(o.seconds) || o.seconds <= 0 ||
          o.seconds > 1e6) {
        usage("--seconds must be a number of seconds above 0");
      }
    } else if (a == "--report") {
      o.report = v;
    } else if (a == "--stream-sync-every") {
      if (!parse_unsigned(v, 1, 100'000, &n)) usage("--stream-sync-every must be 1..100000");
      o.sync_every = n;
    } else if (a == "--think-us") {
      if (!parse_unsigned(v, 0, 10'000'000, &n)) usage("--think-us must be 0..10000000");
      o.think_us = n;
      o.latency_mode = true;
    } else if (a == "--warmup-ms") {
      if (!parse_unsigned(v, 0, 600'000, &n)) usage("--warmup-ms must be 0..600000");
      o.warmup_ms = n;
    } else if (a == "--arrivals") {
      if (std::strcmp(v, "regular") == 0)
        o.arrivals = Arrivals::kRegular;
      else if (std::strcmp(v, "poisson") == 0)
        o.arrivals = Arrivals::kPoisson;
      else if (std::strcmp(v, "burst") == 0)
        o.arrivals = Arrivals::kBurst;
      else
        usage("--arrivals must be regular, poisson or burst");
    } else if (a == "--seed") {
      if (!parse_unsigned(v, 0, UINT32_MAX, &n)) usage("--seed must be 0..4294967295");
      o.seed = static_cast<uint32_t>(n);
    } else if (a == "--burst-size") {
      if (!parse_unsigned(v, 1, 10'000, &n)) usage("--burst-size must be 1..10000");
      o.burst_size = n;
    } else if (a == "--stream") {
      if (std::strcmp(v, "legacy") == 0)
        o.created_stream = false;
      else if (std::strcmp(v, "created") == 0)
        o.created_stream = true;
      else
        usage("--stream must be legacy or created");
    } else {
      usage("unknown argument " + a);
    }
  }
  return o;
}

[[noreturn]] void die(const char* what, CUresult rc) {
  const char* name = "?";
  cuGetErrorName(rc, &name);
  std::fprintf(stderr, "fracgpu-spin-client: %s failed: %s\n", what, name);
  std::exit(1);
}

#define CHECK(call)                           \
  do {                                        \
    CUresult rc_ = (call);                    \
    if (rc_ != CUDA_SUCCESS) die(#call, rc_); \
  } while (0)

// The host's pause after each request, as --arrivals says (microseconds, 0 = none).
class ThinkTime {
 public:
  explicit ThinkTime(const Options& o)
      : o_(o), random_(o.seed), gap_(1.0 / static_cast<double>(std::max(o.think_us, 1ul))) {}

  unsigned long next_us() {
    switch (o_.arrivals) {
      case Arrivals::kPoisson:
        // Capped at 100 means: a rare huge draw would otherwise stall a short run.
        return o_.think_us == 0 ? 0
                                : static_cast<unsigned long>(std::min(
                                      gap_(random_), 100.0 * static_cast<double>(o_.think_us)));
      case Arrivals::kBurst:
        if (++in_burst_ < o_.burst_size) return 0;
        in_burst_ = 0;
        return o_.think_us;
      case Arrivals::kRegular:
        break;
    }
    return o_.think_us;
  }

 private:
  const Options& o_;
  std::mt19937_64 random_;
  std::exponential_distribution<double> gap_;  // rate 1/think_us: mean think_us
  unsigned long in_burst_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  CUfunction spin = nullptr;
  CUstream stream = nullptr;  // legacy default stream
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, o.device));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuModuleLoadData(&module, kSpinPtx));
  CHECK(cuModuleGetFunction(&spin, module, "fracgpu_fake_spin"));
  if (o.created_stream) CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  uint32_t us = o.kernel_us;
  void* params[] = {&us};
  unsigned long long kernels = 0;
  unsigned long since_sync = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(o.seconds));
  std::vector<uint32_t> latencies_us;  // latency mode: one per counted request
  const auto warmup_end = start + std::chrono::milliseconds(o.warmup_ms);
  ThinkTime think(o);
  while (!g_stop.load() && std::chrono::steady_clock::now() < end) {
    if (o.latency_mode) {
      const auto request_start = std::chrono::steady_clock::now();
      for (unsigned long i = 0; i < o.sync_every; ++i) {
        CHECK(cuLaunchKernel(spin, o.blocks, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
        ++kernels;
      }
      CHECK(cuStreamSynchronize(stream));
      const auto done = std::chrono::steady_clock::now();
      if (request_start >= warmup_end) {
        const auto took_us =
            std::chrono::duration_cast<std::chrono::microseconds>(done - request_start).count();
        latencies_us.push_back(static_cast<uint32_t>(std::min<int64_t>(took_us, UINT32_MAX)));
      }
      const unsigned long pause_us = think.next_us();
      if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
      continue;
    }
    CHECK(cuLaunchKernel(spin, o.blocks, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    ++kernels;
    if (++since_sync >= o.sync_every) {
      CHECK(cuStreamSynchronize(stream));
      since_sync = 0;
    }
  }
  CHECK(cuStreamSynchronize(stream));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (stream != nullptr) CHECK(cuStreamDestroy(stream));
  CHECK(cuModuleUnload(module));
  CHECK(cuDevicePrimaryCtxRelease(dev));

  if (!o.report.empty()) {
    FILE* out = o.report == "-" ? stdout : std::fopen(o.report.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "fracgpu-spin-client: cannot write %s: %s\n", o.report.c_str(),
                   std::strerror(errno));
      return 1;
    }
    if (o.latency_mode) {
      std::sort(latencies_us.begin(), latencies_us.end());
      // Nearest-rank percentile: the smallest latency that at least p of the requests had.
      auto pct = [&](double p) -> unsigned long {
        if (latencies_us.empty()) return 0;
        const auto rank =
            static_cast<std::size_t>(std::ceil(p * static_cast<double>(latencies_us.size())));
        return latencies_us[std::min(latencies_us.size(), std::max<std::size_t>(rank, 1)) - 1];
      };
      double sum = 0;
      for (uint32_t v : latencies_us) sum += v;
      const double mean = latencies_us.empty() ? 0 : sum / static_cast<double>(latencies_us.size());
      std::fprintf(out,
                   "{\"kernels\":%llu,\"seconds\":%.6f,\"requests\":%zu,\"arrivals\":\"%s\","
                   "\"latency_us\":{\"p50\":%lu,\"p90\":%lu,\"p99\":%lu,\"p999\":%lu,\"max\":%lu,"
                   "\"mean\":%.1f}}\n",
                   kernels, elapsed, latencies_us.size(), arrivals_name(o.arrivals), pct(0.50),
                   pct(0.90), pct(0.99), pct(0.999), pct(1.0), mean);
    } else {
      std::fprintf(out, "{\"kernels\":%llu,\"seconds\":%.6f}\n", kernels, elapsed);
    }
    if (out != stdout) std::fclose(out);
  }
  return 0;
}
