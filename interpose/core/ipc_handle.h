// The legacy CUDA IPC handles fracgpu hands out for memory the shim backs itself (a
// swappable tenant's cuMemAlloc, core/swap_engine.h), and the messages of the exporter's
// IPC server (core/ipc_exporter.h, core/ipc_opener.h).
//
// A CUipcMemHandle is 64 opaque bytes the application copies to another process. Ours are
//   magic "FGPUIPC1" | version | exporter pid | exporter nonce | allocation id | size | check
// — the pid and the nonce (random per process, new in a forked child) name the exporter's
// server, an abstract-namespace Unix socket "fracgpu-ipc-<pid>-<nonce>"; the id names the
// allocation in that process (a freed allocation's id is never reused); the size is the
// mapped size (granularity-rounded); the check word rejects a real driver's handle that
// happens to start with our magic. Anything else is a driver handle and goes to the driver.
// Cost: none on any hot path (only the cuIpc* calls use it).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fracgpu {

inline constexpr uint64_t kIpcHandleMagic = 0x3143'5049'5550'4746ull;  // "FGPUIPC1"
inline constexpr uint32_t kIpcProtocolVersion = 1;

// What a handle says.
struct IpcHandleFields {
  int32_t pid = 0;     // the exporting process, in its pid namespace
  uint64_t nonce = 0;  // the exporting process's nonce
  uint64_t id = 0;     // the allocation, unique in that process
  uint64_t size = 0;   // bytes to map

  bool operator==(const IpcHandleFields&) const = default;
};

void encode_ipc_handle(const IpcHandleFields& fields, CUipcMemHandle* handle);
// The fields of one of our handles; nullopt for any other 64 bytes.
std::optional<IpcHandleFields> decode_ipc_handle(const CUipcMemHandle& handle);

// The abstract socket name (without its leading NUL) of an exporter's server.
std::string ipc_socket_name(int32_t pid, uint64_t nonce);

// One request per connection (SOCK_SEQPACKET), one reply, the descriptor attached to a
// successful reply (SCM_RIGHTS).
struct IpcRequest {
  uint64_t magic = kIpcHandleMagic;
  uint32_t version = kIpcProtocolVersion;
  uint32_t reserved = 0;
  uint64_t nonce = 0;
  uint64_t id = 0;
  uint64_t size = 0;
};
struct IpcReply {
  uint64_t magic = kIpcHandleMagic;
  int32_t status = 0;  // a CUresult: what the opener's cuIpcOpenMemHandle returns on failure
  uint32_t reserved = 0;
  uint64_t size = 0;
};

// A random 64-bit value (the kernel's; a time- and address-mixed one where it has none).
uint64_t random_nonce();

}  // namespace fracgpu
