// A process's membership of a simulated MPS server (see mps_client.h).
#include "mps_client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "precise_clock.h"
#include "process_table.h"
#include "shared_segment.h"

namespace fakecuda {
namespace {

constexpr const char* kDefaultPipeDirectory = "/tmp/nvidia-mps";
constexpr int64_t kLivenessCheckNs = 20'000'000;  // how often a waiter checks the daemon
constexpr int64_t kSpinTailNs = 50'000;
constexpr auto kQueuedRetry = std::chrono::milliseconds(20);

void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

std::string mps_pipe_directory() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  return dir != nullptr && *dir != '\0' ? dir : kDefaultPipeDirectory;
}

uint32_t mps_client_priority() {
  const char* text = std::getenv("CUDA_MPS_CLIENT_PRIORITY");
  if (text == nullptr || *text == '\0') return 0;
  if (std::strcmp(text, "0") == 0) return 0;
  if (std::strcmp(text, "1") == 0) return 1;
  std::fprintf(stderr, "fakecuda: CUDA_MPS_CLIENT_PRIORITY=%s is not 0 or 1; using 0\n", text);
  return 0;
}

std::unique_ptr<MpsClient> MpsClient::join(SegmentLayout* layout, int process_slot, pid_t pid,
                                           uint64_t start_time, CUresult* failure) {
  *failure = CUDA_SUCCESS;
  const std::string pipe = mps_pipe_directory();
  const uint32_t priority = mps_client_priority();
  const uid_t uid = ::getuid();
  bool told = false;
  for (;;) {
    MpsServerRecord* server = mps_find_server(layout, pipe);
    if (server == nullptr) return nullptr;  // no daemon there: an ordinary context
    MpsAdmission admission;
    uint32_t index = 0;
    {
      MpsLock lock(layout, *server);
      admission =
          mps_admit_client(layout, *server, pid, start_time, uid, priority, process_slot, &index);
    }
    switch (admission) {
      case MpsAdmission::kAdmitted:
        return std::unique_ptr<MpsClient>(new MpsClient(layout, server, index, priority));
      case MpsAdmission::kStopping:
        *failure = CUDA_ERROR_MPS_SERVER_NOT_READY;
        return nullptr;
      case MpsAdmission::kFull:
        *failure = CUDA_ERROR_MPS_MAX_CLIENTS_REACHED;
        return nullptr;
      case MpsAdmission::kOtherUid:
        if (!told) {
          std::fprintf(stderr,
                       "fakecuda: the MPS server of %s serves uid %u; uid %u waits until its "
                       "clients have exited\n",
                       pipe.c_str(), server->uid, static_cast<unsigned>(uid));
          told = true;
        }
        std::this_thread::sleep_for(kQueuedRetry);
        break;
    }
  }
}

MpsClient::MpsClient(SegmentLayout* layout, MpsServerRecord* server, uint32_t client,
                     uint32_t priority)
    : layout_(layout),
      server_(server),
      client_(client),
      priority_(priority),
      daemon_pid_(server->daemon_pid),
      daemon_start_time_(server->daemon_start_time) {}

MpsClient::~MpsClient() {
  if (!server_alive()) return;
  MpsLock lock(layout_, *server_);
  const MpsClientRecord& c = server_->clients[client_];
  if (c.in_use != 0 && c.pid == static_cast<int32_t>(::getpid()))
    mps_remove_client(layout_, *server_, client_);
}

bool MpsClient::server_alive() const {
  return server_->daemon_pid == daemon_pid_ && server_->daemon_start_time == daemon_start_time_ &&
         process_alive(daemon_pid_, daemon_start_time_);
}

void MpsClient::wait_for_event(uint32_t device, uint32_t seen, int64_t deadline_ns) {
  const std::atomic<uint32_t>& sequence = server_->devices[device].sequence;
  const int64_t sleep_ns = deadline_ns - kSpinTailNs - monotonic_ns();
  if (sleep_ns > 0) mps_wait(*server_, device, seen, sleep_ns);
  while (sequence.load(std::memory_order_acquire) == seen && monotonic_ns() < deadline_ns)
    cpu_relax();
}

bool MpsClient::occupy(uint32_t device, uint64_t executor_id, double demand, int64_t duration_ns) {
  if (duration_ns <= 0) return true;
  MpsDeviceRecord& dev = server_->devices[device];
  int kernel = -1;
  uint64_t arrival = 0;
  {
    MpsLock lock(layout_, *server_);
    if (!server_alive()) return false;
    kernel = mps_add_kernel(layout_, *server_, device, client_, executor_id, demand, duration_ns,
                            monotonic_ns());
    if (kernel >= 0) arrival = dev.kernels[kernel].arrival;
  }
  if (kernel < 0) {  // 64 kernels at once on one device: run this one at full speed
    sleep_until_precise(monotonic_ns() + duration_ns);
    return true;
  }
  int64_t next_check = monotonic_ns() + kLivenessCheckNs;
  for (;;) {
    uint32_t seen = 0;
    int64_t next_event = 0, own_end = INT64_MAX;
    bool settled = false;  // holds all the SMs it wants: nothing but its end changes it
    const int64_t now = monotonic_ns();
    {
      MpsLock lock(layout_, *server_);
      if (mps_advance(layout_, *server_, device, now)) mps_notify(*server_, device);
      MpsKernelRecord& k = dev.kernels[kernel];
      if (k.in_use == 0 || k.arrival != arrival) return server_alive();  // record reused
      if (k.finished != 0) {
        mps_remove_kernel(*server_, device, kernel);
        mps_notify(*server_, device);
        return true;
      }
      next_event = mps_next_event_ns(*server_, device, now);
      seen = dev.sequence.load();
      settled = dev.holding != 0 && k.allocation + 1e-9 >= k.demand;
      if (settled) own_end = now + static_cast<int64_t>(k.remaining_ns);
    }
    if (now >= next_check) {
      if (!server_alive()) {
        MpsLock lock(layout_, *server_);
        MpsKernelRecord& k = dev.kernels[kernel];
        if (k.in_use != 0 && k.arrival == arrival) mps_remove_kernel(*server_, device, kernel);
        return false;
      }
      next_check = now + kLivenessCheckNs;
    }
    if (settled) {
      // Runs at full speed until it ends (unless the server yields the engine meanwhile:
      // then the next look finds it unfinished and waits again); no wake-up per event.
      sleep_until_precise(std::min(own_end, next_check));
    } else {
      wait_for_event(device, seen, std::min(next_event, next_check));
    }
  }
}

bool MpsClient::fault_reached(uint32_t device) const {
  return (server_->clients[client_].fault_devices.load(std::memory_order_relaxed) &
          (1u << device)) != 0;
}

void MpsClient::report_fault(uint32_t device) {
  MpsLock lock(layout_, *server_);
  if (!server_alive()) return;
  mps_record_fault(*server_, device);
}

bool MpsClient::refuses_contexts(uint32_t device) {
  MpsLock lock(layout_, *server_);
  return mps_device_refuses_contexts(layout_, *server_, device);
}

}  // namespace fakecuda
