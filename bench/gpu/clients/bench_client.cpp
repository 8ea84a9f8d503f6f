// fracgpu-bench-client: the driver-API workloads of the benchmark suite (bench/gpu/run.sh).
// One binary runs every workload kind that needs no framework, on the simulated GPU (CI) and
// on a real NVIDIA GPU alike (client.cpp: the dlopen'ed driver and the PTX kernels).
//
//   fracgpu-bench-client MODE [--seconds S] [--kernel-us N] [--sync-every K] [--bytes B]
//       [--count N] [--reps R] [--graph-kernels G] [--period-ms P] [--think-us T]
//       [--arrival regular|poisson] [--requests N] [--warmup-ms W] [--blocks N] [--seed N]
//       [--barrier FILE] [--ready FILE] [--stop-file FILE] [--out FILE] [--tag TEXT]
//       [--serve DIR [--idle-s S]]
//
// MODE: launch (empty-kernel launch rate: --count launches then one sync, --reps times),
// launchtime (the host time of each such cuLaunchKernel call, shallow and deep queue),
// alloc (cuMemAlloc+cuMemFree pairs of --bytes, --count per rep), spin (compute-bound:
// --kernel-us kernels back to back), copy (memory-bound: --bytes device-to-device copies),
// mixed (a "training step": spin kernel + copy + spin), graph (a captured graph of
// --graph-kernels spin kernels, replayed), onoff (spin, on for --period-ms then off as long),
// latency (latency.cpp: requests of one kernel + sync, regular or Poisson arrivals), mem
// (cuMemGetInfo, first-allocation latency, fill in --bytes chunks until out of memory).
// Throughput modes record samples [t, units] (t: seconds since t_start, wall clock) at each
// sync so that the harness can cut any common window; "unit" is one kernel / copy / step /
// replay. The result is ONE JSON line ({"ok": ...}) on --out (atomically) or stdout.
//
// --serve DIR makes a warm worker (every mode but mem): it sets up once (context, module,
// buffers, graph), warms up, touches --ready, then measures once per round. Round N starts
// when DIR/go.N appears (written atomically by the harness); that file holds the round's
// options ("--seconds 2 --out F --stop-file S ..."), applied over the command line's, and the
// result goes to the round's --out (serve_round: a round may switch the mode, and wait at a
// --barrier once warm). It ends at DIR/quit, SIGTERM, or --idle-s without a round.
// Waiting costs nothing: inotify on DIR (a 1 ms poll where inotify is missing).
// Hot path: one cuLaunchKernel (or copy) per unit and a sync per --sync-every; nothing else.
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "client.h"

namespace fgbench {
namespace {

void run_launch(const Options& o, const Gpu& g) {
  std::vector<double> ns;
  for (unsigned long long i = 0; i < o.count / 10 + 1; ++i)
    check(d.LaunchKernel(g.empty, 1, 1, 1, 1, 1, 1, 0, g.stream, nullptr, nullptr), "launch");
  sync(g);
  for (unsigned long long r = 0; r < o.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned long long i = 0; i < o.count; ++i)
      check(d.LaunchKernel(g.empty, 1, 1, 1, 1, 1, 1, 0, g.stream, nullptr, nullptr), "launch");
    sync(g);
    ns.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(o.count));
  }
  emit(o, head(g, "launch") + ",\"value\":" + std::to_string(median(ns)) +
              ",\"value_unit\":\"ns_per_launch\",\"reps\":" + list(ns, 2));
}

// launchtime: the host time of each cuLaunchKernel call of an empty kernel, read around the
// call (steady_clock, a vDSO read: ~20 ns, the same in every way compared). Two passes of
// --count launches: "shallow" synchronises every --sync-every launches (the queue never fills,
// so a call's time is the driver's and the shim's host path alone) and "deep" once at the end
// (as the launch mode: once the queue is full a call waits for the GPU; calls over 20 us are
// counted as stalls, where the time goes when the host path is not the cause). --reps times,
// the median rep of each figure reported.
std::string call_stats(const char* prefix, std::vector<double> ns, double wall_ns) {
  double sum = 0, stall = 0;
  unsigned long long stalls = 0;
  for (double v : ns) {
    sum += v;
    if (v > 20000) {
      stall += v;
      ++stalls;
    }
  }
  const double n = static_cast<double>(ns.size());
  std::sort(ns.begin(), ns.end());
  const std::string p = prefix;
  return ",\"" + p + "p50_ns\":" + std::to_string(pct(ns, 0.5)) + ",\"" + p +
         "p90_ns\":" + std::to_string(pct(ns, 0.9)) + ",\"" + p +
         "p99_ns\":" + std::to_string(pct(ns, 0.99)) + ",\"" + p +
         "p999_ns\":" + std::to_string(pct(ns, 0.999)) + ",\"" + p +
         "mean_ns\":" + std::to_string(sum / n) + ",\"" + p + "stalls\":" + std::to_string(stalls) +
         ",\"" + p + "stall_ns_per_launch\":" + std::to_string(stall / n) + ",\"" + p +
         "wall_ns_per_launch\":" + std::to_string(wall_ns / n);
}

void run_launchtime(const Options& o, const Gpu& g) {
  using clock = std::chrono::steady_clock;
  const unsigned long long n = o.count;
  if (n == 0) fail(o, "launchtime needs --count > 0");
  std::vector<double> call(n);
  auto pass = [&](unsigned every, const char* prefix) {
    const auto t0 = clock::now();
    for (unsigned long long i = 0; i < n; ++i) {
      const auto a = clock::now();
      check(d.LaunchKernel(g.empty, 1, 1, 1, 1, 1, 1, 0, g.stream, nullptr, nullptr), "launch");
      call[i] = std::chrono::duration<double, std::nano>(clock::now() - a).count();
      if (every > 0 && (i + 1) % every == 0) sync(g);
    }
    sync(g);
    return call_stats(prefix, call,
                      std::chrono::duration<double, std::nano>(clock::now() - t0).count());
  };
  pass(o.sync_every, "warm_");  // first launches, the tenant's first grant, the limiter's estimate
  std::string body;
  for (unsigned long long r = 0; r < std::max(1ULL, o.reps); ++r)
    body += (r ? "," : "") + std::string("{") + pass(o.sync_every, "shallow_").substr(1) +
            pass(0, "deep_") + "}";
  emit(o, head(g, "launchtime") + ",\"count\":" + std::to_string(n) +
              ",\"sync_every\":" + std::to_string(o.sync_every) + ",\"passes\":[" + body + "]");
}

void run_alloc(const Options& o, const Gpu& g) {
  std::vector<double> us;
  for (unsigned long long r = 0; r < o.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned long long i = 0; i < o.count; ++i) {
      CUdeviceptr p = 0;
      check(d.MemAlloc(&p, o.bytes), "cuMemAlloc");
      check(d.MemFree(p), "cuMemFree");
    }
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(o.count));
  }
  emit(o, head(g, "pair") + ",\"value\":" + std::to_string(median(us)) +
              ",\"value_unit\":\"us_per_pair\",\"reps\":" + list(us, 3));
}

void run_mem(const Options& o, const Gpu& g) {
  size_t free0 = 0, total = 0;
  check(d.MemGetInfo(&free0, &total), "cuMemGetInfo");
  CUdeviceptr first = 0;
  const auto t0 = std::chrono::steady_clock::now();
  check(d.MemAlloc(&first, 1 << 20), "cuMemAlloc 1 MiB");
  const double first_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  d.MemFree(first);
  std::vector<CUdeviceptr> held;
  unsigned long long filled = 0;
  bool oom = false;
  const double end = now_s() + o.seconds;
  while (now_s() < end) {
    CUdeviceptr p = 0;
    const CUresult rc = d.MemAlloc(&p, o.bytes);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
      oom = true;
      break;
    }
    check(rc, "cuMemAlloc (fill)");
    held.push_back(p);
    filled += o.bytes;
  }
  emit(o, head(g, "bytes") + ",\"total\":" + std::to_string(total) +
              ",\"free\":" + std::to_string(free0) + ",\"filled\":" + std::to_string(filled) +
              ",\"oom\":" + (oom ? "true" : "false") + ",\"first_alloc_us\":" +
              std::to_string(first_us) + ",\"chunk\":" + std::to_string(o.bytes));
  // With --stop-file: hold what was filled (reported above) until the file appears (or 120 s),
  // so that another tenant can fill next to it (the overcommit check).
  const double hold_end = now_s() + 120;
  while (!o.stop_file.empty() && !exists(o.stop_file) && !g_stop.load() && now_s() < hold_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (CUdeviceptr p : held) d.MemFree(p);
}

// The throughput modes: one "unit" of work, then a sample at each sync. Buffers and the graph
// are made when a mode first needs them (ensure), so that a warm worker's rounds reuse them and
// one worker can serve every throughput mode (a round's --mode).
struct Work {
  const Gpu* g = nullptr;
  CUdeviceptr a = 0, b = 0;
  unsigned long long buffer_bytes = 0;
  CUgraphExec exec = nullptr;

  void ensure(const Options& o) {
    if ((o.mode == "copy" || o.mode == "mixed") && buffer_bytes < o.bytes) {
      if (buffer_bytes > 0) {
        d.MemFree(a);
        d.MemFree(b);
      }
      check(d.MemAlloc(&a, o.bytes), "cuMemAlloc a");
      check(d.MemAlloc(&b, o.bytes), "cuMemAlloc b");
      buffer_bytes = o.bytes;
    }
    if (o.mode == "graph" && exec == nullptr) {
      check(d.StreamBeginCapture(g->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin capture");
      for (unsigned i = 0; i < o.graph_kernels; ++i) spin(*g, o.kernel_us);
      CUgraph graph = nullptr;
      check(d.StreamEndCapture(g->stream, &graph), "cuStreamEndCapture");
      check(d.GraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
    }
  }

  static const char* unit_name(const Options& o) {
    if (o.mode == "copy") return "copy";
    if (o.mode == "mixed") return "step";
    if (o.mode == "graph") return "replay";
    return "kernel";
  }

  void unit(const Options& o) const {
    const std::string& m = o.mode;
    if (m == "spin" || m == "onoff") {
      spin(*g, o.kernel_us);
    } else if (m == "copy") {
      check(d.MemcpyDtoDAsync(b, a, o.bytes, g->stream), "cuMemcpyDtoDAsync");
    } else if (m == "mixed") {  // forward, a parameter/activation copy, backward
      spin(*g, o.kernel_us);
      check(d.MemcpyDtoDAsync(b, a, o.bytes, g->stream), "cuMemcpyDtoDAsync");
      spin(*g, o.kernel_us * 2);
    } else {
      check(d.GraphLaunch(exec, g->stream), "cuGraphLaunch");
    }
  }
};

Work prepare_work(const Options& o, const Gpu& g) {
  Work w;
  w.g = &g;
  w.ensure(o);
  return w;
}

void warm(const Options& o, const Work& w, double seconds) {
  const double end = now_s() + seconds;
  do {
    w.unit(o);
    sync(*w.g);
  } while (now_s() < end);
}

void measure_throughput(const Options& o, const Work& w) {
  const double t0 = now_s(), end = t0 + o.seconds;
  const double period = o.period_ms / 1000.0;
  std::vector<double> ts{0};
  std::vector<unsigned long long> units{0};
  unsigned long long done = 0;
  for (;;) {
    if (o.mode == "onoff" && std::fmod(now_s() - t0, 2 * period) >= period) {
      // Off half of the period: idle until the next on edge (or the end).
      const double rel = now_s() - t0;
      const double next = (std::floor(rel / (2 * period)) + 1) * 2 * period;
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(next, o.seconds) - rel));
    } else {
      for (unsigned i = 0; i < o.sync_every; ++i) w.unit(o);
      sync(*w.g);
      done += o.sync_every;
    }
    const double t = now_s();
    ts.push_back(t - t0);
    units.push_back(done);
    if (t >= end || g_stop.load() || exists(o.stop_file)) break;
  }
  std::ostringstream s;
  s.precision(6);
  s << std::fixed << "[";
  for (std::size_t i = 0; i < ts.size(); ++i)
    s << (i ? "," : "") << "[" << ts[i] << "," << units[i] << "]";
  s << "]";
  const double secs = ts.back();
  emit(o, head(*w.g, Work::unit_name(o)) + ",\"t_start\":" + std::to_string(t0) +
              ",\"t_end\":" + std::to_string(t0 + secs) + ",\"seconds\":" + std::to_string(secs) +
              ",\"units\":" + std::to_string(done) +
              ",\"rate\":" + std::to_string(secs > 0 ? static_cast<double>(done) / secs : 0) +
              ",\"kernel_us\":" + std::to_string(o.kernel_us) +
              ",\"bytes\":" + std::to_string(o.bytes) + ",\"samples\":" + s.str());
}

bool is_throughput(const std::string& m) {
  return m == "spin" || m == "copy" || m == "mixed" || m == "graph" || m == "onoff";
}

// ---------------------------------------------------------------- warm worker (--serve)
// Blocks until DIR/go.N exists (true) or the worker is to end (false): DIR/quit, SIGTERM, or
// --idle-s without a round.
bool wait_round(const Options& o, unsigned n, int inotify_fd) {
  const std::string go = o.serve + "/go." + std::to_string(n), quit = o.serve + "/quit";
  const double idle_end = now_s() + static_cast<double>(o.idle_s);
  while (!g_stop.load() && now_s() < idle_end) {
    if (exists(go)) return true;
    if (exists(quit)) return false;
    if (inotify_fd < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    pollfd p{inotify_fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      char buf[4096];
      while (read(inotify_fd, buf, sizeof buf) > 0) {
      }
    }
  }
  return false;
}

std::vector<std::string> round_args(const std::string& path) {
  std::ifstream f(path);
  return {std::istream_iterator<std::string>(f), std::istream_iterator<std::string>()};
}

// One round of a warm worker: its options are the command line's with the round's over them.
// A round may switch the mode (--mode first): among the throughput modes (buffers and the graph
// made on first use) or between launch and alloc. With --barrier, a throughput round warms up,
// touches its --ready and waits for the barrier, so that every worker of a round starts
// measuring together however long its warm-up took.
void serve_round(const Options& base, Options o, std::vector<std::string> args, Work& w,
                 const Gpu& g) {
  if (args.size() >= 2 && args[0] == "--mode") {
    const bool both_throughput = is_throughput(args[1]) && is_throughput(base.mode);
    auto oneshot = [](const std::string& m) {
      return m == "launch" || m == "alloc" || m == "launchtime";
    };
    const bool both_oneshot = oneshot(args[1]) && oneshot(base.mode);
    if (!both_throughput && !both_oneshot)
      fail(base, "--mode " + args[1] + " in a round of a " + base.mode + " worker");
    o.mode = args[1];
    args.erase(args.begin(), args.begin() + 2);
  }
  o.ready.clear();
  o.warmup_ms = 0;  // a round warms up only when it asks to
  apply_args(o, args);
  g_opts = o;
  if (is_throughput(o.mode)) {
    w.ensure(o);
    if (o.warmup_ms > 0) warm(o, w, o.warmup_ms / 1000.0);
    if (!o.barrier.empty()) ready_and_wait(o);
    measure_throughput(o, w);
  } else if (o.mode == "latency") {
    run_latency(o, g);
  } else if (o.mode == "launch") {
    run_launch(o, g);
  } else if (o.mode == "launchtime") {
    run_launchtime(o, g);
  } else {
    run_alloc(o, g);
  }
}

void serve(const Options& base, const Gpu& g) {
  Work w;
  w.g = &g;
  if (is_throughput(base.mode)) {
    w.ensure(base);
    warm(base, w, base.warmup_ms / 1000.0);
  } else if (base.mode == "latency") {
    prepare_latency(base, g);
  } else if (base.mode != "launch" && base.mode != "alloc" && base.mode != "launchtime") {
    fail(base, "--serve does not serve mode " + base.mode);
  }
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd >= 0 &&
      inotify_add_watch(fd, base.serve.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE) < 0) {
    close(fd);
    fd = -1;  // polled instead
  }
  touch(base.ready);
  Options round_base = base;
  round_base.barrier.clear();
  for (unsigned n = 1; wait_round(base, n, fd); ++n)
    serve_round(base, round_base, round_args(base.serve + "/go." + std::to_string(n)), w, g);
  if (fd >= 0) close(fd);
}

}  // namespace
}  // namespace fgbench

int main(int argc, char** argv) {
  using namespace fgbench;
  g_opts = parse(argc, argv);
  const Options o = g_opts;
  struct sigaction action {};
  action.sa_handler = [](int) { g_stop.store(true); };
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  load_driver(o);
  const Gpu g = open_gpu(o);
  if (!o.serve.empty()) {
    serve(o, g);
  } else if (o.mode == "launch") {
    run_launch(o, g);
  } else if (o.mode == "alloc") {
    run_alloc(o, g);
  } else if (o.mode == "launchtime") {
    run_launchtime(o, g);
  } else if (o.mode == "mem") {
    run_mem(o, g);
  } else if (o.mode == "latency") {
    prepare_latency(o, g);
    ready_and_wait(o);
    run_latency(o, g);
  } else if (is_throughput(o.mode)) {
    const Work w = prepare_work(o, g);
    warm(o, w, o.warmup_ms / 1000.0);
    ready_and_wait(o);
    measure_throughput(o, w);
  } else {
    fail(o, "unknown mode " + o.mode);
  }
  return 0;
}
