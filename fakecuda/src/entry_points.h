// Declarations of the internal implementation of every exported entry point,
// generated from entry_points.def. Each `fakecuda_impl_<exported name>` is declared
// with the toolkit's PFN_ typedef for that ABI version, so an implementation whose
// parameters differ from the real driver's does not compile. The exported symbols
// themselves are assembly trampolines (exports.cpp) that jump straight here.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

#define FAKECUDA_ENTRY(name, base, version, suffix)                                            \
  __attribute__((visibility("hidden"))) std::remove_pointer_t<PFN_##base##_v##version##suffix> \
      fakecuda_impl_##name;

extern "C" {
#include "entry_points.def"
}

#undef FAKECUDA_ENTRY
