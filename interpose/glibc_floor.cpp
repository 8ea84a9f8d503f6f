// Keeps libfracgpu.so loadable into images whose glibc is as old as 2.17 although it is
// built against a newer one (docs/design.md, "Portability"). Every libc symbol that the
// shim's own code or its statically linked libstdc++/libgcc would otherwise bind to a
// version newer than GLIBC_2.17 is defined here, hidden, so the link binds to these:
// the dl*/pthread_* functions, whose default version became GLIBC_2.34 when they moved
// from libdl/libpthread into libc, are forwarded to their original version (which old
// glibc has in libdl.so.2/libpthread.so.0, hence those DT_NEEDED entries, and new glibc
// keeps in libc.so.6); the few that old glibc lacks are reimplemented on system calls or
// dl_iterate_phdr. tools/check_shim_abi.sh (ctest shim_glibc_floor) fails when a newer
// version creeps back in. Nothing here is on a hot path: the dl*/pthread_* forwards add
// one direct call to calls made at initialisation, stat/fstat one system call each.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

// The shim is built for x86_64 only (its trampolines are x86-64 assembly; CMake refuses
// other targets): GLIBC_2.2.5 is x86_64's oldest symbol version.
#if !defined(__x86_64__)
#error "libfracgpu.so is x86_64-only (exports_x86_64.S, and GLIBC_2.2.5 below)"
#endif
#define FRACGPU_GLIBC_OLDEST "GLIBC_2.2.5"

#define FRACGPU_HIDDEN __attribute__((visibility("hidden")))

// Each block below is compiled only against the glibc that introduced the newer symbol:
// built on an older distribution, nothing here is needed (or declared).
#if __GLIBC_PREREQ(2, 34)
// Defines name(params), hidden, as a call of name@FRACGPU_GLIBC_OLDEST (the same function
// as the newer default version on glibc >= 2.34). The trailing argument is the header's
// exception specification, which the definition must repeat.
#define FRACGPU_OLDEST_VERSION_OF(ret, name, params, args, ...)                 \
  extern "C" ret fracgpu_oldest_##name params __VA_ARGS__;                      \
  __asm__(".symver fracgpu_oldest_" #name ", " #name "@" FRACGPU_GLIBC_OLDEST); \
  extern "C" FRACGPU_HIDDEN ret name params __VA_ARGS__ {                       \
    return fracgpu_oldest_##name args;                                          \
  }

FRACGPU_OLDEST_VERSION_OF(int, dladdr, (const void* address, Dl_info* info), (address, info),
                          noexcept)
FRACGPU_OLDEST_VERSION_OF(int, dlclose, (void* handle), (handle), noexcept)
FRACGPU_OLDEST_VERSION_OF(char*, dlerror, (void), (), noexcept)
FRACGPU_OLDEST_VERSION_OF(void*, dlvsym, (void* handle, const char* name, const char* version),
                          (handle, name, version), noexcept)
FRACGPU_OLDEST_VERSION_OF(int, pthread_create,
                          (pthread_t * thread, const pthread_attr_t* attr, void* (*start)(void*),
                           void* arg),
                          (thread, attr, start, arg), noexcept)
FRACGPU_OLDEST_VERSION_OF(int, pthread_join, (pthread_t thread, void** result), (thread, result))
// (2.32 moved pthread_sigmask into libc under a new version; 2.34 brought the macro above.)
FRACGPU_OLDEST_VERSION_OF(int, pthread_sigmask, (int how, const sigset_t* set, sigset_t* old_set),
                          (how, set, old_set), noexcept)
FRACGPU_OLDEST_VERSION_OF(int, pthread_once, (pthread_once_t * once, void (*init)(void)),
                          (once, init))
FRACGPU_OLDEST_VERSION_OF(int, pthread_attr_setstacksize, (pthread_attr_t * attr, size_t size),
                          (attr, size), noexcept)
// libgcc's weak reference that tells it whether threads are in use.
FRACGPU_OLDEST_VERSION_OF(int, __pthread_key_create,
                          (pthread_key_t * key, void (*destructor)(void*)), (key, destructor),
                          noexcept)
#endif

#if __GLIBC_PREREQ(2, 33)
// stat/fstat became functions in 2.33 (before, header inlines called __xstat/__fxstat).
// Here they are the system calls behind them; glibc's struct stat is the kernel's on
// x86_64.
extern "C" FRACGPU_HIDDEN int stat(const char* path, struct stat* out) noexcept {
  return static_cast<int>(syscall(SYS_newfstatat, AT_FDCWD, path, out, 0));
}
extern "C" FRACGPU_HIDDEN int fstat(int fd, struct stat* out) noexcept {
  return static_cast<int>(syscall(SYS_fstat, fd, out));
}
#endif

#if __GLIBC_PREREQ(2, 32)
// libstdc++ reads this (2.32) to skip atomic reference counts; false is always safe.
extern "C" {
FRACGPU_HIDDEN char __libc_single_threaded = 0;
}
#endif

#if __GLIBC_PREREQ(2, 25)
// Only std::random_device refers to getentropy (2.25) and arc4random (2.36): its object
// file comes in with libstdc++'s COW string instances, but the shim never makes one.
// Same contracts as glibc's.
namespace {

bool getrandom_fill(unsigned char* out, size_t size) noexcept {
  while (size > 0) {
    long got = syscall(SYS_getrandom, out, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    out += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

extern "C" FRACGPU_HIDDEN int getentropy(void* buffer, size_t size) {
  if (size > 256) {
    errno = EIO;
    return -1;
  }
  return getrandom_fill(static_cast<unsigned char*>(buffer), size) ? 0 : -1;
}
#endif

#if __GLIBC_PREREQ(2, 36)
namespace {

bool urandom_fill(unsigned char* out, size_t size) noexcept {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  while (size > 0) {
    ssize_t got = read(fd, out, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    out += got;
    size -= static_cast<size_t>(got);
  }
  close(fd);
  return size == 0;
}

}  // namespace

extern "C" FRACGPU_HIDDEN uint32_t arc4random(void) noexcept {
  uint32_t value = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(&value);
  // Like glibc: /dev/urandom where the kernel lacks getrandom (< 3.17), abort without entropy.
  if (!getrandom_fill(bytes, sizeof value) && !urandom_fill(bytes, sizeof value)) abort();
  return value;
}
#endif

#if __GLIBC_PREREQ(2, 35)
namespace {

struct FindObject {
  uintptr_t address;
  uintptr_t page;
  dl_find_object* result;
  bool found;
};

int find_object_in(dl_phdr_info* info, size_t, void* data) noexcept {
  auto* find = static_cast<FindObject*>(data);
  uintptr_t start = UINTPTR_MAX, end = 0;
  void* eh_frame = nullptr;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      start = std::min<uintptr_t>(start, info->dlpi_addr + (ph.p_vaddr & ~(find->page - 1)));
      end = std::max<uintptr_t>(end, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      eh_frame = reinterpret_cast<void*>(info->dlpi_addr + ph.p_vaddr);
    }
  }
  if (find->address < start || find->address >= end) return 0;
  *find->result = dl_find_object{};
  find->result->dlfo_map_start = reinterpret_cast<void*>(start);
  find->result->dlfo_map_end = reinterpret_cast<void*>(end);
  find->result->dlfo_eh_frame = eh_frame;
  find->found = true;
  return 1;
}

}  // namespace

// The unwinder in the statically linked libgcc (GCC >= 12 built against glibc >= 2.35)
// finds an address's unwind tables only through this, and fails the throw when it does
// not answer. It searches the way libgcc did before 2.35 (dl_iterate_phdr), with glibc's
// object bounds (first page to end of the last segment). libgcc reads nothing but
// dlfo_eh_frame, so dlfo_link_map, which dl_iterate_phdr cannot give, stays null.
extern "C" FRACGPU_HIDDEN int _dl_find_object(void* address, dl_find_object* result) noexcept {
  FindObject find{reinterpret_cast<uintptr_t>(address),
                  static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), result, false};
  dl_iterate_phdr(find_object_in, &find);
  return find.found ? 0 : -1;
}
#endif
