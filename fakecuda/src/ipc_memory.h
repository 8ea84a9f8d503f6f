// Legacy CUDA IPC of device memory: cuIpcGetMemHandle, cuIpcOpenMemHandle(_v2),
// cuIpcCloseMemHandle, as the real driver behaves on Linux.
//
// - A handle names the whole cuMemAlloc allocation that contains the pointer (an interior
//   pointer gives the base's handle, as measured on real drivers: openucx/ucx#11724), is the
//   same for every call on it and unique to it (a freed and reallocated address gets a new
//   one). Managed, VMM (cuMemCreate + cuMemMap), pool (cuMemAllocAsync) and graph memory are
//   refused with CUDA_ERROR_INVALID_VALUE — what the real driver returns for managed memory
//   (cupy/cupy#9306) and pool memory (openucx/ucx#10065: "invalid argument"); for VMM memory
//   the same code, by the same rule (only cuMemAlloc memory is legacy-IPC capable, see
//   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE).
// - Opening returns the allocation's base mapped at a new address of the opening process
//   (real CUDA maps it anew), in the current context; opening in the exporting process is
//   CUDA_ERROR_INVALID_CONTEXT (what the real driver answers); a second open of the same
//   handle in a process returns the same address and counts a reference, each
//   cuIpcCloseMemHandle drops one, the last unmaps. A handle of an allocation that was freed,
//   of a process that exited, of another simulated machine (FAKECUDA_SHM_NAME) or one that is
//   not a handle at all fails with CUDA_ERROR_INVALID_VALUE ("invalid argument", what real
//   drivers report for handles they cannot open: NVIDIA/nccl#842).
//
// How: device memory is a private anonymous mapping (device_memory.h), so the first export
// moves the allocation into a memfd at the same address (its non-zero pages copied, after
// the process's work has drained); the exporter keeps that descriptor open until the
// allocation is freed, and the opener reopens it through /proc/<pid>/fd/<n> (same uid as the
// exporter, or root), checking the memfd's name, which carries the exporter's pid and the
// allocation's buffer id. Writes of one process are then seen by the other at once.
// Not modelled: writes that another thread of the exporter makes to the allocation while
// its first cuIpcGetMemHandle copies it can be lost (a real GPU has no such window); the
// "one context per device per other process" restriction; the device of the opening
// context is not checked against the allocation's (all simulated GPUs are peers).
// Cost: the first export of an allocation copies its non-zero pages; nothing else changes
// for memory that is never exported.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace fakecuda {

class Driver;
class Context;

// What the 64 bytes of a CUipcMemHandle carry.
struct IpcMemHandleBytes {
  uint64_t magic;
  uint64_t machine;  // hash of the simulated device's segment name
  int32_t pid;       // the exporter
  int32_t fd;        // its memfd of the allocation
  uint64_t start_time;
  uint64_t buffer_id;  // the allocation (unique per process)
  uint64_t size;       // what cuMemAlloc was asked for
  uint64_t length;     // bytes mapped (page-rounded)
  uint32_t device;     // physical device
  uint32_t reserved;
};
static_assert(sizeof(IpcMemHandleBytes) <= sizeof(CUipcMemHandle));

class IpcMemory {
 public:
  CUresult get_handle(Driver& driver, CUdeviceptr ptr, CUipcMemHandle& out);
  CUresult open(Driver& driver, Context& context, const CUipcMemHandle& handle, unsigned flags,
                CUdeviceptr& out);
  CUresult close(Driver& driver, CUdeviceptr ptr);

 private:
  struct Key {
    int32_t pid;
    uint64_t start_time;
    uint64_t buffer_id;
    bool operator<(const Key& other) const;
  };
  struct Opened {
    uintptr_t base = 0;
    int references = 0;
  };

  CUresult share(Driver& driver, uintptr_t base, int& fd);  // under mutex_
  CUresult map_remote(Driver& driver, Context& context, const IpcMemHandleBytes& bytes,
                      CUdeviceptr& out);

  std::mutex mutex_;
  std::map<Key, Opened> opened_;
  std::map<uintptr_t, Key> by_base_;
};

// The memfd name an exported allocation gets (checked by the opener).
std::string ipc_memfd_name(int32_t pid, uint64_t buffer_id);

}  // namespace fakecuda
