// The other process of the IPC tests (fakecuda-test-child ipc): a CUDA client with its own
// context that opens, reads, writes and closes what the test exports, one command per stdin
// line, one reply line each (CUresults by name):
//   open <handle hex> <flags>      cuIpcOpenMemHandle_v2        -> opened <result> <ptr>
//   open1 <handle hex> <flags>     cuIpcOpenMemHandle (v1)      -> opened <result> <ptr>
//   close <ptr>                    cuIpcCloseMemHandle          -> closed <result>
//   read <ptr> <count>             uint32s through cuMemcpyDtoH -> read <result> <first> <last>
//   <sum> fill <ptr> <count> <value>     cuMemsetD32                  -> filled <result> export
//   <bytes> <value>         cuMemAlloc, fill, handle     -> exported <result> <hex> recvfd
//   <abstract socket name>  one descriptor over SCM_RIGHTS -> fd <n> import <fd>
//   cuMemImportFromShareableHandle -> imported <result> <handle> map <handle> <size> reserve +
//   cuMemMap + access  -> mapped <result> <ptr> unmap <ptr> <size> <handle>    unmap, release, free
//   range   -> unmapped <result> quit
#include "ipc_child.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "driver_api.h"
#include "fracgpu/descriptor_passing.h"

namespace fakecuda_test {
namespace {

std::string hex_of(const CUipcMemHandle& handle) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : handle.reserved) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

void reply(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int receive_fd(const std::string& name) {
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());  // abstract namespace
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int fd = -1;
  char byte = 0;
  if (connect(s, reinterpret_cast<sockaddr*>(&address), length) == 0)
    fracgpu::descriptor_passing::receive_with(s, &byte, 1, &fd, 0);
  close(s);
  return fd;
}

std::string mem_read(CUdeviceptr ptr, uint64_t count) {
  std::vector<uint32_t> values(count);
  const CUresult r = driver_api().cuMemcpyDtoH_v2(values.data(), ptr, count * 4);
  uint64_t sum = 0;
  for (uint32_t v : values) sum += v;
  std::ostringstream out;
  out << "read " << error_name(r) << " " << (r == CUDA_SUCCESS ? values.front() : 0) << " "
      << (r == CUDA_SUCCESS ? values.back() : 0) << " " << sum;
  return out.str();
}

std::string exported(uint64_t bytes, uint32_t value) {
  DriverApi& cu = driver_api();
  CUdeviceptr ptr = 0;
  CUipcMemHandle handle{};
  CUresult r = cu.cuMemAlloc_v2(&ptr, bytes);
  if (r == CUDA_SUCCESS) r = cu.cuMemsetD32_v2(ptr, value, bytes / 4);
  if (r == CUDA_SUCCESS) r = cu.cuIpcGetMemHandle(&handle, ptr);
  return "exported " + error_name(r) + " " + hex_of(handle);
}

std::string mapped(CUmemGenericAllocationHandle handle, size_t size) {
  DriverApi& cu = driver_api();
  CUdeviceptr ptr = 0;
  CUresult r = cu.cuMemAddressReserve(&ptr, size, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = cu.cuMemMap(ptr, size, 0, handle, 0);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (r == CUDA_SUCCESS) r = cu.cuMemSetAccess(ptr, size, &access, 1);
  return "mapped " + error_name(r) + " " + std::to_string(ptr);
}

std::string command(const std::string& line) {
  DriverApi& cu = driver_api();
  std::istringstream in(line);
  std::string verb;
  in >> verb;
  if (verb == "open" || verb == "open1") {
    std::string hex;
    unsigned flags = 0;
    in >> hex >> flags;
    CUipcMemHandle handle{};
    if (!handle_from_hex(hex, &handle)) return "opened bad-hex 0";
    CUdeviceptr ptr = 0;
    const CUresult r = verb == "open" ? cu.cuIpcOpenMemHandle_v2(&ptr, handle, flags)
                                      : cu.cuIpcOpenMemHandle(&ptr, handle, flags);
    return "opened " + error_name(r) + " " + std::to_string(ptr);
  }
  uint64_t a = 0, b = 0, c = 0;
  in >> a >> b >> c;
  if (verb == "close") return "closed " + error_name(cu.cuIpcCloseMemHandle(a));
  if (verb == "read") return mem_read(a, b);
  if (verb == "fill")
    return "filled " + error_name(cu.cuMemsetD32_v2(a, static_cast<uint32_t>(c), b));
  if (verb == "export") return exported(a, static_cast<uint32_t>(b));
  if (verb == "import") {
    CUmemGenericAllocationHandle handle = 0;
    const CUresult r =
        cu.import_shareable()(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(a)),
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    return "imported " + error_name(r) + " " + std::to_string(handle);
  }
  if (verb == "map") return mapped(a, b);
  if (verb == "unmap") {
    CUresult r = cu.cuMemUnmap(a, b);
    if (r == CUDA_SUCCESS) r = cu.cuMemRelease(c);
    if (r == CUDA_SUCCESS) r = cu.cuMemAddressFree(a, b);
    return "unmapped " + error_name(r);
  }
  return "unknown " + verb;
}

}  // namespace

bool handle_from_hex(const std::string& hex, CUipcMemHandle* handle) {
  if (hex.size() != 2 * sizeof handle->reserved) return false;
  for (size_t i = 0; i < sizeof handle->reserved; ++i) {
    unsigned value = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &value) != 1) return false;
    handle->reserved[i] = static_cast<char>(value);
  }
  return true;
}

std::string hex_of_handle(const CUipcMemHandle& handle) {
  return hex_of(handle);
}

int ipc_peer() {
  DriverApi& cu = driver_api();
  CUcontext context = nullptr;
  CUresult r = cu.cuInit(0);
  if (r == CUDA_SUCCESS) r = cu.cuDevicePrimaryCtxRetain(&context, 0);
  if (r == CUDA_SUCCESS) r = cu.cuCtxSetCurrent(context);
  if (r != CUDA_SUCCESS) {
    reply("init " + error_name(r));
    return 1;
  }
  reply("ready");
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "quit") return 0;
    if (line.rfind("recvfd ", 0) == 0) {
      reply("fd " + std::to_string(receive_fd(line.substr(7))));
      continue;
    }
    reply(command(line));
  }
  return 0;
}

}  // namespace fakecuda_test
