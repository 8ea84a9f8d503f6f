# Overcommit with guarantees (memory moved to host and back), end to end on the simulated
# GPU; included from CMakeLists.txt.
if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_spin_client)
  # One executable, RUN_SERIAL (it loads the machine and measures): the guarantee and the
  # idle tenant (overcommit_test), a swap out and in under other tenants' launches and
  # allocations (_load), SIGKILLs in the middle of moves (_kill), the host budget (_budget),
  # every allocation route moved or reported pinned (_routes), the broker SIGKILLed while a
  # tenant is on host (_broker_death), the swap reserve pinned ahead (_reserve). About 60 s
  # on a loaded 2-core machine.
  # `timing`: the guarantee's "within 1 s plus the copy" (two tests) and the swap-in "within
  # one wait step" of the broker's death; under the sanitizers the same moves, with the
  # same data checks, stay covered by the other tests here (the kills, the budget, the
  # routes, the broker's death with the GPU full).
  fracgpu_broker_integration_test(fracgpu_overcommit_integration_tests
    "overcommit_test.cpp;overcommit_load_test.cpp;overcommit_kill_test.cpp;overcommit_budget_test.cpp;overcommit_routes_test.cpp;overcommit_broker_death_test.cpp;overcommit_reserve_test.cpp;overcommit_default_test.cpp"
    SERIAL TIMEOUT 120
    TIMING "Overcommit.AGuaranteeAdmittedAfterABorrowerGetsAllOfItAndTheBorrowersDataSurvives:OvercommitDefaults.ABorrowerThatMayNotSwapIsStoppedAndTheGuaranteeHoldsWithinTheBound:OvercommitLoad.*:OvercommitBrokerDeath.AWaitingBorrowerGetsItsMemoryBackWhenTheBrokerDies"
    PROGRAMS FRACGPU_ALLOC_CLIENT fracgpu-alloc-client FRACGPU_SPIN_CLIENT fracgpu_spin_client
    DEFINES FRACGPU_FAKENVML_DIR="$<TARGET_FILE_DIR:fakenvml>"
    DEPENDS fakenvml)
endif()

if(TARGET fracgpu_broker_core)
  # The enforcer's answers to what the end-to-end tests found (pinned bytes in the report,
  # the budget counting open demands, a grant left below what is used). Label "broker".
  add_executable(fracgpu_overcommit_unit_tests
    ${PROJECT_SOURCE_DIR}/tests/broker/overcommit_enforcer_test.cpp)
  target_include_directories(fracgpu_overcommit_unit_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/broker)
  target_link_libraries(fracgpu_overcommit_unit_tests PRIVATE
    fracgpu_broker_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
  gtest_discover_tests(fracgpu_overcommit_unit_tests PROPERTIES LABELS broker DISCOVERY_TIMEOUT 30)
endif()

if(TARGET fracgpu-broker AND TARGET fracgpu_cli)
  # Bad values of --swap, --reclaim, --swap-host-budget and --swap-idle-after, refused before
  # anything runs (the CLI tests' fixture, tests/broker/cli_fixture.h).
  add_executable(fracgpu_overcommit_cli_tests
    ${PROJECT_SOURCE_DIR}/tests/broker/cli_swap_test.cpp
    ${PROJECT_SOURCE_DIR}/tests/broker/broker_harness.cpp)
  target_include_directories(fracgpu_overcommit_cli_tests PRIVATE ${PROJECT_SOURCE_DIR}/tests/broker)
  target_link_libraries(fracgpu_overcommit_cli_tests PRIVATE
    fracgpu_broker_core fracgpu_broker_client GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
  target_compile_definitions(fracgpu_overcommit_cli_tests PRIVATE
    FRACGPU_TEST_BROKER_BIN="$<TARGET_FILE:fracgpu-broker>"
    FRACGPU_TEST_CLI_BIN="$<TARGET_FILE:fracgpu_cli>"
    FRACGPU_TEST_FAKE_DRIVER="${CMAKE_BINARY_DIR}/fakecuda/libcuda.so.1"
    FRACGPU_TEST_SHIM="${CMAKE_BINARY_DIR}/lib/libfracgpu.so"
    FRACGPU_TEST_SPIN_CLIENT="${CMAKE_BINARY_DIR}/bin/fracgpu-spin-client")
  add_dependencies(fracgpu_overcommit_cli_tests fracgpu-broker fracgpu_cli fakecuda fracgpu)
  fracgpu_discover_tests(fracgpu_overcommit_cli_tests LABELS integration)
endif()

if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_expandable_client)
  # The application's own VMM memory (PyTorch's expandable segments) moved to host for a
  # guarantee and back, its handles virtual meanwhile; an exported handle reported pinned
  # (overcommit_app_vmm_test). RUN_SERIAL like the others; about 15 s. `timing`: the
  # guarantee's "within 1 s plus the copy".
  fracgpu_broker_integration_test(fracgpu_overcommit_app_vmm_tests overcommit_app_vmm_test.cpp
    SERIAL TIMEOUT 90
    TIMING "OvercommitAppVmm.AGuaranteeGetsAllOfAnExpandableSegmentsBorrowersMemory"
    PROGRAMS FRACGPU_ALLOC_CLIENT fracgpu-alloc-client FRACGPU_EXPANDABLE_CLIENT fracgpu_expandable_client)
endif()

if(TARGET fracgpu-broker AND TARGET fracgpu_cli AND TARGET fracgpu_async_client AND TARGET fracgpu_capture_client)
  # Stream-ordered allocations of a tenant that may swap (the shim's arena,
  # interpose/core/async_arena.h): a guarantee gets all of an async borrower's memory and its
  # data survives, stream order on the simulated GPU, a trim and the books, and a tenant that
  # may not swap still on the driver's pool (overcommit_async_test). RUN_SERIAL like the
  # others; about 15 s. `timing`: the guarantee's "within 1 s plus the copy".
  fracgpu_broker_integration_test(fracgpu_overcommit_async_tests overcommit_async_test.cpp
    SERIAL TIMEOUT 90
    TIMING "OvercommitAsync.AGuaranteeGetsAllOfAnAsyncBorrowersMemoryAndItsDataSurvives"
    PROGRAMS FRACGPU_ALLOC_CLIENT fracgpu-alloc-client FRACGPU_ASYNC_CLIENT fracgpu_async_client
             FRACGPU_CAPTURE_CLIENT fracgpu_capture_client)
endif()
