// Creation and attachment of the shared device segment (layout in shared_segment.h).
// The creator is whoever wins shm_open(O_CREAT|O_EXCL); it sizes the file, fills in
// the configuration and the robust mutexes, then publishes `ready`. Everyone else maps
// the existing file and waits (bounded) for `ready`, so a process can never observe a
// half-initialised device.
#include "shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

namespace fakecuda {
namespace {

constexpr int kAttachAttempts = 5;
constexpr auto kReadyPoll = std::chrono::milliseconds(1);
constexpr int kReadyPollLimit = 5000;  // 5 s: a creator that takes longer has died

void init_engine_guard(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mutex, &attr);
  pthread_mutexattr_destroy(&attr);
}

void fill_new_layout(SegmentLayout* layout, const DeviceConfig& config) {
  // ftruncate zero-fills, so only non-zero fields and the mutexes need setting.
  layout->magic = kSegmentMagic;
  layout->layout_version = kSegmentLayoutVersion;
  layout->device_count = config.device_count;
  layout->timeslice_us = config.timeslice_us;
  layout->context_footprint_bytes = config.context_footprint_bytes;
  layout->host_pid_ns = own_pid_namespace();
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    layout->devices[d].capacity_bytes = d < config.device_count ? config.memory_bytes : 0;
    init_engine_guard(&layout->engines[d].guard);
    layout->engines[d].next_ticket = 1;
  }
  for (MpsServerRecord& server : layout->mps_servers) init_engine_guard(&server.guard);
}

SegmentLayout* map_layout(int fd) {
  void* addr = mmap(nullptr, sizeof(SegmentLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return addr == MAP_FAILED ? nullptr : static_cast<SegmentLayout*>(addr);
}

}  // namespace

SharedSegment::~SharedSegment() {
  close();
}

void SharedSegment::close() {
  if (layout_ != nullptr) munmap(layout_, sizeof(SegmentLayout));
  layout_ = nullptr;
}

bool SharedSegment::create(int fd, const char* log_prefix) {
  const DeviceConfig config = read_device_config(log_prefix);
  // fchmod, not shm_open's mode: that one is masked by the umask.
  if (fchmod(fd, config.shm_mode) != 0 || ftruncate(fd, sizeof(SegmentLayout)) != 0) return false;
  layout_ = map_layout(fd);
  if (layout_ == nullptr) return false;
  fill_new_layout(layout_, config);
  layout_->ready.store(1, std::memory_order_release);
  created_ = true;
  return true;
}

bool SharedSegment::attach_existing(int fd, std::string& error) {
  struct stat st {};
  for (int i = 0; i < kReadyPollLimit; ++i) {
    if (fstat(fd, &st) != 0) break;
    if (static_cast<size_t>(st.st_size) >= sizeof(SegmentLayout)) break;
    std::this_thread::sleep_for(kReadyPoll);  // creator has not sized the file yet
  }
  if (static_cast<size_t>(st.st_size) != sizeof(SegmentLayout)) {
    error = "segment " + name_ + " has the wrong size (stale layout? run `fakecuda-ctl destroy`)";
    return false;
  }
  layout_ = map_layout(fd);
  if (layout_ == nullptr) {
    error = std::string("mmap failed: ") + std::strerror(errno);
    return false;
  }
  for (int i = 0; i < kReadyPollLimit && layout_->ready.load(std::memory_order_acquire) == 0; ++i) {
    std::this_thread::sleep_for(kReadyPoll);
  }
  if (layout_->ready.load(std::memory_order_acquire) == 0 || layout_->magic != kSegmentMagic ||
      layout_->layout_version != kSegmentLayoutVersion) {
    error = "segment " + name_ + " is not a fakecuda v" + std::to_string(kSegmentLayoutVersion) +
            " device (run `fakecuda-ctl destroy`)";
    close();
    return false;
  }
  return true;
}

bool SharedSegment::open(const std::string& name, bool create_if_missing, const char* log_prefix,
                         std::string& error) {
  close();
  name_ = name;
  created_ = false;
  // Retry because the segment may be destroyed between our failed O_EXCL and our open.
  for (int attempt = 0; attempt < kAttachAttempts; ++attempt) {
    if (create_if_missing) {
      int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd >= 0) {
        bool ok = create(fd, log_prefix);
        ::close(fd);
        if (!ok) error = std::string("cannot size segment: ") + std::strerror(errno);
        return ok;
      }
      if (errno != EEXIST) {
        error = "shm_open(" + name + "): " + std::strerror(errno);
        return false;
      }
    }
    int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
      bool ok = attach_existing(fd, error);
      ::close(fd);
      return ok;
    }
    if (errno != ENOENT || !create_if_missing) {
      error = "shm_open(" + name + "): " + std::strerror(errno);
      return false;
    }
  }
  error = "segment " + name + " keeps disappearing while being opened";
  return false;
}

bool SharedSegment::destroy(const std::string& name) {
  return shm_unlink(name.c_str()) == 0;
}

}  // namespace fakecuda
