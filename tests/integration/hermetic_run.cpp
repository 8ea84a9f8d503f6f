// fracgpu-test-hermetic-run CMD [ARG]...: runs CMD in the hermetic test namespace of
// hermetic_node.cpp (an empty /run/fracgpu, the rest of /run as on the host), for tests that
// are not C++ programs linking fracgpu_test_process (the monitoring test's Python harness
// starts shim'd processes too). The namespace is entered by the linked constructor, before
// main(); main only execs. Exit 127 when CMD cannot be run.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "hermetic_node.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fracgpu-test-hermetic-run CMD [ARG]...\n");
    return 2;
  }
  // Said only when it matters; hermetic_node.cpp already named a node layout it could not hide.
  if (!fracgpu::testing::node_run_dir_is_private())
    std::fprintf(stderr, "fracgpu-test-hermetic-run: the host's /run is used (%s)\n",
                 fracgpu::testing::node_run_dir_state());
  ::execvp(argv[1], argv + 1);
  std::fprintf(stderr, "fracgpu-test-hermetic-run: cannot run %s: %s\n", argv[1],
               std::strerror(errno));
  return 127;
}
