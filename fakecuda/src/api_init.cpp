// Initialisation and version entry points: cuInit, cuDriverGetVersion and
// cuGetExportTable (the private export tables of the real driver do not exist here,
// so every request is CUDA_ERROR_NOT_SUPPORTED, which cudart treats as "absent").
#include "api_support.h"

namespace {
constexpr int kDriverVersion = 13000;
}

extern "C" CUresult fakecuda_impl_cuInit(unsigned int Flags) {
  return fakecuda::guarded([&] { return fakecuda::initialize_driver(Flags); });
}

extern "C" CUresult fakecuda_impl_cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = kDriverVersion;
  return CUDA_SUCCESS;
}

extern "C" CUresult fakecuda_impl_cuGetExportTable(const void** ppExportTable,
                                                   const CUuuid* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
