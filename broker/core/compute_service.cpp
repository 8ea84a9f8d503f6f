// Wiring of the compute schedulers to the tenants' shared memory, doorbells and a
// timer (see compute_service.h).
#include "core/compute_service.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <set>

#include "common/unix_socket.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/monotonic_clock.h"

namespace fracgpu::broker {
namespace {

// One tenant on one GPU: its ledger entries read, its grant word written.
class LedgerPort final : public SchedulingPort {
 public:
  LedgerPort(TenantQuota& quota, TenantLedger& ledger, std::size_t index,
             const ProcessTracker* tracker, std::string tenant)
      : quota_(quota.devices[index]),
        usage_(ledger.devices[index]),
        ledger_(ledger),
        index_(index),
        tracker_(tracker),
        tenant_(std::move(tenant)) {}

  // Live processes only: a dead waiter's count dies with it. The sum is also published as
  // the tenant-wide DeviceUsage.waiting (monitoring), which only the broker writes: a
  // process killed at its gate would otherwise leave it counted for ever.
  uint32_t waiting() const override {
    uint32_t total = 0;
    for_live([&](uint32_t slot) { total += ledger_.schedule[slot][index_].waiting.load(); });
    if (usage_.waiting.load(std::memory_order_relaxed) != total)
      usage_.waiting.store(total, std::memory_order_relaxed);
    return total;
  }
  bool launched_since(uint32_t epoch) const override {
    bool found = false;
    for_live([&](uint32_t slot) {
      if (epoch_at_or_after(ledger_.schedule[slot][index_].launched_epoch.load(), epoch))
        found = true;
    });
    return found;
  }
  bool drained(uint32_t first_epoch, uint32_t revoke_epoch) const override {
    bool all = true;
    for_live([&](uint32_t slot) {
      const SlotSchedule& s = ledger_.schedule[slot][index_];
      const uint32_t launched = s.launched_epoch.load();
      if (!epoch_at_or_after(launched, first_epoch) || epoch_at_or_after(launched, revoke_epoch))
        return;
      if (!epoch_at_or_after(s.drained_epoch.load(), revoke_epoch)) all = false;
    });
    return all;
  }
  bool has_processes() const override {
    bool any = false;
    for_live([&](uint32_t) { any = true; });
    return any;
  }
  uint32_t current_word() const override { return quota_.grant_word.load(); }
  uint64_t progress() const override {
    uint64_t sum = 0;
    for_live([&](uint32_t slot) { sum += ledger_.processes[slot].gate_progress.load(); });
    return sum;
  }
  uint64_t burst_start() const override {
    return usage_.burst_start_ns.load();
  }  // after span (release)
  uint64_t burst_span() const override { return usage_.burst_span_ns.load(); }
  void publish_guard(uint64_t next_ns, uint64_t period_ns, uint32_t lead_ns, uint64_t late_ns,
                     uint64_t hold_ns) override {
    quota_.guard_lead_ns.store(lead_ns);
    quota_.guard_hold_ns.store(hold_ns);
    quota_.guard_late_ns.store(late_ns);
    quota_.guard_period_ns.store(period_ns);
    quota_.guard_next_ns.store(next_ns);  // last: the shim reads it first
  }
  void publish(uint32_t word, uint32_t inflight_limit_us) override {
    quota_.inflight_limit_us.store(inflight_limit_us);
    const uint32_t old = quota_.grant_word.exchange(word);
    if (((old ^ word) & kGrantGranted) != 0) futex_wake_all(quota_.grant_word);
  }

 private:
  template <typename Fn>
  void for_live(Fn&& fn) const {
    auto live = [&](uint32_t i) {
      return static_cast<SlotState>(ledger_.processes[i].state.load(std::memory_order_relaxed)) ==
             SlotState::kLive;
    };
    if (tracker_ != nullptr) {  // the registered slots: O(processes), not O(512)
      tracker_->for_each_watched(tenant_, [&](uint32_t i) {
        if (i < kMaxProcesses && live(i)) fn(i);
      });
      return;
    }
    for (uint32_t i = 0; i < kMaxProcesses; ++i)
      if (live(i)) fn(i);
  }

  DeviceQuota& quota_;
  DeviceUsage& usage_;
  TenantLedger& ledger_;
  std::size_t index_;
  const ProcessTracker* tracker_;
  std::string tenant_;
};

}  // namespace

struct ComputeService::TenantLink {
  Tenant* tenant = nullptr;
  int doorbell_fd = -1;
  EventLoop::Id doorbell_id = 0;
  std::vector<std::pair<uint32_t, std::unique_ptr<LedgerPort>>> ports;  // (gpu, port)
};

ComputeService::ComputeService(EventLoop& loop, ComputeConfig config)
    : loop_(loop), config_(config) {}

ComputeService::~ComputeService() {
  for (auto& [name, link] : tenants_) close_link(*link);
  if (timer_id_ != 0) loop_.remove(timer_id_);
  if (timer_fd_ >= 0) ::close(timer_fd_);
}

Status ComputeService::start() {
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0)
    return Status::failure(std::string("cannot create the scheduler timer: ") +
                           std::strerror(errno));
  timer_id_ = loop_.add(timer_fd_, EPOLLIN, [this](uint32_t) {
    uint64_t expirations = 0;
    while (::read(timer_fd_, &expirations, sizeof expirations) > 0) {
    }
    run();
  });
  if (timer_id_ == 0) return Status::failure("cannot watch the scheduler timer");
  return {};
}

Status ComputeService::open_doorbell(TenantLink& link, const std::filesystem::path& dir,
                                     const TenantSpec& spec) {
  const std::string& name = spec.name;
  const std::string path = (dir / "doorbell").string();
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path))
    return Status::failure("doorbell path too long: " + path);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return Status::failure(std::string("cannot create a doorbell socket: ") + std::strerror(errno));
  ::unlink(path.c_str());  // left by an earlier broker
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  // The doorbell carries no data, but a ring costs the broker a scheduling pass: it gets
  // the tenant socket's access (its owners only), never a world-writable mode.
  const SocketAccess access = socket_access(spec);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status::failure("cannot bind " + path + ": " + why);
  }
  if (auto s = set_socket_access(path, access.mode, access.owner); !s) {
    ::close(fd);
    ::unlink(path.c_str());
    return Status::failure("cannot set the access of " + path + ": " + s.error());
  }
  link.doorbell_fd = fd;
  link.doorbell_id = loop_.add(fd, EPOLLIN, [this, fd](uint32_t) {
    char buffer[64];
    while (::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT) >= 0) {
    }  // the content means nothing; the rings are coalesced
    run();
  });
  spdlog::debug("tenant {}: doorbell at {}", name, path);
  return {};
}

void ComputeService::close_link(TenantLink& link) {
  if (link.doorbell_id != 0) loop_.remove(link.doorbell_id);
  if (link.doorbell_fd >= 0) ::close(link.doorbell_fd);
  link.doorbell_id = 0;
  link.doorbell_fd = -1;
}

void ComputeService::unschedule(uint32_t gpu, const std::string& name) {
  if (auto it = gpus_.find(gpu); it != gpus_.end()) it->second.remove(name);
}

// Takes a tenant off every GPU it was scheduled on and closes its doorbell.
void ComputeService::forget(const std::string& name, TenantLink& link) {
  for (auto& [gpu, port] : link.ports) unschedule(gpu, name);
  link.ports.clear();
  close_link(link);
}

void ComputeService::sync_tenant(Tenant& t, std::unique_ptr<TenantLink>& link, int64_t now) {
  if (link && link->tenant != &t) {  // deleted and created again: start over
    forget(t.spec.name, *link);
    link.reset();
  }
  if (!link) {
    link = std::make_unique<TenantLink>();
    link->tenant = &t;
    if (auto s = open_doorbell(*link, t.dir, t.spec); !s)
      spdlog::error("tenant {}: {}; its launches will pass unscheduled", t.spec.name, s.error());
  }
  const std::size_t count = std::min(t.spec.devices.size(), kMaxDevices);
  for (std::size_t i = 0; i < link->ports.size(); ++i) {  // GPUs it no longer has at that position
    if (i >= count || link->ports[i].first != t.spec.devices[i].gpu)
      unschedule(link->ports[i].first, t.spec.name);
  }
  link->ports.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const DeviceSpec& d = t.spec.devices[i];
    if (link->ports[i].second == nullptr || link->ports[i].first != d.gpu)
      link->ports[i] = {
          d.gpu, std::make_unique<LedgerPort>(t.quota(), t.ledger(), i, tracker_, t.spec.name)};
    auto [it, created] = gpus_.try_emplace(d.gpu, config_);
    it->second.upsert(t.spec.name, link->ports[i].second.get(),
                      {d.compute, d.compute_limit, d.priority}, now);
  }
}

void ComputeService::sync(TenantRegistry& registry) {
  const int64_t now = monotonic_ns();
  std::set<std::string, std::less<>> present;
  for (Tenant* t : registry.all()) {
    present.insert(t->spec.name);
    sync_tenant(*t, tenants_[t->spec.name], now);
  }
  for (auto it = tenants_.begin(); it != tenants_.end();) {
    if (present.count(it->first) != 0) {
      ++it;
      continue;
    }
    forget(it->first, *it->second);
    it = tenants_.erase(it);
  }
  run();
}

void ComputeService::set_mps(bool on) {
  if (config_.mps == on) return;
  config_.mps = on;
  for (auto& [gpu, scheduler] : gpus_) scheduler.set_mps(on);
  run();
}

// Every pass renews the broker's lease in each tenant's quota (tenant_segment.h,
// "Liveness"): while any thread waits at a gate, the schedulers run at least every 250 ms.
void ComputeService::run() {
  const int64_t now = monotonic_ns();
  int64_t next = INT64_MAX;
  for (auto& [gpu, scheduler] : gpus_) next = std::min(next, scheduler.step(now));
  for (auto& [name, link] : tenants_)
    link->tenant->quota().broker_heartbeat.fetch_add(1, std::memory_order_release);
  arm(next);
}

void ComputeService::arm(int64_t deadline) {
  if (timer_fd_ < 0) return;
  itimerspec spec{};
  if (deadline != INT64_MAX) {
    spec.it_value.tv_sec = static_cast<time_t>(deadline / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(deadline % 1'000'000'000);
  }
  ::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

std::optional<ComputeStatus> ComputeService::status(const std::string& tenant, uint32_t gpu) const {
  auto it = gpus_.find(gpu);
  if (it == gpus_.end()) return std::nullopt;
  return it->second.status(tenant, monotonic_ns());
}

std::optional<GpuComputeCounters> ComputeService::gpu_counters(uint32_t gpu) const {
  auto it = gpus_.find(gpu);
  if (it == gpus_.end()) return std::nullopt;
  return it->second.counters();
}

}  // namespace fracgpu::broker
