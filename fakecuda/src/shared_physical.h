// Physical memory that can leave its process: a VMM allocation whose CUmemAllocationProp
// asked for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (cuMemExportToShareableHandle hands out
// its memfd, cuMemImportFromShareableHandle takes it in another process). Such a memfd
// carries one page after the data, shared by every process that holds a handle of it: the
// device, the size, which processes hold it (one bit per process slot), and whose charge it
// is. The creator stays charged until the last live holder anywhere lets go, as on the real
// driver, where the memory lives while any handle or mapping of it exists in any process:
// an exporter that releases and unmaps while an importer still maps it gives nothing back
// under the importer; a holder that died (SIGKILL) holds nothing any more.
// Not modelled: a shareable fd that was never imported keeps the real driver's memory
// alive too; here only holders (processes with a handle or mapping) count.
// Cost: one page and one mapping per exportable allocation; nothing for the others.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

#include "memory_accounting.h"

namespace fakecuda {

inline constexpr uint64_t kSharedPhysicalMagic = 0x5348'5950'4b46'4346ull;  // "FCFKPYHS"
inline constexpr size_t kSharedHeaderBytes = 4096;

struct SharedPhysicalHeader {
  uint64_t magic;
  uint32_t device;  // physical device index
  uint32_t reserved;
  uint64_t size;          // bytes of data; the header page follows them in the memfd
  pthread_mutex_t guard;  // robust, process-shared: held to join or leave the holders
  uint64_t holders[kMaxProcesses / 64];  // bit per process slot holding a handle or mapping
  int32_t owner_slot;                    // the charge: the creator's process slot ...
  int32_t owner_pid;                     // ... and the process that held it
  uint64_t owner_start_time;
};
static_assert(sizeof(SharedPhysicalHeader) <= kSharedHeaderBytes);
static_assert(kMaxProcesses % 64 == 0);

// Sizes a fresh memfd for `size` bytes of data plus the header and fills the header in (this
// process the only holder, `owner` charged). Null on failure.
SharedPhysicalHeader* create_shared_header(int memfd, uint32_t device, uint64_t size,
                                           const ChargeOwner& owner);

// Maps the header of a memfd someone exported; null when `fd` is not such a memfd. The
// caller becomes a holder only with add_holder.
SharedPhysicalHeader* attach_shared_header(int fd);
// This process (the owner of `accounting`) holds it from now on.
void add_holder(SharedPhysicalHeader* header, const MemoryAccounting& accounting);

// This process lets go; when no live holder remains, the owner's charge goes back.
// Unmaps the header.
void release_shared_header(SharedPhysicalHeader* header, MemoryAccounting& accounting);

}  // namespace fakecuda
