// NVML memory queries as the tenant sees them: total = the tenant's cap on that GPU,
// used = what the tenant's processes hold (tenant-wide, from the ledger), free = the
// rest — the same picture cuMemGetInfo gives, so `nvidia-smi` inside a pod shows the
// slice it was given. Processes outside any tenant get NVML's own answer unchanged.
// The real NVML function comes from the handle the program looked it up in (dlsym
// redirect) or, for programs linked against NVML, from the next library after the shim.
// The hooked functions are the rows of tables/nvml_hooks.def. Cost per query: one UUID
// query of the real NVML and two loads of the tenant's segments.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/tenant_view.h"
#include "fracgpu/nvml_types.h"
#include "fracgpu/paths.h"
#include "shim_runtime.h"

extern "C" void* fracgpu_real_dlsym(void* handle, const char* name);  // dlsym_redirect.cpp

namespace fracgpu::shim {
namespace {

enum class NvmlHook : int {
#define FRACGPU_NVML_HOOK(name, memory) name,
#include "tables/nvml_hooks.def"
#undef FRACGPU_NVML_HOOK
  kCount
};

struct NvmlSlot {
  const char* name;
  std::atomic<void*> real{nullptr};  // the real NVML function behind our wrapper
};

NvmlSlot g_slots[] = {
#define FRACGPU_NVML_HOOK(name, memory) {#name},
#include "tables/nvml_hooks.def"
#undef FRACGPU_NVML_HOOK
};
static_assert(sizeof(g_slots) / sizeof(g_slots[0]) == static_cast<std::size_t>(NvmlHook::kCount));

std::atomic<void*> g_real_get_uuid{nullptr};

// The tenant whose memory picture applies to this process, if any.
std::optional<DeviceMemoryView> tenant_memory(const char* uuid) {
  if (TenantSession* session = tenant_session()) return session->memory_view(uuid);
  static TenantView* view = [] {
    const char* socket = std::getenv("FRACGPU_SOCKET");
    return TenantView::open(socket && *socket ? socket : paths::kDefaultTenantSocket);
  }();
  return view ? view->device(uuid) : std::nullopt;
}

template <typename Fn>
Fn resolved(std::atomic<void*>& slot, const char* name) {
  void* fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = fracgpu_real_dlsym(RTLD_NEXT, name);
    if (fn != nullptr) slot.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

// Rewrites total/free/used for a device of the tenant; false when the device is not one.
bool apply_cap(nvml::Device device, unsigned long long* total, unsigned long long* free_bytes,
               unsigned long long* used) {
  auto get_uuid = resolved<nvml::GetUuidFn>(g_real_get_uuid, "nvmlDeviceGetUUID");
  char uuid[nvml::kUuidBufferSize] = {};
  if (get_uuid == nullptr || get_uuid(device, uuid, sizeof(uuid)) != nvml::kSuccess) return false;
  auto memory = tenant_memory(uuid);
  if (!memory) return false;
  *total = memory->limit;
  *used = std::min(memory->used, memory->limit);
  *free_bytes = memory->limit - *used;
  return true;
}

// The body of every row: the real query, then the tenant's picture over it.
template <NvmlHook Hook, typename Memory>
nvml::Return memory_info(nvml::Device device, Memory* memory) {
  NvmlSlot& slot = g_slots[static_cast<int>(Hook)];
  auto real = resolved<nvml::Return (*)(nvml::Device, Memory*)>(slot.real, slot.name);
  if (real == nullptr) return nvml::kErrorFunctionNotFound;
  const nvml::Return rc = real(device, memory);
  if (rc != nvml::kSuccess || memory == nullptr) return rc;
  if (apply_cap(device, &memory->total, &memory->free, &memory->used)) {
    if constexpr (std::is_same_v<Memory, nvml::MemoryV2>) {
      memory->reserved = 0;  // the driver's reservation is not part of the tenant's slice
    }
  }
  return rc;
}

}  // namespace
}  // namespace fracgpu::shim

#define FRACGPU_NVML_HOOK(name, memory)                                                     \
  extern "C" __attribute__((visibility("default"))) int name(fracgpu::nvml::Device device,  \
                                                             fracgpu::nvml::memory* info) { \
    return fracgpu::shim::memory_info<fracgpu::shim::NvmlHook::name>(device, info);         \
  }
#include "tables/nvml_hooks.def"
#undef FRACGPU_NVML_HOOK

namespace fracgpu::shim {

// Called by the dlsym redirect for an nvml* name: our answer for the hooked functions,
// remembering the real one behind it; null for everything else.
void* nvml_wrapper_for(void* handle, const char* name) {
  static void* const wrappers[] = {
#define FRACGPU_NVML_HOOK(name, memory) reinterpret_cast<void*>(&::name),
#include "tables/nvml_hooks.def"
#undef FRACGPU_NVML_HOOK
  };
  int row = 0;
  while (row < static_cast<int>(NvmlHook::kCount) && std::strcmp(name, g_slots[row].name) != 0)
    ++row;
  if (row == static_cast<int>(NvmlHook::kCount)) return nullptr;
  void* wrapper = wrappers[row];
  void* real = fracgpu_real_dlsym(handle, name);
  if (real == nullptr || real == wrapper) return nullptr;  // not NVML, or the handle is the shim
  void* expected = nullptr;
  g_slots[row].real.compare_exchange_strong(expected, real);
  if (void* uuid = fracgpu_real_dlsym(handle, "nvmlDeviceGetUUID")) {
    expected = nullptr;
    g_real_get_uuid.compare_exchange_strong(expected, uuid);
  }
  return wrapper;
}

}  // namespace fracgpu::shim
