// The opening side of fracgpu's legacy-IPC emulation (see ipc_opener.h).
#include "core/ipc_opener.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "core/shim_log.h"
#include "fracgpu/descriptor_passing.h"

namespace fracgpu {
namespace {

// Stale (exporter gone, allocation freed), refused, or not a handle of a live exporter:
// what the real driver answers for a handle it cannot open ("invalid argument").
constexpr CUresult kCannotOpen = CUDA_ERROR_INVALID_VALUE;

class Socket {
 public:
  Socket() : fd_(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

bool connect_abstract(int fd, const std::string& name, int timeout_ms) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::size_t length = std::min(name.size(), sizeof address.sun_path - 1);
  std::memcpy(address.sun_path + 1, name.data(), length);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), size);
  } while (rc != 0 && errno == EINTR);
  return rc == 0;
}

}  // namespace

CUresult fetch_exported_descriptor(const IpcHandleFields& fields, int* fd) noexcept {
  *fd = -1;
  Socket socket;
  if (socket.fd() < 0) return CUDA_ERROR_MAP_FAILED;  // no descriptor left for a socket
  if (!connect_abstract(socket.fd(), ipc_socket_name(fields.pid, fields.nonce),
                        IpcOpener::kExporterTimeoutMs))
    return kCannotOpen;  // no such exporter (any more)
  IpcRequest request;
  request.nonce = fields.nonce;
  request.id = fields.id;
  request.size = fields.size;
  if (::send(socket.fd(), &request, sizeof request, MSG_NOSIGNAL) !=
      static_cast<ssize_t>(sizeof request))
    return kCannotOpen;
  IpcReply reply;
  int received = -1;
  const ssize_t n =
      descriptor_passing::receive_with(socket.fd(), &reply, sizeof reply, &received, 0);
  const bool ok = n == static_cast<ssize_t>(sizeof reply) && reply.magic == kIpcHandleMagic &&
                  reply.status == CUDA_SUCCESS && reply.size == fields.size && received >= 0;
  if (!ok) {
    if (received >= 0) ::close(received);
    const bool answered = n == static_cast<ssize_t>(sizeof reply) &&
                          reply.magic == kIpcHandleMagic && reply.status != CUDA_SUCCESS;
    return answered ? static_cast<CUresult>(reply.status) : kCannotOpen;
  }
  *fd = received;
  return CUDA_SUCCESS;
}

std::optional<CUresult> IpcOpener::open(CUdeviceptr* dptr, const CUipcMemHandle& handle,
                                        unsigned flags) noexcept {
  const std::optional<IpcHandleFields> fields = decode_ipc_handle(handle);
  if (!fields) return std::nullopt;
  if (dptr == nullptr || (flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  // Opening in the exporting process: the real driver's answer.
  if (self_ != nullptr && self_->owns(*fields)) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext context = nullptr;
  if (calls_.cuCtxGetCurrent == nullptr || calls_.cuCtxGetCurrent(&context) != CUDA_SUCCESS ||
      context == nullptr)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (!calls_.can_import()) return CUDA_ERROR_MAP_FAILED;
  const Key key{fields->pid, fields->nonce, fields->id};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      ++mappings_.at(it->second).references;
      *dptr = it->second;
      return CUDA_SUCCESS;
    }
  }
  int fd = -1;
  if (CUresult rc = fetch_exported_descriptor(*fields, &fd); rc != CUDA_SUCCESS) return rc;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle physical = 0;
  const CUresult rc = map_descriptor(fd, fields->size, flags, &va, &physical);
  ::close(fd);  // the imported handle holds the memory now
  if (rc != CUDA_SUCCESS) return rc;
  Mapping mapping{key, fields->size, physical, 1};
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = by_key_.find(key); it != by_key_.end()) {  // another thread opened it meanwhile
    unmap(va, mapping);
    ++mappings_.at(it->second).references;
    *dptr = it->second;
    return CUDA_SUCCESS;
  }
  mappings_[va] = mapping;
  by_key_[key] = va;
  *dptr = va;
  return CUDA_SUCCESS;
}

CUresult IpcOpener::map_descriptor(int fd, uint64_t size, unsigned flags, CUdeviceptr* va,
                                   CUmemGenericAllocationHandle* handle) noexcept {
  CUresult rc = calls_.cuMemImportFromShareableHandle(
      handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (rc != CUDA_SUCCESS) {
    FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8,
                       "cannot import another process's device memory (CUDA error %d)",
                       static_cast<int>(rc));
    return CUDA_ERROR_MAP_FAILED;
  }
  rc = calls_.cuMemAddressReserve(va, size, 0, 0, 0);
  if (rc == CUDA_SUCCESS) {
    rc = calls_.cuMemMap(*va, size, 0, *handle, 0);
    if (rc == CUDA_SUCCESS) {
      rc = grant_access(*va, size, *handle, flags);
      if (rc != CUDA_SUCCESS) calls_.cuMemUnmap(*va, size);
    }
    if (rc != CUDA_SUCCESS) calls_.cuMemAddressFree(*va, size);
  }
  if (rc != CUDA_SUCCESS) {
    calls_.cuMemRelease(*handle);
    FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8,
                       "cannot map %llu bytes of another process's device memory (CUDA error %d)",
                       static_cast<unsigned long long>(size), static_cast<int>(rc));
    return CUDA_ERROR_MAP_FAILED;
  }
  return CUDA_SUCCESS;
}

// Read-write for the current context's device; with the lazy-peer flag also for the
// memory's own device and every device that can reach it as a peer.
CUresult IpcOpener::grant_access(CUdeviceptr va, uint64_t size, CUmemGenericAllocationHandle handle,
                                 unsigned flags) noexcept {
  CUdevice current = 0;
  if (calls_.cuCtxGetDevice(&current) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<CUdevice> devices{current};
  CUmemAllocationProp prop{};
  const bool located =
      calls_.cuMemGetAllocationPropertiesFromHandle != nullptr &&
      calls_.cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_SUCCESS &&
      prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop.location.id >= 0;
  int count = 0;
  if ((flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0 && located &&
      calls_.cuDeviceGetCount != nullptr && calls_.cuDeviceGetCount(&count) == CUDA_SUCCESS) {
    const CUdevice owner = prop.location.id;
    for (CUdevice d = 0; d < count; ++d) {
      int can = d == owner ? 1 : 0;
      if (d != owner && calls_.cuDeviceCanAccessPeer != nullptr &&
          calls_.cuDeviceCanAccessPeer(&can, d, owner) != CUDA_SUCCESS)
        can = 0;
      if (can && std::find(devices.begin(), devices.end(), d) == devices.end())
        devices.push_back(d);
    }
  }
  std::vector<CUmemAccessDesc> access(devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i) {
    access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[i].location.id = devices[i];
    access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  return calls_.cuMemSetAccess(va, size, access.data(), access.size());
}

std::optional<CUresult> IpcOpener::close(CUdeviceptr dptr) noexcept {
  Mapping gone;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = mappings_.find(dptr);
    if (it == mappings_.end()) return std::nullopt;
    if (--it->second.references > 0) return CUDA_SUCCESS;
    gone = it->second;
    by_key_.erase(gone.key);
    mappings_.erase(it);
  }
  unmap(dptr, gone);
  return CUDA_SUCCESS;
}

void IpcOpener::unmap(CUdeviceptr va, const Mapping& m) noexcept {
  calls_.cuMemUnmap(va, m.size);
  calls_.cuMemRelease(m.handle);
  calls_.cuMemAddressFree(va, m.size);
}

void IpcOpener::after_fork_in_child() noexcept {
  new (&mutex_) std::mutex();
  mappings_.clear();
  by_key_.clear();
}

std::size_t IpcOpener::open_mappings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return mappings_.size();
}

}  // namespace fracgpu
