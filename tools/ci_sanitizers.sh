#!/usr/bin/env bash
# The test suite under ThreadSanitizer and under AddressSanitizer +
# UndefinedBehaviorSanitizer (CI's sanitizer job; cmake/Sanitizers.cmake says what is
# instrumented). For each: configure, build what its tests need, run its labels but
# `timing` (tests/timing.cmake says why those mean nothing under a sanitizer) and `gpu`,
# then fail if any process of the run — a test binary, a broker, a CLI, a test program, a
# child any of them forked — wrote a sanitizer report, whether or not its test noticed.
#
# Which tests each job runs. The preloaded shim is never instrumented (below), so the
# `integration` tests, whose subject is the shim in an application, exercise instrumented
# code only in the broker, the CLI and the simulated driver around it.
#   ThreadSanitizer: the labels whose subject is instrumented and threaded — unit (the
#     shim's core with its threads), broker (the broker's core, and the three programs that
#     test the broker process itself: its servers, socket limits, the HTTP face), fakecuda
#     (the simulated device's executor threads), k8s (the plugin's gRPC threads),
#     monitoring. Only their programs are built (FRACGPU_SANITIZER_LABELS).
#   ASan+UBSan: every label but `bench` (BenchSmoke measures; 100-180 s alone under a
#     sanitizer): memory errors anywhere the integration tests drive the broker, the CLI
#     and the simulated driver.
# The README's run in .ci/run runs every test on the normal build.
#
#   tools/ci_sanitizers.sh [thread|address|all] [extra ctest arguments...]
#
# Environment: FRACGPU_TSAN_BUILD (build-tsan), FRACGPU_ASAN_BUILD (build-asan): the build
# folders; JOBS (2): build parallelism; CTEST_JOBS (4): ctest's; FRACGPU_CTEST_TIMEOUT
# (300): per test without a timeout of its own; FRACGPU_SANITIZER_UNITY (ON): unity build;
# FRACGPU_SANITIZERS_NO_BUILD=1: test the folders as they are (to rerun tests by hand,
# e.g. with -R NAME).
#
# Measured on a 2-core machine (Debian 12, GCC 12; CPU seconds of every compile and link,
# which a shared machine does not inflate; a dedicated 2-core machine builds in about half
# of that, as ninja keeps both cores busy):
#                 clean build, CPU s      tests, wall    (every test but `timing`)
#   ThreadSan.    1,377 CPU s (unity)        390–487 s (618–621 tests)
#   Address+UB    2,107 CPU s (unity;         403 s (618 tests)
#                 4,652 without)
# With each job's labels as below (.ci/run on a fresh clone of 5ec1928, wall): ThreadSan.
# built in 459 s, 729 tests in 102 s; Address+UB built in 965 s, 896 tests in 347 s.
# The whole of .ci/run: docs/reliability.md ("CI's steps").
#
# Build type: Debug with -Og -g1, which the build's time decides: the sanitizer builds
# compile everything on CI's 2 cores. -g1 (line tables) is all a report's stack needs
# (-g0 would leave function+offset, no file:line) and compiles ~25 % faster than -g; -Og
# compiles ASan+UBSan code ~40 % faster than -O1 (UBSan's checks make GCC's -O1 passes
# slow) and TSan code ~20 % faster, for an instrumented process that is still within a few
# times the normal speed. The tests mostly wait on processes; the few hot test loops are
# kept out of the instrumentation.
# Unity build (CMAKE_UNITY_BUILD, 8 sources a unit): most of a file's compile time is the
# headers it includes (GoogleTest, the standard library, spdlog, nlohmann/json, gRPC), so
# one unit of 8 files costs about what 2-3 files cost alone. A source that cannot share a
# unit (a helper of the same name in an anonymous namespace as another file of its target)
# is named in cmake/Sanitizers.cmake, FRACGPU_UNITY_SEPARATE, and compiled alone; a new
# clash shows as "redefinition of ... {anonymous}::...", and is fixed there.
# ctest runs 4 tests at a time: most tests wait on processes (brokers, tenants, the
# simulated device's timers), the serial ones (RUN_SERIAL) still run alone. A failed test
# is run once more before it counts (as the README's run in .ci/run): a loaded machine can
# make an instrumented process miss a deadline. Sanitizer reports are never forgiven: the
# first attempt's report stays in the reports folder.
#
# Runtime options (on top of tools/sanitizers/default_options.cpp, built into every
# instrumented executable):
#   all:   log_path=<build>/sanitizer-reports/<tool>: each process writes its report to
#          <tool>.<pid> there (the folder is 1777: tests run processes as other users);
#          the reports are the verdict, and are printed at the end. A report that reached a
#          test's output instead (a process that got an environment without the options)
#          fails the run too.
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
ctest_jobs=${CTEST_JOBS:-4}
timeout=${FRACGPU_CTEST_TIMEOUT:-300}
unity=${FRACGPU_SANITIZER_UNITY:-ON}

configure() {  # dir sanitize labels
  mkdir -p "$1"
  cmake -S . -B "$1" -G Ninja -DFRACGPU_SANITIZE="$2" -DFRACGPU_SANITIZER_LABELS="$3" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_CXX_FLAGS_DEBUG="-Og -g1" -DCMAKE_C_FLAGS_DEBUG="-Og -g1" \
        -DCMAKE_UNITY_BUILD="$unity" -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 -DFRACGPU_UNITY_SEPARATE_EXTRA= \
        -DFRACGPU_WERROR=ON -DFRACGPU_BUILD_BENCH=OFF >"$1/configure.log" ||
    { cat "$1/configure.log"; return 1; }
}

# A unity build that fails is tried again with the sources its errors name compiled apart
# (FRACGPU_UNITY_SEPARATE_EXTRA), while that names new ones: a clash of two sources of one
# unit then costs a few recompiles, not the job, and is named for cmake/Sanitizers.cmake. A
# real error fails again alone, or lies in a header, and fails the build. (-k 0: every
# failing unit in one pass.)
build() {  # dir
  local log=$1/build.log apart="" named rc
  while :; do
    rc=0
    cmake --build "$1" -j"$jobs" -- -k 0 2>&1 | tee "$log" || rc=1
    if [[ $rc == 0 ]]; then
      [[ -z $apart ]] ||
        echo "ci_sanitizers: WARNING: unity clashes: add to FRACGPU_UNITY_SEPARATE in" \
             "cmake/Sanitizers.cmake: ${apart//;/ }" >&2
      return 0
    fi
    [[ $unity == ON ]] || return 1
    named=$(grep -oE "^$root/[^: ]+\.cpp:[0-9]+:[0-9]+: error:" "$log" | cut -d: -f1 |
              sed "s|^$root/||" | sort -u)
    named=$(comm -13 <(tr ';' '\n' <<<"$apart" | sort -u) <(echo "$named") | grep . || true)
    [[ -n $named ]] || return 1
    echo "ci_sanitizers: the unity build failed; again with these compiled apart:" $named >&2
    apart=$(printf '%s\n' ${apart//;/ } $named | sort -u | paste -sd';')
    cmake "$1" -DFRACGPU_UNITY_SEPARATE_EXTRA="$apart" >>"$1/configure.log" || return 1
  done
}

# Every report under the folder, printed; status 1 if there is any. A file without a
# report's first line is only printed: a process SIGKILLed (as tests do) while its leak
# check ran at exit leaves an empty file, or LeakSanitizer's "Unable to get registers".
reports() {  # folder
  local found=0 f
  for f in "$1"/*; do
    [[ -f $f ]] || continue
    if grep -qE '(ERROR|WARNING|FATAL): [A-Za-z]+Sanitizer|runtime error:' "$f"; then
      found=1
      echo "=== sanitizer report $f"
    else
      echo "=== not a report (a process killed while its runtime wrote): $f"
    fi
    cat "$f"
  done
  return $found
}

# Reports that went to a test's output rather than to the folder: ctest's log of every
# test's output, searched for a report's first line.
reports_in_output() {  # build dir
  local log=$1/Testing/Temporary/LastTest.log
  [[ -f $log ]] || return 0
  if grep -nE '^(==[0-9]+==)?(ERROR|WARNING|FATAL): [A-Za-z]+Sanitizer|^[^ ]+:[0-9]+(:[0-9]+)?: runtime error:' "$log"; then
    echo "ci_sanitizers: sanitizer reports in the tests' output above ($log)" >&2
    return 1
  fi
}

run_one() {  # name dir sanitize
  local name=$1 dir=$2 san=$3 start reports_dir rc=0 supp labels select
  shift 3
  start=$(date +%s)
  # What each job runs (the header says why): ThreadSanitizer the labels whose subject is
  # instrumented and threaded, and builds only their programs; ASan+UBSan every label but
  # the benchmarks'.
  case $name in
    thread) labels="unit;broker;fakecuda;k8s;monitoring"
            select=(-L "^(${labels//;/|})\$" -LE 'timing|gpu') ;;
    address) labels=""
             select=(-LE 'timing|gpu|bench') ;;
  esac
  # (`|| return`: run_one runs in an `||` list, where set -e does not apply.)
  if [[ -z ${FRACGPU_SANITIZERS_NO_BUILD:-} ]]; then
    echo "ci_sanitizers: $name: configure and build $dir (unity $unity)"
    configure "$dir" "$san" "$labels" || return 1
    build "$dir" || return 1
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
  echo "ci_sanitizers: $name: ctest ${select[*]} ($(ctest --test-dir "$dir" -N "${select[@]}" | tail -1))"
  env "${env[@]}" ctest --test-dir "$dir" --output-on-failure -j"$ctest_jobs" --timeout "$timeout" \
      --repeat until-pass:2 "${select[@]}" "$@" 2>&1 | tee "$dir/ctest.log" || rc=1
  # ctest's list of failed tests, kept for the summary at the end of the whole run.
  sed -n '/^The following tests FAILED/,$p' "$dir/ctest.log" >"$dir/ctest-failed.txt" || true
  if ! reports "$reports_dir"; then
    echo "ci_sanitizers: $name: sanitizer reports above" >&2
    rc=1
  fi
  reports_in_output "$dir" || rc=1
  local verdict="ci_sanitizers: $name: built in ${built} s, tested in $(($(date +%s) - start - built)) s,"
  verdict+=" $([[ $rc == 0 ]] && echo clean || echo FAILED)"
  [[ ! -s $dir/ctest-failed.txt ]] || verdict+=$'\n'"$(cat "$dir/ctest-failed.txt")"
  summary+=("$verdict")
  echo "$verdict"
  return $rc
}
# Each job's verdict, printed again at the end: a failure of the first job stays in the
# log's tail after the second job's output.
summary=()
trap 'printf "%s\n" "${summary[@]}"' EXIT

status=0
case $which in
  thread | all) run_one thread "${FRACGPU_TSAN_BUILD:-build-tsan}" thread "$@" || status=1 ;;&
  address | all) run_one address "${FRACGPU_ASAN_BUILD:-build-asan}" "address;undefined" "$@" || status=1 ;;
  thread) ;;
  *) echo "usage: tools/ci_sanitizers.sh [thread|address|all] [ctest arguments...]" >&2; exit 2 ;;
esac
exit $status
