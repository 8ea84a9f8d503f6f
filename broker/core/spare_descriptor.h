// Two descriptors the broker keeps open on /dev/null, process-wide, so that at the
// descriptor limit (EMFILE) the control plane still works: the admin socket closes one
// to accept a single connection (served if it is root, who can then delete tenants and
// so free descriptors; told why and closed otherwise), and the admin request handler
// closes the other while it runs, so that the request can open a file (the state file a
// `tenant delete` rewrites). Both are opened again as soon as descriptors are free.
// Single-threaded use (the event loop); ensure() is one comparison when both are held.
#pragma once

#include <cstddef>

namespace fracgpu::broker::spare_descriptor {

inline constexpr std::size_t kCount = 2;

// Opens the missing spares; true when all kCount are held.
bool ensure();
// Closes one spare; false if none was held.
bool release();
std::size_t held();

}  // namespace fracgpu::broker::spare_descriptor
