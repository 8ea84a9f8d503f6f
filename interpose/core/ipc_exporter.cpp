// The exporting side of fracgpu's legacy-IPC emulation and its descriptor server (see
// ipc_exporter.h).
#include "core/ipc_exporter.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>

#include "core/shim_log.h"
#include "fracgpu/descriptor_passing.h"

namespace fracgpu {
namespace {

constexpr std::size_t kServerStack = 128 * 1024;

// An abstract-namespace address for `name` (no file, gone with the socket).
socklen_t abstract_address(const std::string& name, sockaddr_un* address) {
  std::memset(address, 0, sizeof *address);
  address->sun_family = AF_UNIX;
  const std::size_t length = std::min(name.size(), sizeof address->sun_path - 1);
  std::memcpy(address->sun_path + 1, name.data(), length);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
}

void set_timeouts(int fd, int milliseconds) {
  timeval tv{milliseconds / 1000, (milliseconds % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

IpcExporter::IpcExporter(ShareableMemory& memory, const IpcDriverCalls& calls, IpcAccessRule rule)
    : memory_(memory), calls_(calls), rule_(rule), pid_(getpid()), nonce_(random_nonce()) {}

IpcExporter::~IpcExporter() {
  if (serving_) {
    const char stop = 's';
    while (::write(stop_pipe_[1], &stop, 1) < 0 && errno == EINTR) {
    }
    pthread_join(thread_, nullptr);
  }
  close_fd(listener_);
  close_fd(stop_pipe_[0]);
  close_fd(stop_pipe_[1]);
  for (auto& [base, e] : exports_) close_fd(e.fd);
}

std::optional<CUresult> IpcExporter::get_handle(CUipcMemHandle* handle, CUdeviceptr ptr) noexcept {
  ShareableAllocation allocation;
  const std::optional<CUresult> pinned = memory_.pin_for_sharing(ptr, &allocation);
  if (!pinned) return std::nullopt;  // the driver's own memory: its own IPC
  if (*pinned != CUDA_SUCCESS) return *pinned;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = exports_.find(allocation.base);
  if (it == exports_.end()) {
    int fd = -1;
    const CUresult rc = calls_.can_export() ? calls_.cuMemExportToShareableHandle(
                                                  &fd, allocation.handle,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                                            : CUDA_ERROR_NOT_SUPPORTED;
    if (rc != CUDA_SUCCESS || fd < 0) {
      FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8,
                         "cannot share the allocation at 0x%llx with another process (the driver "
                         "cannot export it, CUDA error %d); it stays on the GPU",
                         static_cast<unsigned long long>(allocation.base), static_cast<int>(rc));
      // What cuIpcGetMemHandle answers for memory it cannot share.
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (!serving_ && !start_server()) {
      ::close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    it = exports_.emplace(allocation.base, Export{next_id_++, allocation.size, fd}).first;
  }
  encode_ipc_handle({pid_.load(std::memory_order_relaxed), nonce_.load(std::memory_order_relaxed),
                     it->second.id, it->second.size},
                    handle);
  return CUDA_SUCCESS;
}

void IpcExporter::shared_allocation_freed(CUdeviceptr base) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = exports_.find(base);
  if (it == exports_.end()) return;
  close_fd(it->second.fd);
  exports_.erase(it);
}

std::size_t IpcExporter::exports() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exports_.size();
}

bool IpcExporter::start_server() noexcept {
  const std::string name = ipc_socket_name(pid_.load(), nonce_.load());
  sockaddr_un address{};
  const socklen_t length = abstract_address(name, &address);
  listener_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  bool ok = listener_ >= 0 &&
            ::bind(listener_, reinterpret_cast<const sockaddr*>(&address), length) == 0 &&
            ::listen(listener_, 64) == 0 && ::pipe2(stop_pipe_, O_CLOEXEC) == 0;
  if (ok) {
    // The server takes no signal: the application's go to its own threads.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kServerStack);
    server_running_.store(false, std::memory_order_relaxed);
    ok = pthread_create(&thread_, &attr, &IpcExporter::serve_main, this) == 0;
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    if (ok) server_running_.wait(false, std::memory_order_acquire);  // once per process
  }
  if (!ok) {
    FRACGPU_LOG(LogLevel::kWarn, "cannot start the IPC server %s (%s); IPC handles unavailable",
                name.c_str(), std::strerror(errno));
    close_fd(listener_);
    close_fd(stop_pipe_[0]);
    close_fd(stop_pipe_[1]);
    return false;
  }
  serving_ = true;
  return true;
}

void* IpcExporter::serve_main(void* exporter) noexcept {
  static_cast<IpcExporter*>(exporter)->serve();
  return nullptr;
}

void IpcExporter::serve() noexcept {
  server_running_.store(true, std::memory_order_release);
  server_running_.notify_one();
  for (;;) {
    pollfd fds[2] = {{listener_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int peer = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (peer < 0) continue;
    answer(peer);
    ::close(peer);
  }
}

void IpcExporter::answer(int peer) noexcept {
  set_timeouts(peer, kPeerTimeoutMs);
  ucred credentials{};
  socklen_t length = sizeof credentials;
  IpcReply reply;
  if (::getsockopt(peer, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0 ||
      !rule_.allows(credentials.uid)) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8,
                       "refused to share device memory with process %d (uid %u): only uid %u%s "
                       "may open this process's IPC handles",
                       static_cast<int>(credentials.pid), static_cast<unsigned>(credentials.uid),
                       static_cast<unsigned>(rule_.owner),
                       rule_.root_allowed && rule_.owner != 0 ? " or root" : "");
    reply.status = CUDA_ERROR_INVALID_VALUE;
    ::send(peer, &reply, sizeof reply, MSG_NOSIGNAL);
    return;
  }
  IpcRequest request;
  if (::recv(peer, &request, sizeof request, 0) != static_cast<ssize_t>(sizeof request)) return;
  int fd = -1;
  reply = lookup(request, &fd);
  if (fd < 0) {
    ::send(peer, &reply, sizeof reply, MSG_NOSIGNAL);
    return;
  }
  if (descriptor_passing::send_with(peer, &reply, sizeof reply, fd, MSG_NOSIGNAL) ==
      static_cast<ssize_t>(sizeof reply))
    served_.fetch_add(1, std::memory_order_relaxed);
  ::close(fd);
}

// The export a request names, as a duplicate descriptor the caller sends and closes.
IpcReply IpcExporter::lookup(const IpcRequest& request, int* fd) noexcept {
  IpcReply reply;
  // A stale or foreign handle: what the driver answers for a handle it cannot open.
  reply.status = CUDA_ERROR_INVALID_VALUE;
  if (request.magic != kIpcHandleMagic || request.version != kIpcProtocolVersion ||
      request.nonce != nonce_.load(std::memory_order_relaxed))
    return reply;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [base, e] : exports_) {
    if (e.id != request.id) continue;
    if (e.size != request.size) return reply;
    *fd = ::fcntl(e.fd, F_DUPFD_CLOEXEC, 0);
    if (*fd < 0) return reply;
    reply.status = CUDA_SUCCESS;
    reply.size = e.size;
    return reply;
  }
  return reply;  // freed: its export went with it
}

void IpcExporter::after_fork_in_child() noexcept {
  new (&mutex_) std::mutex();  // another thread may have held it at the fork
  close_fd(listener_);
  close_fd(stop_pipe_[0]);
  close_fd(stop_pipe_[1]);
  serving_ = false;
  thread_ = pthread_t{};
  for (auto& [base, e] : exports_) close_fd(e.fd);
  exports_.clear();
  pid_.store(getpid(), std::memory_order_relaxed);
  nonce_.store(random_nonce(), std::memory_order_relaxed);
}

}  // namespace fracgpu
