// fracgpu-nvml-client: reads device 0's memory through NVML the way monitoring tools do,
// either linked against libnvidia-ml.so.1 or through dlopen+dlsym (as nvidia-smi does),
// and prints {"v1":{total,free,used},"v2":{total,free,used,reserved}}.
//   fracgpu-nvml-client linked|dlopen
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "fracgpu/nvml_types.h"

using namespace fracgpu::nvml;

extern "C" {
int nvmlInit_v2();
int nvmlDeviceGetHandleByIndex_v2(unsigned int, Device*);
int nvmlDeviceGetMemoryInfo(Device, Memory*);
int nvmlDeviceGetMemoryInfo_v2(Device, MemoryV2*);
}

int main(int argc, char** argv) {
  const bool use_dlopen = argc > 1 && std::strcmp(argv[1], "dlopen") == 0;
  auto init = &nvmlInit_v2;
  auto handle_by_index = &nvmlDeviceGetHandleByIndex_v2;
  GetMemoryInfoFn info = &nvmlDeviceGetMemoryInfo;
  GetMemoryInfoV2Fn info_v2 = &nvmlDeviceGetMemoryInfo_v2;
  if (use_dlopen) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return std::printf("{\"error\":\"dlopen\"}\n"), 1;
    init = reinterpret_cast<decltype(init)>(dlsym(lib, "nvmlInit_v2"));
    handle_by_index =
        reinterpret_cast<decltype(handle_by_index)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    info = reinterpret_cast<GetMemoryInfoFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    info_v2 = reinterpret_cast<GetMemoryInfoV2Fn>(dlsym(lib, "nvmlDeviceGetMemoryInfo_v2"));
  }
  Device device = nullptr;
  Memory m{};
  MemoryV2 m2{};
  m2.version = kMemoryV2Version;
  if (init() != kSuccess || handle_by_index(0, &device) != kSuccess ||
      info(device, &m) != kSuccess || info_v2(device, &m2) != kSuccess) {
    return std::printf("{\"error\":\"nvml call failed\"}\n"), 1;
  }
  std::printf(
      "{\"v1\":{\"total\":%llu,\"free\":%llu,\"used\":%llu},\"v2\":{\"total\":%llu,\"free\":%llu,"
      "\"used\":%llu,\"reserved\":%llu}}\n",
      m.total, m.free, m.used, m2.total, m2.free, m2.used, m2.reserved);
  return 0;
}
