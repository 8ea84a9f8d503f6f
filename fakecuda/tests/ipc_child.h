// The IPC peer of fakecuda-test-child (ipc_child.cpp) and the handle text both sides use.
#pragma once

#include <cuda.h>

#include <string>

namespace fakecuda_test {

// `fakecuda-test-child ipc`: serves IPC commands on stdin (see ipc_child.cpp).
int ipc_peer();

// A CUipcMemHandle as 128 lowercase hex digits, and back.
std::string hex_of_handle(const CUipcMemHandle& handle);
bool handle_from_hex(const std::string& hex, CUipcMemHandle* handle);

}  // namespace fakecuda_test
