// The shared header of exportable VMM memory (see shared_physical.h).
#include "shared_physical.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace fakecuda {
namespace {

SharedPhysicalHeader* map_header(int fd, uint64_t data_size) {
  void* page = mmap(nullptr, kSharedHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                    static_cast<off_t>(data_size));
  return page == MAP_FAILED ? nullptr : static_cast<SharedPhysicalHeader*>(page);
}

// The guard, taken over from a holder that died holding it (the bits stay consistent:
// each change is one store).
class HeaderLock {
 public:
  explicit HeaderLock(SharedPhysicalHeader* header) : mutex_(&header->guard) {
    if (pthread_mutex_lock(mutex_) == EOWNERDEAD) pthread_mutex_consistent(mutex_);
  }
  ~HeaderLock() { pthread_mutex_unlock(mutex_); }
  HeaderLock(const HeaderLock&) = delete;
  HeaderLock& operator=(const HeaderLock&) = delete;

 private:
  pthread_mutex_t* mutex_;
};

bool valid_slot(int slot) {
  return slot >= 0 && static_cast<uint32_t>(slot) < kMaxProcesses;
}

// A holder bit counts while its slot's process is alive (a killed one holds nothing).
bool any_live_holder(const SharedPhysicalHeader* header, ProcessTable& processes) {
  for (uint32_t word = 0; word < kMaxProcesses / 64; ++word) {
    for (uint64_t bits = header->holders[word]; bits != 0; bits &= bits - 1) {
      const int slot = static_cast<int>(word * 64 + static_cast<uint32_t>(__builtin_ctzll(bits)));
      const ProcessRecord& record = processes.slot(slot);
      if (record.state.load(std::memory_order_acquire) ==
              static_cast<uint32_t>(ProcessState::Live) &&
          process_alive(record.pid, record.start_time, record.place)) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

SharedPhysicalHeader* create_shared_header(int memfd, uint32_t device, uint64_t size,
                                           const ChargeOwner& owner) {
  if (!valid_slot(owner.slot)) return nullptr;
  if (ftruncate(memfd, static_cast<off_t>(size + kSharedHeaderBytes)) != 0) return nullptr;
  SharedPhysicalHeader* header = map_header(memfd, size);
  if (header == nullptr) return nullptr;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&header->guard, &attr);
  pthread_mutexattr_destroy(&attr);
  header->device = device;
  header->size = size;
  header->holders[owner.slot / 64] = 1ull << (owner.slot % 64);
  header->owner_slot = owner.slot;
  header->owner_pid = owner.pid;
  header->owner_start_time = owner.start_time;
  __atomic_store_n(&header->magic, kSharedPhysicalMagic, __ATOMIC_RELEASE);  // last
  return header;
}

SharedPhysicalHeader* attach_shared_header(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) <= kSharedHeaderBytes ||
      st.st_size % static_cast<off_t>(kSharedHeaderBytes) != 0) {
    return nullptr;
  }
  const uint64_t data_size = static_cast<uint64_t>(st.st_size) - kSharedHeaderBytes;
  SharedPhysicalHeader* header = map_header(fd, data_size);
  if (header == nullptr) return nullptr;
  if (__atomic_load_n(&header->magic, __ATOMIC_ACQUIRE) != kSharedPhysicalMagic ||
      header->size != data_size || header->device >= kMaxDevices) {
    munmap(header, kSharedHeaderBytes);
    return nullptr;
  }
  return header;
}

void add_holder(SharedPhysicalHeader* header, const MemoryAccounting& accounting) {
  const int slot = accounting.owner().slot;
  if (!valid_slot(slot)) return;
  HeaderLock lock(header);
  header->holders[slot / 64] |= 1ull << (slot % 64);
}

void release_shared_header(SharedPhysicalHeader* header, MemoryAccounting& accounting) {
  if (header == nullptr) return;
  const int slot = accounting.owner().slot;
  bool last = false;
  {
    HeaderLock lock(header);
    if (valid_slot(slot)) header->holders[slot / 64] &= ~(1ull << (slot % 64));
    last = !any_live_holder(header, accounting.processes());
    if (last) {
      for (uint64_t& word : header->holders) word = 0;  // dead holders' bits: nobody's now
    }
  }
  if (last) {
    const ChargeOwner owner{header->owner_slot, header->owner_pid, header->owner_start_time};
    accounting.uncharge_owner(owner, header->device, header->size);
  }
  munmap(header, kSharedHeaderBytes);
}

}  // namespace fakecuda
