// Encoding of fracgpu's IPC handles and the server's name (see ipc_handle.h).
#include "core/ipc_handle.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace fracgpu {
namespace {

// Byte layout inside CUipcMemHandle::reserved.
struct HandleLayout {
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t nonce;
  uint64_t id;
  uint64_t size;
  uint64_t check;
};
static_assert(sizeof(HandleLayout) <= sizeof(CUipcMemHandle));

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t check_of(const HandleLayout& h) {
  return mix(h.magic ^ mix(h.version ^ (uint64_t(uint32_t(h.pid)) << 32) ^
                           mix(h.nonce ^ mix(h.id ^ mix(h.size)))));
}

}  // namespace

void encode_ipc_handle(const IpcHandleFields& fields, CUipcMemHandle* handle) {
  HandleLayout h{};
  h.magic = kIpcHandleMagic;
  h.version = kIpcProtocolVersion;
  h.pid = fields.pid;
  h.nonce = fields.nonce;
  h.id = fields.id;
  h.size = fields.size;
  h.check = check_of(h);
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &h, sizeof h);
}

std::optional<IpcHandleFields> decode_ipc_handle(const CUipcMemHandle& handle) {
  HandleLayout h{};
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != kIpcHandleMagic || h.version != kIpcProtocolVersion || h.check != check_of(h))
    return std::nullopt;
  for (std::size_t i = sizeof h; i < sizeof handle.reserved; ++i)
    if (handle.reserved[i] != 0) return std::nullopt;
  return IpcHandleFields{h.pid, h.nonce, h.id, h.size};
}

std::string ipc_socket_name(int32_t pid, uint64_t nonce) {
  char name[64];
  std::snprintf(name, sizeof name, "fracgpu-ipc-%d-%016llx", static_cast<int>(pid),
                static_cast<unsigned long long>(nonce));
  return name;
}

uint64_t random_nonce() {
  uint64_t value = 0;
  // getrandom(2) by number: the shim runs on glibc older than its wrapper (2.25).
  if (syscall(SYS_getrandom, &value, sizeof value, 0) == static_cast<long>(sizeof value) &&
      value != 0)
    return value;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t n = ::read(fd, &value, sizeof value);
    ::close(fd);
    if (n == static_cast<ssize_t>(sizeof value) && value != 0) return value;
  }
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return mix(static_cast<uint64_t>(now.tv_nsec) ^ (static_cast<uint64_t>(now.tv_sec) << 30) ^
             (static_cast<uint64_t>(getpid()) << 48) ^ reinterpret_cast<uintptr_t>(&value)) |
         1;
}

}  // namespace fracgpu
