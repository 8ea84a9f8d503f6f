// Legacy IPC of cuMemAlloc memory through memfds reopened from /proc (see ipc_memory.h).
#include "ipc_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <tuple>

#include "context.h"
#include "device_memory.h"
#include "driver.h"

namespace fakecuda {
namespace {

constexpr uint64_t kIpcMagic = 0x3143'5049'4b46'4346ull;  // "FCFKIPC1"
constexpr size_t kPage = 4096;

uint64_t machine_tag(const std::string& segment_name) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : segment_name) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

bool all_zero(const unsigned char* page) {
  uint64_t word = 0;
  for (size_t i = 0; i < kPage; i += sizeof word) {
    std::memcpy(&word, page + i, sizeof word);
    if (word != 0) return false;
  }
  return true;
}

// Copies what the allocation holds into the memfd; pages still zero stay holes.
void copy_contents(const void* from, void* to, size_t length) {
  const auto* source = static_cast<const unsigned char*>(from);
  auto* target = static_cast<unsigned char*>(to);
  for (size_t offset = 0; offset < length; offset += kPage) {
    if (!all_zero(source + offset)) std::memcpy(target + offset, source + offset, kPage);
  }
}

// The name /proc/self/fd/<fd> shows for a memfd called `name`.
bool names_memfd(int fd, const std::string& name) {
  char link[64];
  char target[256];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::string(target) == "/memfd:" + name + " (deleted)";
}

}  // namespace

std::string ipc_memfd_name(int32_t pid, uint64_t buffer_id) {
  return "fakecuda-ipc:" + std::to_string(pid) + ":" + std::to_string(buffer_id);
}

bool IpcMemory::Key::operator<(const Key& other) const {
  return std::tie(pid, start_time, buffer_id) <
         std::tie(other.pid, other.start_time, other.buffer_id);
}

// Moves the allocation at `base` into a memfd at the same address, once.
CUresult IpcMemory::share(Driver& driver, uintptr_t base, int& fd) {
  std::optional<Allocation> allocation = driver.allocations.find(base);
  if (!allocation || allocation->base != base) return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile
  if (allocation->ipc_fd >= 0) {
    fd = allocation->ipc_fd;
    return CUDA_SUCCESS;
  }
  const std::string name = ipc_memfd_name(driver.process_record().pid, allocation->buffer_id);
  const int memfd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (memfd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t length = allocation->mapping_length;
  void* staging = MAP_FAILED;
  if (ftruncate(memfd, static_cast<off_t>(length)) == 0)
    staging = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (staging == MAP_FAILED) {
    ::close(memfd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  drain_all_contexts(driver);  // work in flight may still write the allocation
  copy_contents(allocation->mapping, staging, length);
  munmap(staging, length);
  if (mmap(allocation->mapping, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd, 0) ==
      MAP_FAILED) {
    ::close(memfd);
    return CUDA_ERROR_MAP_FAILED;
  }
  driver.allocations.update(base, [memfd](Allocation& a) { a.ipc_fd = memfd; });
  fd = memfd;
  return CUDA_SUCCESS;
}

CUresult IpcMemory::get_handle(Driver& driver, CUdeviceptr ptr, CUipcMemHandle& out) {
  std::optional<Allocation> allocation = driver.allocations.find(ptr);
  if (!allocation || !allocation->legacy_ipc_capable()) return CUDA_ERROR_INVALID_VALUE;
  int fd = -1;
  {
    std::lock_guard lock(mutex_);
    if (CUresult status = share(driver, allocation->base, fd); status != CUDA_SUCCESS)
      return status;
  }
  IpcMemHandleBytes bytes{};
  bytes.magic = kIpcMagic;
  bytes.machine = machine_tag(driver.segment_name());
  bytes.pid = driver.process_record().pid;
  bytes.fd = fd;
  bytes.start_time = driver.process_record().start_time;
  bytes.buffer_id = allocation->buffer_id;
  bytes.size = allocation->size;
  bytes.length = allocation->mapping_length;
  bytes.device = allocation->device;
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, &bytes, sizeof bytes);
  return CUDA_SUCCESS;
}

// Reopens the exporter's memfd and maps it here.
CUresult IpcMemory::map_remote(Driver& driver, Context& context, const IpcMemHandleBytes& bytes,
                               CUdeviceptr& out) {
  if (!process_alive(bytes.pid, bytes.start_time)) return CUDA_ERROR_INVALID_VALUE;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", bytes.pid, bytes.fd);
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;  // freed (descriptor closed) or not ours to open
  struct stat st {};
  if (!names_memfd(fd, ipc_memfd_name(bytes.pid, bytes.buffer_id)) || fstat(fd, &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < bytes.length) {
    ::close(fd);  // the descriptor number now names something else: the allocation is gone
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* mapping = mmap(nullptr, bytes.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  Allocation allocation;
  allocation.base = reinterpret_cast<uintptr_t>(mapping);
  allocation.size = bytes.size;
  allocation.kind = MemoryKind::IpcMapping;
  allocation.device = bytes.device;
  allocation.context = context.handle();
  allocation.buffer_id = driver.next_id();
  allocation.mapping = mapping;
  allocation.mapping_length = bytes.length;
  driver.allocations.insert(allocation);
  out = allocation.base;
  return CUDA_SUCCESS;
}

CUresult IpcMemory::open(Driver& driver, Context& context, const CUipcMemHandle& handle,
                         unsigned flags, CUdeviceptr& out) {
  if ((flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  IpcMemHandleBytes bytes{};
  std::memcpy(&bytes, &handle, sizeof bytes);
  if (bytes.magic != kIpcMagic || bytes.machine != machine_tag(driver.segment_name()) ||
      bytes.device >= driver.physical_device_count() || bytes.length < bytes.size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const ProcessRecord& self = driver.process_record();
  if (bytes.pid == self.pid && bytes.start_time == self.start_time)
    return CUDA_ERROR_INVALID_CONTEXT;  // the real driver's answer to opening one's own handle
  const Key key{bytes.pid, bytes.start_time, bytes.buffer_id};
  std::lock_guard lock(mutex_);
  if (auto it = opened_.find(key); it != opened_.end()) {
    ++it->second.references;
    out = it->second.base;
    return CUDA_SUCCESS;
  }
  CUdeviceptr base = 0;
  if (CUresult status = map_remote(driver, context, bytes, base); status != CUDA_SUCCESS)
    return status;
  opened_[key] = Opened{base, 1};
  by_base_[base] = key;
  out = base;
  return CUDA_SUCCESS;
}

CUresult IpcMemory::close(Driver& driver, CUdeviceptr ptr) {
  std::lock_guard lock(mutex_);
  auto at = by_base_.find(ptr);
  if (at == by_base_.end()) return CUDA_ERROR_INVALID_VALUE;
  auto it = opened_.find(at->second);
  if (it != opened_.end() && --it->second.references > 0) return CUDA_SUCCESS;
  if (it != opened_.end()) opened_.erase(it);
  by_base_.erase(at);
  drain_all_contexts(driver);  // work in flight may still use the mapping
  if (std::optional<Allocation> taken = driver.allocations.take(ptr))
    release_allocation(driver, *taken);
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
