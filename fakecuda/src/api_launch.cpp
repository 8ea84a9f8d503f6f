// Kernel launch entry points: cuLaunchKernel, cuLaunchKernelEx and
// cuLaunchCooperativeKernel with their _ptsz variants. A launch validates its
// configuration like the real driver, copies the arguments, and submits a
// KernelLaunch to the stream — or records it as a graph node while capturing.
#include "api_support.h"
#include "capture.h"
#include "device_attributes.h"
#include "module.h"
#include "operations.h"
#include "stream.h"

using namespace fakecuda;

namespace {

constexpr unsigned kMaxBlockThreads = 1024;
constexpr unsigned kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimYZ = 65535;

struct LaunchShape {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
};

CUresult check_shape(const LaunchShape& shape, Function& function, bool cooperative) {
  for (unsigned dim : shape.grid) {
    if (dim == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned dim : shape.block) {
    if (dim == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t threads = uint64_t{shape.block[0]} * shape.block[1] * shape.block[2];
  if (threads > kMaxBlockThreads || shape.block[2] > kMaxBlockDimZ) return CUDA_ERROR_INVALID_VALUE;
  if (shape.grid[1] > kMaxGridDimYZ || shape.grid[2] > kMaxGridDimYZ)
    return CUDA_ERROR_INVALID_VALUE;
  if (shape.shared_bytes > static_cast<unsigned>(function.max_dynamic_shared_bytes()))
    return CUDA_ERROR_INVALID_VALUE;
  if (cooperative) {
    uint64_t blocks = uint64_t{shape.grid[0]} * shape.grid[1] * shape.grid[2];
    uint64_t resident = uint64_t(max_active_blocks(static_cast<int>(threads), shape.shared_bytes)) *
                        kMultiprocessorCount;
    if (blocks > resident) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  return CUDA_SUCCESS;
}

CUresult launch(CUfunction f, const LaunchShape& shape, CUstream hStream, void** params,
                void** extra, bool cooperative) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Function> function = driver.handles.get<Function>(f);
    if (!function) return CUDA_ERROR_INVALID_HANDLE;
    CUresult status = check_shape(shape, *function, cooperative);
    if (status != CUDA_SUCCESS) return status;
    KernelLaunch op;
    op.kernel = function->kernel;
    op.function = f;
    std::copy(std::begin(shape.grid), std::end(shape.grid), op.grid);
    std::copy(std::begin(shape.block), std::end(shape.block), op.block);
    op.shared_bytes = shape.shared_bytes;
    if ((status = gather_kernel_args(*function->kernel, params, extra, op.args)) != CUDA_SUCCESS)
      return status;
    if ((status = check_stream_use(hStream)) != CUDA_SUCCESS) return status;  // see capture.h
    std::shared_ptr<Stream> stream;
    if ((status = resolve_stream(hStream, stream)) != CUDA_SUCCESS) return status;
    return submit_operation(*stream, std::move(op));
  });
}

CUresult launch_classic(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream stream, void** params,
                        void** extra, bool cooperative) {
  return launch(f, LaunchShape{{gx, gy, gz}, {bx, by, bz}, shared}, stream, params, extra,
                cooperative);
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra,
                   bool per_thread) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
      cooperative = config->attrs[i].value.cooperative != 0;
  }
  LaunchShape shape{{config->gridDimX, config->gridDimY, config->gridDimZ},
                    {config->blockDimX, config->blockDimY, config->blockDimZ},
                    config->sharedMemBytes};
  CUstream stream = per_thread ? per_thread_handle(config->hStream) : config->hStream;
  return launch(f, shape, stream, params, extra, cooperative);
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                                                 unsigned int gridDimY, unsigned int gridDimZ,
                                                 unsigned int blockDimX, unsigned int blockDimY,
                                                 unsigned int blockDimZ,
                                                 unsigned int sharedMemBytes, CUstream hStream,
                                                 void** kernelParams, void** extra) {
  return launch_classic(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                        sharedMemBytes, hStream, kernelParams, extra, false);
}

extern "C" CUresult fakecuda_impl_cuLaunchKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch_classic(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                        sharedMemBytes, per_thread_handle(hStream), kernelParams, extra, false);
}

extern "C" CUresult fakecuda_impl_cuLaunchCooperativeKernel(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  return launch_classic(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                        sharedMemBytes, hStream, kernelParams, nullptr, true);
}

extern "C" CUresult fakecuda_impl_cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream hStream, void** kernelParams) {
  return launch_classic(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                        sharedMemBytes, per_thread_handle(hStream), kernelParams, nullptr, true);
}

extern "C" CUresult fakecuda_impl_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                                   void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, false);
}

extern "C" CUresult fakecuda_impl_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                        void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, true);
}
