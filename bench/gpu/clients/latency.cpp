// fracgpu-bench-client's latency mode: requests of one --kernel-us spin kernel + a sync, the
// latency-sensitive tenant of the benchmark's latency phase. Regular arrivals: a --think-us
// pause after each reply (closed loop). Poisson arrivals: an open loop whose arrivals are
// scheduled with exponential gaps of mean --think-us (the same sequence for every run of the
// same --seed, so every way of sharing sees the same arrivals).
//
// What is measured, per request: the request latency, from its submission (just before the
// launch) to the end of its sync, which is what the GPU and the scheduler decide; and, for
// Poisson arrivals, separately, the queueing delay from the scheduled arrival to the
// submission (the previous request still running, or the host waking late). The client waits
// for an arrival by sleeping to 200 us before it and spinning the rest (sleep_precise), so
// that a late wake-up of the sleeping thread (timer slack, a VM's scheduling: the "alone"
// Poisson p99 of 2.4 ms on the H200 was exactly that) lands in neither figure. After the
// --warmup-ms pause (the batch tenants ramp up) five unmeasured requests warm the path again.
// Hot path: one cuLaunchKernel and one cuStreamSynchronize per request, two clock reads.
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "client.h"

namespace fgbench {

namespace {

constexpr int kWarmRequests = 5;

std::string ms_fields(const char* prefix, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto ms = [&](double p) { return std::to_string(pct(us, p) / 1000.0); };
  const std::string p = prefix;
  return ",\"" + p + "p50_ms\":" + ms(0.5) + ",\"" + p + "p90_ms\":" + ms(0.9) + ",\"" + p +
         "p99_ms\":" + ms(0.99) + ",\"" + p + "p999_ms\":" + ms(0.999) + ",\"" + p +
         "max_ms\":" + ms(1.0);
}

}  // namespace

void prepare_latency(const Options& o, const Gpu& g) {
  // A timer slack of 1 ns: the coarse sleeps of sleep_precise wake as asked.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  for (int i = 0; i < 50; ++i) {  // JIT, first-launch costs, the tenant's first grant
    spin(g, o.kernel_us);
    sync(g);
  }
}

void run_latency(const Options& o, const Gpu& g) {
  using clock = std::chrono::steady_clock;
  auto us_between = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  if (o.warmup_ms > 0) sleep_precise(o.warmup_ms / 1000.0);
  for (int i = 0; i < kWarmRequests; ++i) {
    spin(g, o.kernel_us);
    sync(g);
  }
  const bool poisson = o.arrival == "poisson";
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(1e6 / std::max<double>(1.0, o.think_us));
  std::vector<double> lat_us, queue_us, resp_us;
  lat_us.reserve(o.requests);
  const double t0 = now_s(), end = t0 + o.seconds;
  auto arrival = clock::now();
  while (lat_us.size() < o.requests && now_s() < end && !g_stop.load()) {
    if (poisson) {
      arrival +=
          std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(gap(rng)));
      const double wait = std::chrono::duration<double>(arrival - clock::now()).count();
      if (wait > 0) sleep_precise(wait);
    }
    const auto submit = clock::now();
    spin(g, o.kernel_us);
    sync(g);
    const auto done = clock::now();
    lat_us.push_back(us_between(submit, done));
    if (poisson) {
      queue_us.push_back(std::max(0.0, us_between(arrival, submit)));
      resp_us.push_back(queue_us.back() + lat_us.back());
    } else if (o.think_us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(o.think_us));
    }
  }
  const double t1 = now_s();
  touch(o.stop_file);  // with --stop-file: the batch tenants of the phase stop measuring
  std::string body =
      head(g, "request") + ",\"arrival\":\"" + o.arrival + "\",\"t_start\":" + std::to_string(t0) +
      ",\"t_end\":" + std::to_string(t1) + ",\"requests\":" + std::to_string(lat_us.size()) +
      ",\"latency_from\":\"submission\"" + ms_fields("", lat_us) +
      ",\"kernel_us\":" + std::to_string(o.kernel_us) +
      ",\"think_us\":" + std::to_string(o.think_us) + ",\"lat_us\":" + list(lat_us, 1);
  if (poisson)
    body += ms_fields("queue_", queue_us) + ms_fields("response_", resp_us) +
            ",\"offered_per_s\":" + std::to_string(1e6 / std::max<double>(1.0, o.think_us)) +
            ",\"queue_us\":" + list(queue_us, 1);
  emit(o, body);
}

}  // namespace fgbench
