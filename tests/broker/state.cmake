# Tests added for the state work; included from CMakeLists.txt (target_sources / add_executable).
# tenants.json validation, quarantine (--keep-going), re-admission of restored specs,
# garbage in every file the registry reads, ledger rebuild; crash-consistent saves killed
# or failed at every step (forked children). Label "broker" through the unit executable.
target_sources(fracgpu_broker_unit_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/state_recovery_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/crash_consistency_test.cpp)

# The same against the real fracgpu-broker over the simulated GPU (label "integration"):
# SIGKILL while saving, a zeroed ledger header, garbage lock/tmp files, --keep-going.
target_sources(fracgpu_broker_integration_tests PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/broker_state_test.cpp)
