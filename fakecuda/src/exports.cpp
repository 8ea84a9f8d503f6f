// Generates, from entry_points.def, the exported symbols and the entry-point table.
// Each exported `cuX` is a two-instruction x86-64 trampoline that jumps directly to
// the hidden `fakecuda_impl_cuX`: arguments pass through untouched (no need to
// restate any signature), and because the jump targets a hidden symbol the linker
// binds it inside this library — a preloaded interposer that exports the same cu*
// names can never capture the library's internal calls. The hidden alias
// `fakecuda_export_cuX` lets the table take each exported symbol's address without
// going through the (interposable) dynamic symbol.
#include "exports.h"

#include <iterator>

#include "entry_points.h"

#define FAKECUDA_ENTRY(name, base, version, suffix)        \
  asm(".pushsection .text\n"                               \
      ".p2align 4\n"                                       \
      ".globl " #name                                      \
      "\n"                                                 \
      ".type " #name                                       \
      ", @function\n"                                      \
      ".globl fakecuda_export_" #name                      \
      "\n"                                                 \
      ".hidden fakecuda_export_" #name                     \
      "\n"                                                 \
      ".type fakecuda_export_" #name ", @function\n" #name \
      ":\n"                                                \
      "fakecuda_export_" #name                             \
      ":\n"                                                \
      "  endbr64\n"                                        \
      "  jmp fakecuda_impl_" #name                         \
      "\n"                                                 \
      ".size " #name ", .-" #name                          \
      "\n"                                                 \
      ".size fakecuda_export_" #name ", .-" #name          \
      "\n"                                                 \
      ".popsection\n");
#include "entry_points.def"
#undef FAKECUDA_ENTRY

#define FAKECUDA_ENTRY(name, base, version, suffix) \
  __attribute__((visibility("hidden"))) void fakecuda_export_##name();
extern "C" {
#include "entry_points.def"
}
#undef FAKECUDA_ENTRY

namespace fakecuda {
namespace {

#define FAKECUDA_ENTRY(name, base, version, suffix)      \
  EntryPoint{#name, #base, version, sizeof(#suffix) > 1, \
             reinterpret_cast<void*>(&fakecuda_export_##name)},
const EntryPoint kEntryPoints[] = {
#include "entry_points.def"
};
#undef FAKECUDA_ENTRY

}  // namespace

std::span<const EntryPoint> entry_points() {
  return {kEntryPoints, std::size(kEntryPoints)};
}

}  // namespace fakecuda
