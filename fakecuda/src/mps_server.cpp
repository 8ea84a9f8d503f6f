// The simulated MPS server's device threads (see mps_server.h).
#include "mps_server.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "device_engine.h"
#include "precise_clock.h"
#include "process_table.h"

namespace fakecuda {
namespace {

constexpr int64_t kIdleHoldNs = 100'000'000;  // keep the engine this long after the last work
constexpr int64_t kIdlePollNs = 1'000'000;    // while idle and holding: does anyone want it?
constexpr int64_t kBusyPollNs = 2'000'000;    // while busy: how often it looks
constexpr int64_t kPurgeNs = 20'000'000;      // ... and purges dead clients
constexpr int64_t kIdleWaitNs = 100'000'000;  // not holding: wait for work this long at most
constexpr uint64_t kExecutorIdBase = 0x4d50'5300'0000'0000ull;  // "MPS" + device

void enter_chunk(EngineRecord& engine) {
  if (engine.running_chunks.fetch_add(1) != 0) engine.overlap_violations.fetch_add(1);
}

}  // namespace

bool MpsServer::start(SegmentLayout* layout, const std::string& pipe_dir, std::string& error) {
  layout_ = layout;
  pid_ = ::getpid();
  start_time_ = process_start_time(pid_).value_or(0);
  std::optional<ProcessPlace> place =
      resolve_own_place(layout->host_pid_ns, shared_segment_name("fakecuda-mps-control"), error);
  if (!place) return false;
  place_ = *place;
  const int index = mps_register_server(layout, pipe_dir, pid_, start_time_);
  if (index < 0) {
    error = "every MPS server record of the simulated device is in use";
    return false;
  }
  record_ = &layout->mps_servers[index];
  for (uint32_t d = 0; d < layout->device_count; ++d)
    threads_.emplace_back([this, d] { serve_device(d); });
  return true;
}

void MpsServer::stop_accepting() {
  if (record_ != nullptr) mps_stop_accepting(*record_);
}

uint32_t MpsServer::live_clients() {
  if (record_ == nullptr) return 0;
  MpsLock lock(layout_, *record_);
  return mps_live_clients(layout_, *record_);
}

std::vector<pid_t> MpsServer::clients() {
  std::vector<pid_t> pids;
  if (record_ == nullptr) return pids;
  MpsLock lock(layout_, *record_);
  mps_purge_dead(layout_, *record_);
  for (const MpsClientRecord& c : record_->clients)
    if (c.in_use != 0) pids.push_back(c.pid);
  return pids;
}

void MpsServer::stop() {
  if (record_ == nullptr) return;
  stopping_.store(true);
  for (uint32_t d = 0; d < layout_->device_count; ++d) mps_notify(*record_, d);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  mps_unregister_server(layout_, *record_);
  record_ = nullptr;
}

void MpsServer::set_holding(uint32_t device, bool holding) {
  MpsLock lock(layout_, *record_);
  mps_set_holding(layout_, *record_, device, holding, monotonic_ns());
  if (holding) mps_allocate(*record_, device);
  mps_notify(*record_, device);
}

void MpsServer::serve_device(uint32_t device) {
  pthread_setname_np(pthread_self(), "fakecuda-mps");
  use_tight_timer_slack();
  MpsDeviceRecord& dev = record_->devices[device];
  EngineRecord& engine_record = layout_->engines[device];
  DeviceEngine engine(&engine_record,
                      EngineParty{pid_, start_time_, kExecutorIdBase + device, place_});
  const int64_t timeslice_ns = static_cast<int64_t>(layout_->timeslice_us) * 1000;
  while (!stopping_.load()) {
    if (dev.active.load() == 0) {
      mps_wait_for_work(*record_, device, kIdleWaitNs);
      continue;
    }
    engine.acquire();
    set_holding(device, true);
    enter_chunk(engine_record);  // the server's context runs (the engine's overlap check)
    int64_t slice_start = monotonic_ns(), idle_since = 0, next_purge = slice_start + kPurgeNs;
    while (!stopping_.load()) {
      const bool active = dev.active.load() != 0;
      const int64_t now = monotonic_ns();
      if (!active) {
        idle_since = idle_since == 0 ? now : idle_since;
        if (engine.others_waiting() || now - idle_since >= kIdleHoldNs) break;
      } else {
        idle_since = 0;
      }
      if (active && now - slice_start >= timeslice_ns && engine.others_waiting()) {
        set_holding(device, false);
        engine_record.running_chunks.fetch_sub(1);
        engine.yield_to_waiters();
        enter_chunk(engine_record);
        set_holding(device, true);
        slice_start = monotonic_ns();
        continue;
      }
      if (now >= next_purge) {
        MpsLock lock(layout_, *record_);
        mps_purge_dead(layout_, *record_);
        next_purge = now + kPurgeNs;
      }
      // Polls (no wake-up per kernel): for the end of the slice when others wait, and for
      // idleness; every kBusyPollNs at most.
      const int64_t wait =
          active ? std::min(timeslice_ns - (now - slice_start), kBusyPollNs) : kIdlePollNs;
      const int64_t sleep_ns = std::max<int64_t>(wait, 50'000);
      const timespec pause{static_cast<time_t>(sleep_ns / 1'000'000'000),
                           static_cast<long>(sleep_ns % 1'000'000'000)};
      clock_nanosleep(CLOCK_MONOTONIC, 0, &pause, nullptr);
    }
    set_holding(device, false);
    engine_record.running_chunks.fetch_sub(1);
    engine.release();
  }
}

}  // namespace fakecuda
