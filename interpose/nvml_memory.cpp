// NVML memory queries as the tenant sees them: total = the tenant's cap on that GPU,
// used = what the tenant's processes hold (tenant-wide, from the ledger), free = the
// rest — the same picture cuMemGetInfo gives, so `nvidia-smi` inside a pod shows the
// slice it was given. Processes outside any tenant get NVML's own answer unchanged.
// The real NVML function comes from the handle the program looked it up in (dlsym
// redirect) or, for programs linked against NVML, from the next library after the shim.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/tenant_view.h"
#include "memory_policy.h"
#include "nvml_types.h"

extern "C" void* fracgpu_real_dlsym(void* handle, const char* name);  // dlsym_redirect.cpp

namespace fracgpu::shim {
namespace {

std::atomic<void*> g_real_memory_info{nullptr};
std::atomic<void*> g_real_memory_info_v2{nullptr};
std::atomic<void*> g_real_get_uuid{nullptr};

// The tenant whose memory picture applies to this process, if any.
std::optional<DeviceMemoryView> tenant_memory(const char* uuid) {
  if (MemoryPolicy* policy = MemoryPolicy::active()) {
    return policy->session().memory_view(uuid);
  }
  static TenantView* view = [] {
    const char* socket = std::getenv("FRACGPU_SOCKET");
    return TenantView::open(socket && *socket ? socket : "/run/fracgpu/broker.sock");
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

}  // namespace

}  // namespace fracgpu::shim

extern "C" __attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(fracgpu::nvml::Device device,
                                                                              fracgpu::nvml::Memory* memory) {
  using namespace fracgpu;
  auto real = shim::resolved<nvml::GetMemoryInfoFn>(shim::g_real_memory_info, "nvmlDeviceGetMemoryInfo");
  if (real == nullptr) return nvml::kErrorFunctionNotFound;
  nvml::Return rc = real(device, memory);
  if (rc == nvml::kSuccess && memory != nullptr) shim::apply_cap(device, &memory->total, &memory->free, &memory->used);
  return rc;
}

extern "C" __attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo_v2(fracgpu::nvml::Device device,
                                                                                 fracgpu::nvml::MemoryV2* memory) {
  using namespace fracgpu;
  auto real = shim::resolved<nvml::GetMemoryInfoV2Fn>(shim::g_real_memory_info_v2, "nvmlDeviceGetMemoryInfo_v2");
  if (real == nullptr) return nvml::kErrorFunctionNotFound;
  nvml::Return rc = real(device, memory);
  if (rc == nvml::kSuccess && memory != nullptr &&
      shim::apply_cap(device, &memory->total, &memory->free, &memory->used)) {
    memory->reserved = 0;  // the driver's reservation is not part of the tenant's slice
  }
  return rc;
}

namespace fracgpu::shim {

// Called by the dlsym redirect for an nvml* name: our answer for the hooked functions,
// remembering the real one behind it; null for everything else.
void* nvml_wrapper_for(void* handle, const char* name) {
  std::atomic<void*>* slot = nullptr;
  void* wrapper = nullptr;
  if (std::strcmp(name, "nvmlDeviceGetMemoryInfo") == 0) {
    slot = &g_real_memory_info;
    wrapper = reinterpret_cast<void*>(&nvmlDeviceGetMemoryInfo);
  } else if (std::strcmp(name, "nvmlDeviceGetMemoryInfo_v2") == 0) {
    slot = &g_real_memory_info_v2;
    wrapper = reinterpret_cast<void*>(&nvmlDeviceGetMemoryInfo_v2);
  } else {
    return nullptr;
  }
  void* real = fracgpu_real_dlsym(handle, name);
  if (real == nullptr || real == wrapper) return nullptr;  // not NVML, or the handle is the shim
  void* expected = nullptr;
  slot->compare_exchange_strong(expected, real);
  if (void* uuid = fracgpu_real_dlsym(handle, "nvmlDeviceGetUUID")) {
    expected = nullptr;
    g_real_get_uuid.compare_exchange_strong(expected, uuid);
  }
  return wrapper;
}

}  // namespace fracgpu::shim
