// Parsing and printing of the quantities users type: memory sizes ("8GiB", "1.5 gb",
// "1073741824") and compute shares ("30", "30%"). Used by the CLI before anything is
// started, so that bad input gets one clear sentence and nothing runs; the broker
// itself only ever sees integers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace fracgpu::broker {

// Sizes: plain bytes, binary units KiB/MiB/GiB/TiB (powers of 1024) or decimal units
// KB/MB/GB/TB (powers of 1000), unit case-insensitive, optional "B" for bytes, optional
// spaces before the unit, decimals allowed with a unit ("1.5GiB", rounded down to whole
// bytes). Rejected: empty, negative, zero, garbage, bare "G"/"Gi" (ambiguous), fractional
// bytes, values above 2^64-1. `what` names the quantity in the error ("--memory").
Result<uint64_t> parse_size(std::string_view text, std::string_view what);

// Like parse_size but 0 is accepted (a memory request of 0 means "no guarantee").
Result<uint64_t> parse_size_allow_zero(std::string_view text, std::string_view what);

// Compute share or ceiling in percent of one GPU: an integer 1..100, optional "%".
Result<uint32_t> parse_percent(std::string_view text, std::string_view what);

// "16 GiB", "1.5 GiB", "512 MiB", "100 B": the shortest exact-ish human form
// (one decimal at most), used in tables and in error sentences.
std::string format_size(uint64_t bytes);

}  // namespace fracgpu::broker
