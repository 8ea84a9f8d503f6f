// Whether this test program runs beside an empty node run directory (hermetic_node.cpp):
// its own mount namespace, in which /run/fracgpu and /run/fracgpu-mps are empty tmpfs
// directories that a test may fill, e.g. with a stale node layout, without touching the
// host. Set before main(); read-only afterwards.
#pragma once

namespace fracgpu::testing {

// True when the private view was made (the test program runs as root).
bool node_run_dir_is_private();

// "private", or why not (for a GTEST_SKIP message).
const char* node_run_dir_state();

}  // namespace fracgpu::testing
