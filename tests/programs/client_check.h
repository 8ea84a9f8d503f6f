// CHECK(call) for the test programs: a driver call that fails ends the program with one
// JSON line naming the call and the error ({"error":"cuMemAlloc(...): CUDA_ERROR_..."}),
// the line the integration tests read. No hot path: the programs exist to be driven.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

namespace fracgpu::testprogram {

[[noreturn]] inline void die(const char* what, CUresult rc) {
  const char* name = "?";
  cuGetErrorName(rc, &name);
  std::printf("{\"error\":\"%s: %s\"}\n", what, name);
  std::exit(1);
}

}  // namespace fracgpu::testprogram

#define CHECK(call)                                                   \
  do {                                                                \
    CUresult rc_ = (call);                                            \
    if (rc_ != CUDA_SUCCESS) ::fracgpu::testprogram::die(#call, rc_); \
  } while (0)
