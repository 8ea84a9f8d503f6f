// fracgpu-bypass-client: a tenant process that reaches the CUDA driver WITHOUT the shim,
// for the audit tests (issue 12, item 5). It loads the driver with
// dlmopen(LM_ID_NEWLM, PATH): a new link-map namespace, where the preloaded shim is not,
// so every call goes straight to the driver and the tenant's cap never sees it.
//
//   fracgpu-bypass-client --driver PATH --bytes N [--device D] [--hold-ms MS]
//                         [--registered-parent]
//
// Allocates N bytes (in chunks of at most 1 GiB) on device D, prints
// {"pid":P,"holding":N} and holds them for MS ms (default 60000), then exits 0.
// --registered-parent: fork first; the parent uses CUDA the normal way (dlopen
// "libcuda.so.1", cuInit: with the shim preloaded it registers with the tenant's broker)
// and prints {"parent":P,"init":RC}; the child then bypasses as above, and the parent
// waits for it, prints {"child":C,"exit":E,"signal":S} and stays MS ms more (so that the
// tenant of `fracgpu run` outlives the child for the test). That makes the bypass a
// descendant of a registered process, as a child of `fracgpu run` or of a framework's
// launcher would be. Failures print {"error":"..."} and exit 1.
//
// In a sanitizer build the simulated driver carries the sanitizer runtime, which cannot be
// loaded a second time into a new namespace (its thread-local state is static TLS). There
// the bypass leaves the shim another way: it execs itself (the same pid) without
// LD_PRELOAD, and that process, which the shim is not in, loads the driver the ordinary
// way (--direct; the shim comes from LD_PRELOAD wherever these tests run it).
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

struct Args {
  std::string driver;
  unsigned long long bytes = 0;
  int device = 0;
  long hold_ms = 60000;
  bool registered_parent = false;
  bool direct = false;  // already exec'd without the shim (sanitizer builds)
};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kNewNamespace = false;
#else
constexpr bool kNewNamespace = true;
#endif

[[noreturn]] void fail(const std::string& what) {
  std::printf("{\"error\":\"%s\"}\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail("missing value for " + flag);
      return argv[++i];
    };
    if (flag == "--driver")
      a.driver = value();
    else if (flag == "--bytes")
      a.bytes = std::strtoull(value().c_str(), nullptr, 10);
    else if (flag == "--device")
      a.device = std::atoi(value().c_str());
    else if (flag == "--hold-ms")
      a.hold_ms = std::atol(value().c_str());
    else if (flag == "--registered-parent")
      a.registered_parent = true;
    else if (flag == "--direct")
      a.direct = true;
    else
      fail("unknown flag " + flag);
  }
  if (a.driver.empty() || a.bytes == 0) fail("usage: --driver PATH --bytes N");
  return a;
}

template <typename Fn>
Fn need(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) fail(std::string("no ") + name + " in the driver");
  return reinterpret_cast<Fn>(p);
}

void check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) fail(std::string(what) + " failed: " + std::to_string(rc));
}

// This program again, as the same process, without the preloaded shim.
[[noreturn]] void exec_without_shim(const Args& a) {
  const std::string bytes = std::to_string(a.bytes), device = std::to_string(a.device),
                    hold = std::to_string(a.hold_ms);
  const char* argv[] = {"/proc/self/exe", "--driver", a.driver.c_str(), "--bytes",
                        bytes.c_str(),    "--device", device.c_str(),   "--hold-ms",
                        hold.c_str(),     "--direct", nullptr};
  unsetenv("LD_PRELOAD");
  execv(argv[0], const_cast<char* const*>(argv));
  fail(std::string("exec: ") + std::strerror(errno));
}

// The bypass: a private copy of the driver in a new namespace (or, in a sanitizer build,
// the driver in a process without the shim).
[[noreturn]] void bypass(const Args& a) {
  if (!kNewNamespace && !a.direct) exec_without_shim(a);
  void* lib = kNewNamespace ? dlmopen(LM_ID_NEWLM, a.driver.c_str(), RTLD_NOW | RTLD_LOCAL)
                            : dlopen(a.driver.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) fail(std::string(kNewNamespace ? "dlmopen: " : "dlopen: ") + dlerror());
  auto init = need<CUresult (*)(unsigned)>(lib, "cuInit");
  auto get = need<CUresult (*)(CUdevice*, int)>(lib, "cuDeviceGet");
  auto retain = need<CUresult (*)(CUcontext*, CUdevice)>(lib, "cuDevicePrimaryCtxRetain");
  auto set_current = need<CUresult (*)(CUcontext)>(lib, "cuCtxSetCurrent");
  auto alloc = need<CUresult (*)(CUdeviceptr*, size_t)>(lib, "cuMemAlloc_v2");
  check(init(0), "cuInit");
  CUdevice dev = 0;
  check(get(&dev, a.device), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(set_current(ctx), "cuCtxSetCurrent");
  for (unsigned long long left = a.bytes; left > 0;) {
    const unsigned long long chunk = left < (1ull << 30) ? left : (1ull << 30);
    CUdeviceptr p = 0;
    check(alloc(&p, chunk), "cuMemAlloc");
    left -= chunk;
  }
  std::printf("{\"pid\":%d,\"holding\":%llu}\n", static_cast<int>(getpid()), a.bytes);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(a.hold_ms));
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (!a.registered_parent) bypass(a);
  int go[2];
  if (pipe(go) != 0) fail("pipe");
  std::fflush(stdout);
  const pid_t child = fork();  // before any CUDA: the child inherits no driver threads
  if (child < 0) fail("fork");
  if (child == 0) {
    close(go[1]);
    char byte = 0;
    if (read(go[0], &byte, 1) != 1) std::_Exit(3);  // the parent failed
    bypass(a);
  }
  close(go[0]);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);  // the shim, when it is preloaded
  if (lib == nullptr) fail(std::string("dlopen libcuda.so.1: ") + dlerror());
  auto init = need<CUresult (*)(unsigned)>(lib, "cuInit");
  const CUresult rc = init(0);
  std::printf("{\"parent\":%d,\"init\":%d}\n", static_cast<int>(getpid()), static_cast<int>(rc));
  std::fflush(stdout);
  if (rc != CUDA_SUCCESS || write(go[1], "g", 1) != 1) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return 1;
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("{\"child\":%d,\"exit\":%d,\"signal\":%d}\n", static_cast<int>(child),
              WIFEXITED(status) ? WEXITSTATUS(status) : -1,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  std::fflush(stdout);
  // Stay (registered) as long again: its tenant outlives the child for the test to inspect.
  std::this_thread::sleep_for(std::chrono::milliseconds(a.hold_ms));
  return 0;
}
