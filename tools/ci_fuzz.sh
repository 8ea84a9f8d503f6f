#!/usr/bin/env bash
# CI's bounded fuzz run of the libFuzzer targets in tests/fuzz/: builds them with Debian's
# clang in build-fuzz, replays every seed (ctest -L fuzz), then runs each target for
# FUZZ_SECONDS (default 30) on a scratch copy of its seed corpus, FUZZ_JOBS (default 2)
# at a time, and fails if any target crashed, leaked, hung or broke an invariant, printing
# the reproducer's path and bytes. The repository is never written to: new inputs stay
# in the scratch copy (kept with FUZZ_KEEP=1, for growing the corpus by hand).
# Knobs: FUZZ_SECONDS, FUZZ_JOBS, FUZZ_TARGETS (names, default all), FUZZ_BUILD_DIR,
# FUZZ_OPTIMIZE (default -O1; -O0 builds in less than half the time but runs the
# JSON-heavy targets some 40 times slower, so a bounded run would find next to nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
seconds=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-2}
build=${FUZZ_BUILD_DIR:-build-fuzz}

# clang with its libFuzzer runtime. Debian 12's clang pulls libclang-common-14-dev, which only
# recommends libclang-rt-14-dev, the package of libclang_rt.fuzzer*.a: name it, since CI
# installs without recommends.
runtime_ok() {
  command -v clang++ >/dev/null &&
    compgen -G "$(clang++ -print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer*.a" >/dev/null
}
if ! runtime_ok; then
  apt-get install -y --no-install-recommends clang libclang-rt-14-dev ||
    { apt-get update && apt-get install -y --no-install-recommends clang libclang-rt-14-dev; }
  runtime_ok || { echo "ci_fuzz: clang's libFuzzer runtime is still missing" >&2; exit 1; }
fi

# A unity build (8 sources a unit), as the sanitizer builds: the fuzz libraries compile the
# broker's and the plugin's sources again with clang, 447 s on CI's 2 cores without it.
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRACGPU_FUZZ=ON \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
  -DFRACGPU_BUILD_BENCH=OFF -DFRACGPU_BUILD_TESTS=OFF -DFRACGPU_FUZZ_OPTIMIZE="${FUZZ_OPTIMIZE:--O1}" >/dev/null
cmake --build "$build" -j2 --target fracgpu_fuzzers
built=$(date +%s)
bin=$(cd "$build/bin" && pwd)

# Every seed still runs clean (the corpus is part of the repository's tests).
ctest --test-dir "$build" -L fuzz --output-on-failure -j2

targets=${FUZZ_TARGETS:-$(cd tests/fuzz/corpus && ls)}
scratch=$(mktemp -d /tmp/fracgpu-fuzz.XXXXXX)
if [ "${FUZZ_KEEP:-0}" != 1 ]; then trap 'rm -rf "$scratch"' EXIT; fi

# One target: its corpus copied, its output in $scratch/<name>/log, its exit status in .../rc.
run_target() {
  local name=$1 dir=$scratch/$1
  mkdir -p "$dir"
  cp -r "tests/fuzz/corpus/$name" "$dir/corpus"
  local rc=0
  (cd "$dir" && UBSAN_OPTIONS=print_stacktrace=1 "$bin/${name}_fuzz" corpus \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/") >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

running=0
for name in $targets; do
  run_target "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=0
printf '%-16s %10s %9s %7s %7s %6s\n' target execs exec/s cov ft corpus
for name in $targets; do
  dir=$scratch/$name
  log=$dir/log
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$done_line")
  printf '%-16s %10s %9s %7s %7s %6s\n' "$name" "${execs:--}" "${speed:--}" "${cov:--}" "${ft:--}" "${corp:--}"
  if [ "$(cat "$dir/rc")" != 0 ]; then
    failed=1
    echo "ci_fuzz: $name FAILED (exit $(cat "$dir/rc")); the end of its output:" >&2
    tail -n 60 "$log" >&2
    for input in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*; do
      [ -e "$input" ] || continue
      echo "ci_fuzz: reproducer $input ($(stat -c %s "$input") bytes); reproduce with:" >&2
      echo "  $bin/${name}_fuzz <file>   # the file being, in base64:" >&2
      base64 -w 76 "$input" >&2
      echo "ci_fuzz: as hex:" >&2
      od -A x -t x1z -v "$input" | head -n 64 >&2
    done
  fi
done
echo "ci_fuzz: build $((built - start)) s, done in $(( $(date +%s) - start )) s"
exit "$failed"
