// Execution and submission of device operations (see operations.h).
#include "operations.h"

#include <algorithm>
#include <cstring>

#include "allocation_registry.h"
#include "capture.h"
#include "config.h"
#include "device_attributes.h"
#include "stream.h"
#include "stream_queue.h"

namespace fakecuda {
namespace {

constexpr int64_t kMinTransferNs = 1000;

template <typename... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <typename... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

size_t memset_extent(const MemsetOp& op) {
  return (op.height - 1) * op.pitch + op.width * op.element_size;
}

void fill_row(unsigned char* row, const MemsetOp& op) {
  switch (op.element_size) {
    case 1:
      std::memset(row, static_cast<int>(op.value & 0xff), op.width);
      break;
    case 2: {
      auto value = static_cast<uint16_t>(op.value);
      for (size_t i = 0; i < op.width; ++i) std::memcpy(row + 2 * i, &value, 2);
      break;
    }
    default:
      for (size_t i = 0; i < op.width; ++i) std::memcpy(row + 4 * i, &op.value, 4);
      break;
  }
}

void execute_memset(const MemsetOp& op, WorkScope& scope) {
  if (op.width == 0 || op.height == 0) return;
  if (!scope.memory.covers(op.dst, memset_extent(op))) {
    scope.queue.fail(CUDA_ERROR_ILLEGAL_ADDRESS);  // freed between submission and execution
    return;
  }
  scope.engine.run_at_least(transfer_time_ns(op.width * op.element_size * op.height), [&] {
    for (size_t row = 0; row < op.height; ++row)
      fill_row(reinterpret_cast<unsigned char*>(op.dst + row * op.pitch), op);
  });
}

// A copy holds the engine in pieces of about this size, each on its own: one the host is
// slow over (fresh pages on a loaded machine: hundreds of milliseconds for 128 MiB) then
// yields at the timeslice while other contexts wait, as a kernel does, instead of holding
// the whole device for it (a real GPU's copy engines do not stop other contexts' kernels).
constexpr size_t kCopyPieceBytes = 1u << 20;

void execute_memcpy(const MemcpyOp& op, WorkScope& scope) {
  if (op.width == 0 || op.height == 0) return;
  const unsigned char* source =
      op.staging ? op.staging->data() : reinterpret_cast<const unsigned char*>(op.src);
  size_t source_pitch = op.staging ? op.width : op.src_pitch;
  auto copy = [&](size_t row, size_t offset, size_t bytes) {
    std::memmove(reinterpret_cast<unsigned char*>(op.dst + row * op.dst_pitch + offset),
                 source + row * source_pitch + offset, bytes);
  };
  const size_t rows_per_piece = std::max<size_t>(1, kCopyPieceBytes / op.width);
  for (size_t row = 0; row < op.height; row += rows_per_piece) {
    const size_t rows = std::min(rows_per_piece, op.height - row);
    if (rows == 1 && op.width > kCopyPieceBytes) {  // one long row: in pieces of it
      for (size_t offset = 0; offset < op.width; offset += kCopyPieceBytes) {
        const size_t bytes = std::min(kCopyPieceBytes, op.width - offset);
        scope.engine.run_at_least(copy_time_ns(bytes), [&] { copy(row, offset, bytes); });
      }
      continue;
    }
    scope.engine.run_at_least(copy_time_ns(rows * op.width), [&] {
      for (size_t r = row; r < row + rows; ++r) copy(r, 0, op.width);
    });
  }
}

// The fraction of the SMs a launch can occupy: its blocks over the SM count, at most all
// of them (what an MPS client's kernel takes of the device, mps_state.h).
double sm_demand(const KernelLaunch& launch) {
  const double blocks = static_cast<double>(launch.grid[0]) * launch.grid[1] * launch.grid[2];
  return std::min(1.0, blocks / kMultiprocessorCount);
}

}  // namespace

int64_t transfer_time_ns(size_t bytes) {
  // 1000 GB/s = 1 byte per picosecond.
  return std::max<int64_t>(kMinTransferNs, static_cast<int64_t>(bytes / 1000));
}

int64_t copy_time_ns(size_t bytes) {
  static const uint64_t bandwidth = copy_bytes_per_second("fakecuda");
  const int64_t device = transfer_time_ns(bytes);
  if (bandwidth == 0) return device;
  const double ns = static_cast<double>(bytes) / static_cast<double>(bandwidth) * 1e9;
  return std::max(device, static_cast<int64_t>(ns));
}

CUgraphNodeType node_type(const Operation& op) {
  return std::visit(Overloaded{
                        [](const EmptyOp&) { return CU_GRAPH_NODE_TYPE_EMPTY; },
                        [](const KernelLaunch&) { return CU_GRAPH_NODE_TYPE_KERNEL; },
                        [](const MemsetOp&) { return CU_GRAPH_NODE_TYPE_MEMSET; },
                        [](const MemcpyOp&) { return CU_GRAPH_NODE_TYPE_MEMCPY; },
                        [](const HostCallOp&) { return CU_GRAPH_NODE_TYPE_HOST; },
                        [](const MemAllocOp&) { return CU_GRAPH_NODE_TYPE_MEM_ALLOC; },
                        [](const MemFreeOp&) { return CU_GRAPH_NODE_TYPE_MEM_FREE; },
                        [](const ChildGraphOp&) { return CU_GRAPH_NODE_TYPE_GRAPH; },
                        [](const ConditionalOp&) { return CU_GRAPH_NODE_TYPE_CONDITIONAL; },
                    },
                    op);
}

void execute_operation(const Operation& op, WorkScope& scope) {
  const auto* kernel_launch = std::get_if<KernelLaunch>(&op);
  // Copies and sets take the whole device (an MPS client's share, mps_state.h).
  scope.engine.set_demand(kernel_launch != nullptr ? sm_demand(*kernel_launch) : 1.0);
  std::visit(
      Overloaded{
          [](const EmptyOp&) {},
          [&](const KernelLaunch& launch) { execute_kernel(*launch.kernel, launch.args, scope); },
          [&](const MemsetOp& memset) { execute_memset(memset, scope); },
          [&](const MemcpyOp& memcpy) { execute_memcpy(memcpy, scope); },
          [&](const HostCallOp& call) {
            scope.engine.release();  // the device is idle while the host function runs
            call.fn(call.user_data);
          },
          // Graph memory is mapped at launch and freed by bookkeeping at launch and
          // completion (mem_pool.h); child graphs and conditionals are expanded at
          // instantiation (graph.h), so these nodes do nothing when they are reached.
          [](const MemAllocOp&) {},
          [](const MemFreeOp&) {},
          [](const ChildGraphOp&) {},
          [](const ConditionalOp&) {},
      },
      op);
}

CUresult submit_operation(Stream& stream, Operation op) {
  CUresult result = CUDA_SUCCESS;
  if (capture_operation(stream, op, result)) return result;
  CUresult sticky = stream.queue().sticky_error();
  if (sticky != CUDA_SUCCESS) return sticky;
  stream.submit([op = std::move(op)](WorkScope& scope) { execute_operation(op, scope); });
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
