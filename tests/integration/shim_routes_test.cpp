// The three routes into the driver (direct linking, cuGetProcAddress, dlopen+dlsym)
// and the per-thread-stream variants, each run as a real process over the simulated
// GPU with and without the shim: the shim must be reached (hook counters) and the
// program's results must be exactly the driver's.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "shim_fixture.h"

namespace fracgpu::testing {
namespace {

struct Route {
  std::string label;
  std::vector<std::string> args;
  bool per_thread;
};

std::vector<Route> all_routes() {
  const std::string fake = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
  return {
      {"direct", {"--route", "direct"}, false},
      {"direct_ptsz", {"--route", "direct", "--ptsz"}, true},
      {"procaddress", {"--route", "procaddress"}, false},
      {"procaddress_ptsz", {"--route", "procaddress", "--ptsz"}, true},
      {"dlopen_soname", {"--route", "dlopen", "--library", "libcuda.so.1"}, false},
      {"dlopen_soname_ptsz", {"--route", "dlopen", "--library", "libcuda.so.1", "--ptsz"}, true},
      {"dlopen_unversioned", {"--route", "dlopen", "--library", "libcuda.so"}, false},
      {"dlopen_absolute_path", {"--route", "dlopen", "--library", fake}, false},
  };
}

class ShimRoutes : public ShimFixture, public ::testing::WithParamInterface<Route> {};

TEST_P(ShimRoutes, ReachesTheShimAndKeepsTheDriversResults) {
  const Route& route = GetParam();
  std::vector<std::string> argv = {FRACGPU_TEST_CLIENT};
  argv.insert(argv.end(), route.args.begin(), route.args.end());

  ProcessResult native = run_process(argv, native_env());
  ASSERT_EQ(native.exit_code, 0) << native.out << native.err;
  ProcessResult shimmed = run_process(argv, shim_env());
  ASSERT_EQ(shimmed.exit_code, 0) << shimmed.out << shimmed.err;
  EXPECT_EQ(shimmed.out, native.out);
  EXPECT_EQ(shimmed.err, "") << "the shim must stay silent when all is well";
  EXPECT_NE(native.out.find("\"add_ok\":true"), std::string::npos) << native.out;
  EXPECT_NE(native.out.find("\"spin_ok\":true"), std::string::npos) << native.out;

  const std::string pt = route.per_thread ? "_ptsz" : "";
  EXPECT_GE(hook_count("cuInit"), 1u);
  EXPECT_EQ(hook_count("cuMemAlloc_v2"), 3u);
  EXPECT_EQ(hook_count("cuMemFree_v2"), 3u);
  EXPECT_EQ(hook_count("cuMemGetInfo_v2"), 2u);
  EXPECT_EQ(hook_count("cuDeviceTotalMem_v2"), 1u);
  EXPECT_EQ(hook_count("cuDevicePrimaryCtxRetain"), 1u);
  EXPECT_EQ(hook_count("cuStreamCreate"), 1u);
  EXPECT_EQ(hook_count("cuLaunchKernel" + pt), 3u);
  EXPECT_EQ(hook_count(route.per_thread ? "cuLaunchKernel" : "cuLaunchKernel_ptsz"), 0u);
  EXPECT_EQ(hook_count("cuMemsetD32Async" + pt), 1u);
  EXPECT_EQ(hook_count(route.per_thread ? "cuMemcpyHtoDAsync_v2_ptsz" : "cuMemcpyHtoDAsync_v2"),
            1u);
  EXPECT_EQ(hook_stats()["driver"], FRACGPU_FAKECUDA_DIR "/libcuda.so.1");
  if (route.label.rfind("procaddress", 0) == 0) {
    EXPECT_GE(hook_stats()["proc_address"]["by_pointer"].get<int>(), 10);
  }
}

INSTANTIATE_TEST_SUITE_P(AllRoutes, ShimRoutes, ::testing::ValuesIn(all_routes()),
                         [](const auto& test_info) { return test_info.param.label; });

using ShimBehaviour = ShimFixture;

TEST_F(ShimBehaviour, GetProcAddressHonoursTheRequestedAbiVersion) {
  ProcessResult r =
      run_process({FRACGPU_TEST_CLIENT, "--route", "procaddress", "--ctx-abis"}, shim_env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"ctx_abis\":true"), std::string::npos);
  EXPECT_EQ(hook_count("cuCtxCreate_v2"), 1u);
  EXPECT_EQ(hook_count("cuCtxCreate_v3"), 1u);
  EXPECT_EQ(hook_count("cuCtxCreate_v4"), 1u);
  EXPECT_EQ(hook_count("cuCtxDestroy_v2"), 3u);
}

TEST_F(ShimBehaviour, UnknownAndMissingSymbolsReturnNotFound) {
  ProcessResult r =
      run_process({FRACGPU_TEST_CLIENT, "--route", "procaddress", "--probe-missing"}, shim_env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"unknown_proc\":500"), std::string::npos)
      << r.out;  // CUDA_ERROR_NOT_FOUND
  // A public driver function the simulated driver does not implement: the shim's
  // forwarder must answer CUDA_ERROR_NOT_FOUND rather than jump to NULL.
  r = run_process({FRACGPU_TEST_CLIENT, "--route", "dlopen", "--probe-missing"}, shim_env());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"unimplemented_symbol\":500"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("cuTexRefCreate is not provided by the CUDA driver"), std::string::npos)
      << r.err;
}

TEST_F(ShimBehaviour, FindsTheDriverThroughTheLibraryPath) {
  Environment env = shim_env();
  env.erase("FRACGPU_REAL_DRIVER");
  env["LD_LIBRARY_PATH"] = FRACGPU_FAKECUDA_DIR;
  ProcessResult r = run_process({FRACGPU_TEST_CLIENT, "--route", "direct"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(hook_stats()["driver"], FRACGPU_FAKECUDA_DIR "/libcuda.so.1");
}

// A copy of the shim installed as libcuda.so.1 ahead of the real driver on the library
// path must be recognised and skipped, not loaded as "the driver".
TEST_F(ShimBehaviour, ACopyOfTheShimIsNeverTakenForTheDriver) {
  TempDir decoy("decoy");
  std::filesystem::copy_file(FRACGPU_SHIM_PATH, decoy.path() + "/libcuda.so.1");
  Environment env = shim_env();
  env.erase("FRACGPU_REAL_DRIVER");
  env["LD_LIBRARY_PATH"] = decoy.path() + ":" + FRACGPU_FAKECUDA_DIR;
  ProcessResult r = run_process({FRACGPU_TEST_CLIENT, "--route", "direct"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(hook_stats()["driver"], FRACGPU_FAKECUDA_DIR "/libcuda.so.1");
  EXPECT_EQ(hook_count("cuMemAlloc_v2"), 3u) << "charged once, not twice";
}

TEST_F(ShimBehaviour, NoDriverGivesAnErrorCodeAndOneLineNotACrash) {
  Environment env = shim_env();
  env["FRACGPU_REAL_DRIVER"] = "/nonexistent/libcuda.so.1";
  ProcessResult r = run_process({FRACGPU_TEST_CLIENT, "--route", "direct"}, env);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("cuInit(0) failed: ? (100)"), std::string::npos)
      << r.out;  // CUDA_ERROR_NO_DEVICE
  EXPECT_NE(r.err.find("no CUDA driver found (tried /nonexistent/libcuda.so.1)"), std::string::npos)
      << r.err;
  // With no driver at all, the calls that fail say so, not that the driver lacks them.
  EXPECT_EQ(r.err.find("is not provided by the CUDA driver"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cuInit fails: CUDA is unavailable to this process"), std::string::npos)
      << r.err;
}

// Issue 27, row 7: FRACGPU_SOCKET naming a socket that does not exist fails closed within a
// second of the first CUDA call (d28724a retried silently for 10 s), one line naming it.
TEST_F(ShimBehaviour, AMissingTenantSocketFailsClosedWithinASecondNamingIt) {
  Environment env = shim_env();
  env["FRACGPU_SOCKET"] = "/nonexistent-fracgpu/tenants/t/broker.sock";
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = run_process({FRACGPU_TEST_CLIENT, "--route", "direct"}, env);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("cuInit(0) failed"), std::string::npos) << r.out;
  EXPECT_LT(took, 1000) << "the whole process, first CUDA call to its error included";
  std::printf("[ missing socket ] the process failed closed and exited in %lld ms\n",
              static_cast<long long>(took));
  EXPECT_NE(r.err.find("cannot register with the fracgpu broker at "
                       "/nonexistent-fracgpu/tenants/t/broker.sock (no socket at "
                       "/nonexistent-fracgpu/tenants/t/broker.sock"),
            std::string::npos)
      << r.err;
}

TEST_F(ShimBehaviour, DisabledShimOnlyForwards) {
  Environment env = shim_env();
  env["FRACGPU_DISABLE"] = "1";
  ProcessResult native = run_process({FRACGPU_TEST_CLIENT, "--route", "procaddress"}, native_env());
  ProcessResult r = run_process({FRACGPU_TEST_CLIENT, "--route", "procaddress"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, native.out);
  EXPECT_EQ(hook_stats()["proc_address"]["by_pointer"], 0) << "disabled: real pointers handed out";
  EXPECT_EQ(hook_count("cuMemAlloc_v2"), 0u);
}

TEST_F(ShimBehaviour, ProgramsThatNeverTouchCudaAreUnaffected) {
  Environment env = shim_env();
  ProcessResult r = run_process({"/bin/sh", "-c", "echo hello; ls / > /dev/null"}, env);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "hello\n");
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(std::filesystem::is_empty(stats_dir_.path()))
      << "the shim initialised without a CUDA call";
}

TEST_F(ShimBehaviour, BadConfigurationIsReportedButDoesNotStopTheProgram) {
  Environment env = shim_env();
  env["FRACGPU_LOG_LEVEL"] = "shouty";
  ProcessResult r = run_process({FRACGPU_TEST_CLIENT, "--route", "direct"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("FRACGPU_LOG_LEVEL='shouty'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fracgpu::testing
