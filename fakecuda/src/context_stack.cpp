// The calling thread's current-context stack. It stores plain CUcontext values and
// resolves them through the handle registry on use, so a context destroyed by another
// thread simply stops being current here instead of dangling. The driver generation
// is remembered so that a stack left over from before fakecuda_shutdown is discarded.
#include <vector>

#include "context.h"
#include "driver.h"

namespace fakecuda {
namespace {

struct ThreadContextStack {
  uint64_t generation = 0;
  std::vector<CUcontext> contexts;
};

thread_local ThreadContextStack t_stack;

std::vector<CUcontext>& stack() {
  uint64_t generation = driver_generation();
  if (t_stack.generation != generation) {
    t_stack.contexts.clear();
    t_stack.generation = generation;
  }
  return t_stack.contexts;
}

}  // namespace

std::shared_ptr<Context> current_context() {
  Driver* driver = current_driver();
  std::vector<CUcontext>& contexts = stack();
  if (driver == nullptr || contexts.empty() || contexts.back() == nullptr) return nullptr;
  return driver->handles.get<Context>(contexts.back());
}

CUresult require_current_context(std::shared_ptr<Context>& out) {
  out = current_context();
  return out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

void push_current_context(CUcontext context) {
  stack().push_back(context);
}

CUcontext pop_current_context() {
  std::vector<CUcontext>& contexts = stack();
  if (contexts.empty()) return nullptr;
  CUcontext top = contexts.back();
  contexts.pop_back();
  return top;
}

void set_current_context(CUcontext context) {
  std::vector<CUcontext>& contexts = stack();
  if (context == nullptr) {
    if (!contexts.empty()) contexts.pop_back();
  } else if (contexts.empty()) {
    contexts.push_back(context);
  } else {
    contexts.back() = context;
  }
}

CUcontext top_current_context() {
  std::vector<CUcontext>& contexts = stack();
  return contexts.empty() ? nullptr : contexts.back();
}

void forget_current_context(CUcontext context) {
  std::vector<CUcontext>& contexts = stack();
  if (!contexts.empty() && contexts.back() == context) contexts.pop_back();
}

}  // namespace fakecuda
