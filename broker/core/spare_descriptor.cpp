// The spare descriptors of spare_descriptor.h.
#include "core/spare_descriptor.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>

namespace fracgpu::broker::spare_descriptor {
namespace {

std::array<int, kCount> g_spares = {-1, -1};
std::size_t g_held = 0;  // g_spares[0 .. g_held) are open

}  // namespace

bool ensure() {
  while (g_held < kCount) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    g_spares[g_held++] = fd;
  }
  return true;
}

bool release() {
  if (g_held == 0) return false;
  ::close(g_spares[--g_held]);
  g_spares[g_held] = -1;
  return true;
}

std::size_t held() {
  return g_held;
}

}  // namespace fracgpu::broker::spare_descriptor
