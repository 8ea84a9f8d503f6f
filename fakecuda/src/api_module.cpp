// Module, library, function and occupancy entry points. Images are never parsed:
// every load succeeds (cuModuleLoad only checks that the file exists) and resolves the
// simulated kernels by name (see kernels.h and module.h).
#include <algorithm>
#include <cstdio>

#include "api_support.h"
#include "capture.h"
#include "module.h"

using namespace fakecuda;

namespace {

CUresult load_module(CUmodule* module) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context&) {
    if (CUresult status = check_unsafe_call(); status != CUDA_SUCCESS) return status;  // may sync
    auto loaded = std::make_shared<Module>();
    driver.handles.add(loaded);
    *module = loaded->handle();
    return CUDA_SUCCESS;
  });
}

CUresult load_library(CUlibrary* library) {
  if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (CUresult status = check_unsafe_call(); status != CUDA_SUCCESS) return status;  // may sync
    auto module = std::make_shared<Module>();
    auto loaded = std::make_shared<Library>(module);
    driver.handles.add(module);
    driver.handles.add(loaded);
    *library = loaded->handle();
    return CUDA_SUCCESS;
  });
}

bool file_exists(const char* path) {
  FILE* file = std::fopen(path, "rb");
  if (file == nullptr) return false;
  std::fclose(file);
  return true;
}

template <typename Body>
CUresult with_function(const void* handle, Body&& body) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Function> function = driver.handles.get<Function>(handle);
    if (!function) return CUDA_ERROR_INVALID_HANDLE;
    return body(driver, *function);
  });
}

CUresult occupancy(int* num_blocks, CUfunction func, int block_size, size_t dynamic_shared) {
  if (num_blocks == nullptr || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  return with_function(func, [&](Driver&, Function&) {
    *num_blocks = block_size > 1024 ? 0 : max_active_blocks(block_size, dynamic_shared);
    return CUDA_SUCCESS;
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuModuleLoad(CUmodule* module, const char* fname) {
  if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!file_exists(fname)) return CUDA_ERROR_FILE_NOT_FOUND;
  return load_module(module);
}

extern "C" CUresult fakecuda_impl_cuModuleLoadData(CUmodule* module, const void* image) {
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return load_module(module);
}

extern "C" CUresult fakecuda_impl_cuModuleLoadDataEx(CUmodule* module, const void* image,
                                                     unsigned int numOptions, CUjit_option* options,
                                                     void** optionValues) {
  if (image == nullptr || (numOptions > 0 && (options == nullptr || optionValues == nullptr))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return load_module(module);
}

extern "C" CUresult fakecuda_impl_cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  if (fatCubin == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return load_module(module);
}

extern "C" CUresult fakecuda_impl_cuModuleUnload(CUmodule hmod) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Module> module = driver.handles.take<Module>(hmod);
    if (!module) return CUDA_ERROR_INVALID_HANDLE;
    module->forget_functions(driver.handles);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod,
                                                      const char* name) {
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Module> module = driver.handles.get<Module>(hmod);
    if (!module) return CUDA_ERROR_INVALID_HANDLE;
    return module->function(driver.handles, name, *hfunc);
  });
}

extern "C" CUresult fakecuda_impl_cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver&) {
    *mode = CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuLibraryLoadData(CUlibrary* library, const void* code,
                                                    CUjit_option*, void**, unsigned int,
                                                    CUlibraryOption*, void**, unsigned int) {
  if (code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return load_library(library);
}

extern "C" CUresult fakecuda_impl_cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                                        CUjit_option*, void**, unsigned int,
                                                        CUlibraryOption*, void**, unsigned int) {
  if (fileName == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!file_exists(fileName)) return CUDA_ERROR_FILE_NOT_FOUND;
  return load_library(library);
}

extern "C" CUresult fakecuda_impl_cuLibraryUnload(CUlibrary library) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Library> loaded = driver.handles.take<Library>(library);
    if (!loaded) return CUDA_ERROR_INVALID_HANDLE;
    if (driver.handles.take<Module>(loaded->module.get()))
      loaded->module->forget_functions(driver.handles);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library,
                                                     const char* name) {
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Library> loaded = driver.handles.get<Library>(library);
    if (!loaded) return CUDA_ERROR_INVALID_HANDLE;
    CUfunction function = nullptr;
    CUresult status = loaded->module->function(driver.handles, name, function);
    if (status == CUDA_SUCCESS) *pKernel = reinterpret_cast<CUkernel>(function);
    return status;
  });
}

extern "C" CUresult fakecuda_impl_cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context&) {
    std::shared_ptr<Library> loaded = driver.handles.get<Library>(library);
    if (!loaded) return CUDA_ERROR_INVALID_HANDLE;
    *pMod = loaded->module->handle();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_function(kernel, [&](Driver&, Function& function) {
    *pFunc = function.handle();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuKernelGetAttribute(int* pi, CUfunction_attribute attrib,
                                                       CUkernel kernel, CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_function(kernel, [&](Driver& driver, Function& function) {
    if (!driver.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    return function.get_attribute(attrib, *pi);
  });
}

extern "C" CUresult fakecuda_impl_cuKernelSetAttribute(CUfunction_attribute attrib, int val,
                                                       CUkernel kernel, CUdevice dev) {
  return with_function(kernel, [&](Driver& driver, Function& function) {
    if (!driver.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    return function.set_attribute(attrib, val);
  });
}

extern "C" CUresult fakecuda_impl_cuFuncGetAttribute(int* pi, CUfunction_attribute attrib,
                                                     CUfunction hfunc) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_function(
      hfunc, [&](Driver&, Function& function) { return function.get_attribute(attrib, *pi); });
}

extern "C" CUresult fakecuda_impl_cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib,
                                                     int value) {
  return with_function(
      hfunc, [&](Driver&, Function& function) { return function.set_attribute(attrib, value); });
}

extern "C" CUresult fakecuda_impl_cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)
    return CUDA_ERROR_INVALID_VALUE;
  return with_function(hfunc, [](Driver&, Function&) { return CUDA_SUCCESS; });
}

extern "C" CUresult fakecuda_impl_cuFuncGetName(const char** name, CUfunction hfunc) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_function(hfunc, [&](Driver&, Function& function) {
    *name = function.kernel->name;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_function(hfunc, [&](Driver&, Function& function) {
    *hmod = function.module;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuOccupancyMaxActiveBlocksPerMultiprocessor(
    int* numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize) {
  return occupancy(numBlocks, func, blockSize, dynamicSMemSize);
}

extern "C" CUresult fakecuda_impl_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize, unsigned int flags) {
  if (flags != CU_OCCUPANCY_DEFAULT && flags != CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
    return CUDA_ERROR_INVALID_VALUE;
  return occupancy(numBlocks, func, blockSize, dynamicSMemSize);
}
