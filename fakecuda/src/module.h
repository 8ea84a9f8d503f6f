// Modules, libraries and functions. No device code can run here, so loading accepts
// any image and every module (and library) exposes the simulated kernels of
// kernels.h by name. A CUfunction and a CUkernel are both handles of a Function
// object: cuKernelGetFunction returns the kernel itself, which the real driver also
// allows to be launched directly.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "handle_registry.h"
#include "kernels.h"

namespace fakecuda {

class Function : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Function;
  Function(const KernelDef* definition, CUmodule owner)
      : HandleObject(kKind), kernel(definition), module(owner) {}
  CUfunction handle() { return reinterpret_cast<CUfunction>(this); }

  CUresult get_attribute(CUfunction_attribute attribute, int& value);
  CUresult set_attribute(CUfunction_attribute attribute, int value);
  int max_dynamic_shared_bytes();

  const KernelDef* const kernel;
  const CUmodule module;

 private:
  std::mutex mutex_;
  std::map<int, int> overrides_;  // attributes set through cuFuncSetAttribute
};

class Module : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Module;
  Module() : HandleObject(kKind) {}
  CUmodule handle() { return reinterpret_cast<CUmodule>(this); }

  // The module's Function for `name` (created on first use); CUDA_ERROR_NOT_FOUND if
  // the simulated GPU has no kernel of that name.
  CUresult function(HandleRegistry& handles, const char* name, CUfunction& out);
  // Unregisters the module's functions (module unloaded).
  void forget_functions(HandleRegistry& handles);

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Function>> functions_;
};

class Library : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Library;
  explicit Library(std::shared_ptr<Module> code) : HandleObject(kKind), module(std::move(code)) {}
  CUlibrary handle() { return reinterpret_cast<CUlibrary>(this); }

  const std::shared_ptr<Module> module;
};

// Resident blocks per SM for a block size and dynamic shared memory (occupancy).
int max_active_blocks(int block_size, size_t dynamic_shared_bytes);

}  // namespace fakecuda
