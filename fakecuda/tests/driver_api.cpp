// Loading of the fake driver for tests (see driver_api.h).
#include "driver_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace fakecuda_test {
namespace {

[[noreturn]] void fail(const char* what, const char* detail) {
  std::fprintf(stderr, "fakecuda tests: %s: %s\n", what, detail != nullptr ? detail : "?");
  std::abort();
}

DriverApi load() {
  DriverApi api;
  api.handle = dlopen(FAKECUDA_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
  if (api.handle == nullptr) fail("dlopen " FAKECUDA_LIBRARY_PATH, dlerror());
#define FAKECUDA_TEST_LOAD(name, type)                         \
  api.name = reinterpret_cast<type>(dlsym(api.handle, #name)); \
  if (api.name == nullptr) fail("missing symbol", #name);
  FAKECUDA_TEST_API(FAKECUDA_TEST_LOAD)
#undef FAKECUDA_TEST_LOAD
  return api;
}

}  // namespace

void* DriverApi::symbol(const char* name) const {
  return dlsym(handle, name);
}

DriverApi& driver_api() {
  static DriverApi api = load();
  return api;
}

const char* library_path() {
  return FAKECUDA_LIBRARY_PATH;
}

std::string error_name(CUresult result) {
  const char* name = nullptr;
  if (driver_api().cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) {
    return "CUresult(" + std::to_string(static_cast<int>(result)) + ")";
  }
  return name;
}

}  // namespace fakecuda_test
