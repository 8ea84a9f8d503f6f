# Tests added for the scale work; included from CMakeLists.txt (target_sources / add_executable).

# Process tracking in batches, tracker generations, the books check's every-tick part and
# its slowed full scan at 1,000 tenants (in-memory segments, forked children). Label "broker".
target_sources(fracgpu_broker_unit_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/scale_tracking_test.cpp)
