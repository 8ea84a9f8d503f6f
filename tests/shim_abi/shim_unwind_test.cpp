// Exceptions inside the built libfracgpu.so. Its statically linked libgcc unwinder finds
// unwind tables only through _dl_find_object, which the shim defines itself
// (interpose/glibc_floor.cpp) because glibc's is newer than the shim's glibc floor. The
// shim exports nothing for tests, so this test finds those hidden functions through the
// library's symbol table, compares the shim's _dl_find_object with glibc's, walks the
// stack with the shim's unwinder, and has the shim's libstdc++ throw and catch.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <unwind.h>

#include <csignal>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "test_files.h"

namespace {

// The shim, loaded privately, and its local (hidden) functions by symbol-table name.
class LoadedShim {
 public:
  LoadedShim() : handle_(dlopen(FRACGPU_SHIM_PATH, RTLD_NOW | RTLD_LOCAL)) {
    link_map* map = nullptr;
    if (handle_ == nullptr || dlinfo(handle_, RTLD_DI_LINKMAP, &map) != 0) return;
    std::string listing = fracgpu::testing::run_command("nm --defined-only " FRACGPU_SHIM_PATH);
    for (const std::string& line : fracgpu::testing::lines_of(listing)) {
      auto last = line.rfind(' ');
      if (last != std::string::npos && line.size() > 19 && (line[17] == 't' || line[17] == 'T')) {
        functions_[line.substr(last + 1)] =
            map->l_addr + std::stoull(line.substr(0, 16), nullptr, 16);
      }
    }
  }
  bool loaded() const { return handle_ != nullptr && !functions_.empty(); }
  template <typename Fn>
  Fn function(const std::string& name) const {
    auto it = functions_.find(name);
    return it == functions_.end() ? nullptr : reinterpret_cast<Fn>(it->second);
  }

 private:
  void* handle_;
  std::map<std::string, uintptr_t> functions_;
};

const LoadedShim& shim() {
  static const LoadedShim loaded;
  return loaded;
}

using FindFdeFn = const void* (*)(void*, void* bases);
using BacktraceFn = _Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void*);
using GetIpFn = _Unwind_Ptr (*)(_Unwind_Context*);
using ThrowFn = void (*)(const char*);

int data_in_this_program = 1;

TEST(ShimUnwind, FindsTheSameObjectsAsGlibc) {
#if !__GLIBC_PREREQ(2, 35)
  GTEST_SKIP() << "glibc has no _dl_find_object, and neither has the shim";
#else
  ASSERT_TRUE(shim().loaded()) << dlerror();
  using FindObjectFn = int (*)(void*, dl_find_object*);
  auto shims = shim().function<FindObjectFn>("_dl_find_object");
  ASSERT_NE(shims, nullptr) << "libfracgpu.so defines no _dl_find_object";
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  const std::map<std::string, void*> addresses = {
      {"shim code", reinterpret_cast<void*>(shims)},
      {"libc", dlsym(RTLD_DEFAULT, "getpid")},
      {"libstdc++", dlsym(RTLD_DEFAULT, "_ZSt9terminatev")},
      {"this program's code", reinterpret_cast<void*>(&shim)},
      {"this program's data", &data_in_this_program},
  };
  for (const auto& [what, address] : addresses) {
    dl_find_object expected{}, actual{};
    ASSERT_EQ(_dl_find_object(address, &expected), 0) << what;
    ASSERT_EQ(shims(address, &actual), 0) << what;
    EXPECT_EQ(actual.dlfo_map_start, expected.dlfo_map_start) << what;
    EXPECT_EQ(actual.dlfo_map_end, expected.dlfo_map_end) << what;
    EXPECT_EQ(actual.dlfo_eh_frame, expected.dlfo_eh_frame) << what;
    EXPECT_NE(actual.dlfo_eh_frame, nullptr) << what;
    // The bounds are the object's, as glibc's: both ends find it again.
    EXPECT_EQ(shims(expected.dlfo_map_start, &actual), 0) << what;
    EXPECT_EQ(shims(static_cast<char*>(expected.dlfo_map_end) - 1, &actual), 0) << what;
  }
  dl_find_object none{};
  EXPECT_EQ(_dl_find_object(page, &none), -1);
  EXPECT_EQ(shims(page, &none), -1);
  munmap(page, 4096);
#endif
}

TEST(ShimUnwind, FindsTheUnwindTablesOfTheShimsCode) {
  ASSERT_TRUE(shim().loaded()) << dlerror();
  auto find_fde = shim().function<FindFdeFn>("_Unwind_Find_FDE");
  auto code = reinterpret_cast<void*>(find_fde);
  ASSERT_NE(find_fde, nullptr);
  struct {
    void* text;
    void* data;
    void* function;
  } bases{};
  EXPECT_NE(find_fde(static_cast<char*>(code) + 1, &bases), nullptr);
  EXPECT_EQ(bases.function, code);
}

GetIpFn shim_get_ip;
_Unwind_Reason_Code record_with_shim(_Unwind_Context* context, void* ips) {
  static_cast<std::vector<_Unwind_Ptr>*>(ips)->push_back(shim_get_ip(context));
  return _URC_NO_REASON;
}
_Unwind_Reason_Code record_with_system(_Unwind_Context* context, void* ips) {
  static_cast<std::vector<_Unwind_Ptr>*>(ips)->push_back(_Unwind_GetIP(context));
  return _URC_NO_REASON;
}

__attribute__((noinline)) std::vector<_Unwind_Ptr> backtrace(BacktraceFn walk,
                                                             _Unwind_Trace_Fn record) {
  std::vector<_Unwind_Ptr> ips;
  walk(record, &ips);
  asm volatile("" ::: "memory");  // no tail call: both walks pass through this frame
  return ips;
}

// Both walks start from one call site; the first frame is each unwinder's own
// _Unwind_Backtrace, and every frame above it must match, up to the end of the stack.
TEST(ShimUnwind, WalksTheWholeStackLikeTheSystemUnwinder) {
  ASSERT_TRUE(shim().loaded()) << dlerror();
  shim_get_ip = shim().function<GetIpFn>("_Unwind_GetIP");
  const std::pair<BacktraceFn, _Unwind_Trace_Fn> unwinders[2] = {
      {&_Unwind_Backtrace, &record_with_system},
      {shim().function<BacktraceFn>("_Unwind_Backtrace"), &record_with_shim}};
  ASSERT_NE(unwinders[1].first, nullptr);
  ASSERT_NE(shim_get_ip, nullptr);
  std::vector<_Unwind_Ptr> walks[2];
  for (int i = 0; i < 2; ++i) walks[i] = backtrace(unwinders[i].first, unwinders[i].second);
  const std::vector<_Unwind_Ptr>& expected = walks[0];
  const std::vector<_Unwind_Ptr>& actual = walks[1];
  ASSERT_GT(expected.size(), 3u);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 1; i < expected.size(); ++i) EXPECT_EQ(actual[i], expected[i]) << "frame " << i;
}

ThrowFn throw_in_shim;
void* throw_on_this_thread(void*) {
  throw_in_shim("thrown in libfracgpu.so");
  return nullptr;
}

// Nothing on a fresh thread catches, so the shim's __cxa_throw, its unwinder having walked
// the whole stack, calls the shim's std::terminate. Its default handler rethrows the
// exception and catches it itself to print what(): one throw and one catch, both inside
// libfracgpu.so, through its own unwinder and personality routine. (A catch in this
// program instead would mix in the system libgcc_s.) Were _dl_find_object to fail, the
// unwinder would abort before printing.
TEST(ShimUnwind, AnExceptionIsThrownAndCaughtInsideTheShim) {
  ASSERT_TRUE(shim().loaded()) << dlerror();
  throw_in_shim = shim().function<ThrowFn>("_ZSt21__throw_runtime_errorPKc");
  ASSERT_NE(throw_in_shim, nullptr);
  EXPECT_EXIT(
      {
        pthread_t thread;
        pthread_create(&thread, nullptr, &throw_on_this_thread, nullptr);
        pthread_join(thread, nullptr);
      },
      testing::KilledBySignal(SIGABRT),
      "terminate called after throwing an instance of 'std::runtime_error'.*"
      "what\\(\\): +thrown in libfracgpu\\.so");
}

}  // namespace
