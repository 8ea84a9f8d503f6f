# Tests added for the state work; included from CMakeLists.txt (target_sources / add_executable).

# The shim's side, unit (label unit): its holdings and their gate, the membership check
# (a truncated ledger file read without SIGBUS), a TenantSession that re-registers with
# its holdings after a rebuild, over a fake broker.
add_executable(fracgpu_ledger_watch_unit_tests ${PROJECT_SOURCE_DIR}/tests/unit/ledger_watch_test.cpp)
target_link_libraries(fracgpu_ledger_watch_unit_tests PRIVATE
  fracgpu_shim_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
fracgpu_discover_tests(fracgpu_ledger_watch_unit_tests LABELS unit
  TIMING "SessionRejoin.TheWatchIsWokenByTheIncarnationNotByItsPoll")

# The broker's side, unit (label broker): the bounds of a re-charge with a fake usage port,
# the hold of a lost ledger through the tenant socket's handler, on real segment files.
if(TARGET fracgpu_broker_core)
  add_executable(fracgpu_lost_ledger_unit_tests ${PROJECT_SOURCE_DIR}/tests/broker/lost_ledger_test.cpp)
  target_link_libraries(fracgpu_lost_ledger_unit_tests PRIVATE
    fracgpu_broker_core GTest::gtest_main fracgpu_warnings fracgpu_sanitizers)
  fracgpu_discover_tests(fracgpu_lost_ledger_unit_tests LABELS broker)
endif()

# End to end (label integration): tenants' processes holding memory while the broker is
# stopped and their ledger zeroed, truncated or deleted; the books after the restart, and
# the cap counting what they hold. "Within 1 s" is `timing`; the same books are asserted
# by the other tests without a clock.
if(TARGET fracgpu-broker AND TARGET fracgpu_cli)
  fracgpu_broker_integration_test(fracgpu_lost_ledger_integration_tests lost_ledger_test.cpp SERIAL
    TIMEOUT 90
    TIMING "LostLedger.AZeroedLedgerIsRecountedWithinASecondAndTheCapCountsIt"
    PROGRAMS FRACGPU_ALLOC_CLIENT fracgpu-alloc-client)
endif()
