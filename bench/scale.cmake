# Broker scale benchmarks; included from CMakeLists.txt.
