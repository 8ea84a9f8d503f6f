// CUDA arrays and mipmapped arrays. They are opaque on a real GPU and textures are not
// simulated, so an array is just its descriptor plus the device memory it is charged:
// width × height × depth × channels × element size (a mipmapped array: the sum over
// its levels). The charge is what matters for memory-cap tests.
#pragma once

#include <cuda.h>

#include "handle_registry.h"

namespace fakecuda {

class Driver;

class Array : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Array;
  Array(const CUDA_ARRAY3D_DESCRIPTOR& array_descriptor, uint32_t owner_device, uint64_t charged)
      : HandleObject(kKind),
        descriptor(array_descriptor),
        device(owner_device),
        charged_bytes(charged) {}
  CUarray handle() { return reinterpret_cast<CUarray>(this); }

  const CUDA_ARRAY3D_DESCRIPTOR descriptor;
  const uint32_t device;
  const uint64_t charged_bytes;
};

class MipmappedArray : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::MipmappedArray;
  MipmappedArray(const CUDA_ARRAY3D_DESCRIPTOR& array_descriptor, unsigned level_count,
                 uint32_t owner_device, uint64_t charged)
      : HandleObject(kKind),
        descriptor(array_descriptor),
        levels(level_count),
        device(owner_device),
        charged_bytes(charged) {}
  CUmipmappedArray handle() { return reinterpret_cast<CUmipmappedArray>(this); }

  const CUDA_ARRAY3D_DESCRIPTOR descriptor;
  const unsigned levels;
  const uint32_t device;
  const uint64_t charged_bytes;
};

// Bytes of one element of `format` (0 for an unknown format).
size_t array_format_bytes(CUarray_format format);

// Device bytes of an array with this descriptor at mip level `level` (0 if invalid).
uint64_t array_level_bytes(const CUDA_ARRAY3D_DESCRIPTOR& descriptor, unsigned level);

// Uncharges and unregisters every array of this process (shutdown).
void release_all_arrays(Driver& driver);

}  // namespace fakecuda
