#!/usr/bin/env bash
# The whole test suite under ThreadSanitizer and under AddressSanitizer +
# UndefinedBehaviorSanitizer (CI's sanitizer job; cmake/Sanitizers.cmake says what is
# instrumented). For each: configure, build what the tests need, run every ctest label but
# `timing` (tests/timing.cmake says why those mean nothing under a sanitizer) and `gpu`,
# then fail if any process of the run — a test binary, a broker, a CLI, a test program, a
# child any of them forked — wrote a sanitizer report, whether or not its test noticed.
#
#   tools/ci_sanitizers.sh [thread|address|all] [extra ctest arguments...]
#
# Environment: FRACGPU_TSAN_BUILD (build-tsan), FRACGPU_ASAN_BUILD (build-asan): the build
# folders; JOBS (2): build and ctest parallelism; FRACGPU_CTEST_TIMEOUT (300): per test;
# FRACGPU_SANITIZERS_NO_BUILD=1: test the folders as they are (to rerun tests by hand,
# e.g. with -R NAME).
#
# Build type: Debug with -Og -g1, which the build's time decides: the sanitizer builds
# compile everything (~300 files) on CI's 2 cores. -g1 (line tables) is all a report's
# stack needs and compiles ~25 % faster than -g; -Og compiles ASan+UBSan code ~40 % faster
# than -O1 (UBSan's checks make GCC's -O1 passes slow) and TSan code ~20 % faster, for an
# instrumented process that is still within a few times the normal speed. The tests
# mostly wait on processes; the few hot test loops are kept out of the instrumentation.
#
# Runtime options (on top of tools/sanitizers/default_options.cpp, built into every
# instrumented executable):
#   all:   log_path=<build>/sanitizer-reports/<tool>: each process writes its report to
#          <tool>.<pid> there (the folder is 1777: tests run processes as other users);
#          the reports are the verdict, and are printed at the end.
#   TSan:  halt_on_error=1 (a report ends the process; exit 66), second_deadlock_stack=1
#          (both stacks of a lock-order inversion).
#   ASan:  detect_leaks=1, halt_on_error=1, detect_stack_use_after_return=1,
#          check_initialization_order=1, strict_string_checks=1.
#   UBSan: halt_on_error=1, print_stacktrace=1 (with -fno-sanitize-recover=all every
#          finding is fatal).
#   Suppressions: tools/sanitizers/<tool>.supp where present: third-party code only.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
which=${1:-all}
shift || true
jobs=${JOBS:-2}
timeout=${FRACGPU_CTEST_TIMEOUT:-300}

configure() {  # dir sanitize
  cmake -S . -B "$1" -G Ninja -DFRACGPU_SANITIZE="$2" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_CXX_FLAGS_DEBUG="-Og -g1" -DCMAKE_C_FLAGS_DEBUG="-Og -g1" \
        -DFRACGPU_WERROR=ON -DFRACGPU_BUILD_BENCH=OFF >"$1.configure.log" ||
    { cat "$1.configure.log"; return 1; }
}

# Every report under the folder, printed; status 1 if there is any. A file without a
# report's first line is only printed: a process SIGKILLed (as tests do) while its leak
# check ran at exit leaves an empty file, or LeakSanitizer's "Unable to get registers".
reports() {  # folder
  local found=0 f
  for f in "$1"/*; do
    [[ -f $f ]] || continue
    if grep -qE '(ERROR|WARNING): [A-Za-z]+Sanitizer|runtime error:' "$f"; then
      found=1
      echo "=== sanitizer report $f"
    else
      echo "=== not a report (a process killed while its runtime wrote): $f"
    fi
    cat "$f"
  done
  return $found
}

run_one() {  # name dir sanitize
  local name=$1 dir=$2 san=$3 start reports_dir rc=0 supp
  shift 3
  start=$(date +%s)
  echo "ci_sanitizers: $name: configure and build $dir"
  # (`|| return`: run_one runs in an `||` list, where set -e does not apply.)
  if [[ -z ${FRACGPU_SANITIZERS_NO_BUILD:-} ]]; then
    configure "$dir" "$san" || return 1
    cmake --build "$dir" -j"$jobs" || return 1
  fi
  local built=$(($(date +%s) - start))
  reports_dir=$root/$dir/sanitizer-reports
  rm -rf "$reports_dir"
  mkdir -p "$reports_dir"
  chmod 1777 "$reports_dir"
  local env=()
  case $name in
    thread)
      supp=$root/tools/sanitizers/tsan.supp
      env=(TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$reports_dir/tsan$([[ -f $supp ]] && echo ":suppressions=$supp")")
      ;;
    address)
      supp=$root/tools/sanitizers/lsan.supp
      env=(ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_string_checks=1:log_path=$reports_dir/asan"
           LSAN_OPTIONS="$([[ -f $supp ]] && echo "suppressions=$supp")"
           UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports_dir/ubsan")
      ;;
  esac
  echo "ci_sanitizers: $name: ctest ($(ctest --test-dir "$dir" -N -LE 'timing|gpu' | tail -1))"
  env "${env[@]}" ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout "$timeout" \
      -LE 'timing|gpu' "$@" || rc=1
  if ! reports "$reports_dir"; then
    echo "ci_sanitizers: $name: sanitizer reports above" >&2
    rc=1
  fi
  echo "ci_sanitizers: $name: built in ${built} s, tested in $(($(date +%s) - start - built)) s," \
       "$([[ $rc == 0 ]] && echo clean || echo FAILED)"
  return $rc
}

status=0
case $which in
  thread | all) run_one thread "${FRACGPU_TSAN_BUILD:-build-tsan}" thread "$@" || status=1 ;;&
  address | all) run_one address "${FRACGPU_ASAN_BUILD:-build-asan}" "address;undefined" "$@" || status=1 ;;
  thread) ;;
  *) echo "usage: tools/ci_sanitizers.sh [thread|address|all] [ctest arguments...]" >&2; exit 2 ;;
esac
exit $status
