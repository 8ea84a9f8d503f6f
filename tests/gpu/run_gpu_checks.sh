#!/usr/bin/env bash
# fracgpu real-GPU checks: one batch, run on a machine with an NVIDIA GPU, from the repo root.
#
#   tests/gpu/run_gpu_checks.sh [--shim PATH] [--out DIR] [--budget SECONDS]
#                               [--launch-n N] [--launch-pairs K] [--only "CLIENT ..."] [--keep-work]
#
# Every client (a CUDA C++ program, PyTorch, PyTorch with expandable segments, JAX, CuPy,
# Triton, cuda-python) runs twice: natively and with LD_PRELOAD=libfracgpu.so plus
# FRACGPU_HOOK_STATS. A client passes when both runs succeed, print the same result
# (compare_results.py: floats within 1e-6 relative) and the shim's hook statistics show the
# client's launches and allocations went through the shim. Then the launch-rate overhead:
# cuda_client --mode launch-rate N, native and shim alternated K times each.
#
# DIR (default $OUT if set, else /tmp/fracgpu-gpu-out) receives summary.json, summary.txt and
# logs.tar.gz (every log, output and stats file of DIR/work). DIR/work is removed after it
# is archived when DIR came from $OUT (the device harness returns only a few files), kept
# otherwise or with --keep-work. The whole batch is bounded by --budget (default 320 s):
# a run never gets more than the time left, and runs that no longer fit are reported as
# skipped. Exit status: 0 only if every check passed.
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
SHIM="$REPO/build/lib/libfracgpu.so"
DIR="${OUT:-/tmp/fracgpu-gpu-out}"
DIR_FROM_OUT=0
[[ -n "${OUT:-}" ]] && DIR_FROM_OUT=1
BUDGET=320
LAUNCH_N=200000
LAUNCH_PAIRS=7
ONLY=""
KEEP_WORK=0
ARCH="${FRACGPU_GPU_ARCH:-sm_90}"
PYTHON="${PYTHON:-python3}"

usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case "$1" in
    --shim) SHIM="${2:?--shim needs a path}"; shift 2 ;;
    --out) DIR="${2:?--out needs a directory}"; DIR_FROM_OUT=0; shift 2 ;;
    --budget) BUDGET="${2:?}"; shift 2 ;;
    --launch-n) LAUNCH_N="${2:?}"; shift 2 ;;
    --launch-pairs) LAUNCH_PAIRS="${2:?}"; shift 2 ;;
    --only) ONLY="${2:?}"; shift 2 ;;
    --keep-work) KEEP_WORK=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_gpu_checks.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in BUDGET LAUNCH_N LAUNCH_PAIRS; do
  if ! [[ "${!v}" =~ ^[0-9]+$ ]]; then echo "run_gpu_checks.sh: $v must be a number" >&2; exit 2; fi
done
# an explicit --out of the harness's own $OUT still gets the harness treatment
if [[ -n "${OUT:-}" ]] && [[ "$(realpath -m "$DIR")" == "$(realpath -m "$OUT")" ]]; then DIR_FROM_OUT=1; fi

START=$(date +%s)
DEADLINE=$((START + BUDGET))
cd "$REPO" || exit 2
mkdir -p "$DIR" || exit 2
DIR="$(cd "$DIR" && pwd)"
WORK="$DIR/work"
rm -rf "$WORK" "$DIR/summary.json" "$DIR/summary.txt" "$DIR/logs.tar.gz"
mkdir -p "$WORK/logs" "$WORK/stats" "$WORK/bin"
: > "$WORK/runs.tsv"
ENVTXT="$WORK/environment.txt"
if [[ -e "$SHIM" ]]; then SHIM="$(realpath "$SHIM")"; fi

# Settings every run gets (the clients default them too).
export CUBLAS_WORKSPACE_CONFIG=:4096:8
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONDONTWRITEBYTECODE=1
export PYTHONUNBUFFERED=1
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"

say() { printf '%s\n' "$*"; }
now() { date +%s; }
elapsed_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }

# record CLIENT VARIANT IDX RC ELAPSED LIMIT OUTFILE ERRFILE STATSDIR
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$WORK/runs.tsv"; }

# run_one CLIENT VARIANT(native|shim) IDX TIMEOUT CMD...
run_one() {
  local client="$1" variant="$2" idx="$3" limit="$4"
  shift 4
  local tag="$client.$variant"
  [[ "$idx" != 0 ]] && tag="$tag.$idx"
  local out="$WORK/logs/$tag.out" err="$WORK/logs/$tag.err" statsdir=""
  local left=$((DEADLINE - $(now)))
  if ((left < 10)); then
    : > "$out"
    echo "skipped: time budget of ${BUDGET}s used up" > "$err"
    record "$client" "$variant" "$idx" 125 0 0 "$out" "$err" ""
    printf '  %-12s %-6s %-3s skipped (time budget)\n' "$client" "$variant" "$idx"
    return 125
  fi
  ((limit > left)) && limit=$left
  local t0 rc
  t0=$(date +%s.%N)
  if [[ "$variant" == shim ]]; then
    statsdir="$WORK/stats/$tag"
    mkdir -p "$statsdir"
    timeout -k 5 "$limit" env LD_PRELOAD="$SHIM" FRACGPU_HOOK_STATS="$statsdir/stats-%p.json" "$@" \
      > "$out" 2> "$err" < /dev/null
    rc=$?
  else
    timeout -k 5 "$limit" env -u LD_PRELOAD -u FRACGPU_HOOK_STATS "$@" > "$out" 2> "$err" < /dev/null
    rc=$?
  fi
  local el
  el=$(elapsed_since "$t0")
  LAST_ELAPSED="$el"
  record "$client" "$variant" "$idx" "$rc" "$el" "$limit" "$out" "$err" "$statsdir"
  local note=""
  ((rc == 124 || rc == 137)) && note=" (timed out at ${limit}s)"
  printf '  %-12s %-6s %-3s rc=%-3s %7ss%s\n' "$client" "$variant" "$idx" "$rc" "$el" "$note"
  return "$rc"
}

LAST_ELAPSED=0
selected() { [[ -z "$ONLY" ]] || [[ " $ONLY " == *" $1 "* ]]; }

# ------------------------------------------------------------------ environment
say "== fracgpu GPU checks: repo $REPO, out $DIR, budget ${BUDGET}s"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm)"
  echo "repo_commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "repo_dirty_files: $(git -C "$REPO" status --porcelain 2>/dev/null | wc -l)"
  echo "shim: $SHIM"
  if [[ -f "$SHIM" ]]; then
    echo "shim_size: $(stat -c %s "$SHIM")"
    echo "shim_sha256: $(sha256sum "$SHIM" | cut -d' ' -f1)"
    if command -v readelf >/dev/null 2>&1; then
      echo "shim_soname: $(readelf -d "$SHIM" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
    fi
  else
    echo "shim_missing: yes"
  fi
  echo "FRACGPU_REAL_DRIVER: ${FRACGPU_REAL_DRIVER:-<unset>}"
  echo "ldconfig_libcuda: $( (ldconfig -p 2>/dev/null | grep -m3 'libcuda.so' | tr -s ' \t' ' ' | tr '\n' ';') || true)"
  echo "nvidia-smi -L:"
  timeout 30 nvidia-smi -L 2>&1 | sed 's/^/  /'
  echo "nvidia-smi query:"
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_mode \
    --format=csv,noheader 2>&1 | sed 's/^/  /'
  echo "python: $("$PYTHON" --version 2>&1)"
} > "$ENVTXT" 2>&1
cat "$ENVTXT"
timeout 30 nvidia-smi > "$WORK/logs/nvidia-smi.before.txt" 2>&1
if [[ ! -f "$SHIM" ]]; then
  say "WARNING: shim not found at $SHIM: every shim run will fail"
fi

# ------------------------------------------------------------------ build
CUDA_CLIENT="$WORK/bin/cuda_client"
NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
[[ -x "$NVCC" ]] || NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
BUILT=0
if selected cuda_client || selected launch_rate; then
  say "== build cuda_client ($NVCC -arch=$ARCH)"
  t0=$(date +%s.%N)
  timeout 240 "$NVCC" -O2 -arch="$ARCH" -o "$CUDA_CLIENT" "$SCRIPT_DIR/cuda_client.cu" -lcuda \
    > "$WORK/logs/build.out" 2> "$WORK/logs/build.err" < /dev/null
  rc=$?
  record build build 0 "$rc" "$(elapsed_since "$t0")" 240 "$WORK/logs/build.out" "$WORK/logs/build.err" ""
  if ((rc == 0)) && [[ -x "$CUDA_CLIENT" ]]; then
    BUILT=1
    say "  built in $(elapsed_since "$t0")s"
  else
    say "  BUILD FAILED rc=$rc"
    tail -n 20 "$WORK/logs/build.err"
  fi
fi

pair() {  # pair CLIENT TIMEOUT CMD...: the native run, then the shim run
  local client="$1" limit="$2"
  shift 2
  run_one "$client" native 0 "$limit" "$@"
  run_one "$client" shim 0 "$limit" "$@"
}

CLIENTS_DIR="$SCRIPT_DIR/clients"
say "== clients (native, then with the shim)"
if selected cuda_client; then
  if ((BUILT)); then
    pair cuda_client 60 "$CUDA_CLIENT"
  else
    for variant in native shim; do
      echo "cuda_client was not built" > "$WORK/logs/cuda_client.$variant.err"
      : > "$WORK/logs/cuda_client.$variant.out"
      record cuda_client "$variant" 0 126 0 0 "$WORK/logs/cuda_client.$variant.out" \
        "$WORK/logs/cuda_client.$variant.err" ""
    done
  fi
fi
selected cuda_python && pair cuda_python 60 "$PYTHON" "$CLIENTS_DIR/cuda_python_check.py"

# The launch-rate series comes early: it is the one quantitative figure of this batch.
if selected launch_rate && ((BUILT)); then
  say "== launch rate: $LAUNCH_N empty launches, native/shim alternated $LAUNCH_PAIRS times"
  for ((i = 1; i <= LAUNCH_PAIRS; i++)); do
    run_one launch_rate native "$i" 60 "$CUDA_CLIENT" --mode launch-rate "$LAUNCH_N" || break
    run_one launch_rate shim "$i" 60 "$CUDA_CLIENT" --mode launch-rate "$LAUNCH_N" || break
    # A shim run far slower than expected (~5 s) would eat the other clients' time: the
    # ratio is plain after 3 pairs, so the series is cut there (and reported as cut).
    if ((i == 1 && LAUNCH_PAIRS > 3)) && awk -v e="$LAST_ELAPSED" 'BEGIN { exit !(e > 15) }'; then
      say "  shim run took ${LAST_ELAPSED}s: launch-rate series cut to 3 pairs"
      echo "launch_rate_series_cut: first shim run took ${LAST_ELAPSED}s; 3 pairs instead of $LAUNCH_PAIRS" >> "$ENVTXT"
      LAUNCH_PAIRS=3
    fi
  done
fi

selected torch && pair torch 120 "$PYTHON" "$CLIENTS_DIR/torch_step.py"
selected triton && pair triton 120 "$PYTHON" "$CLIENTS_DIR/triton_check.py"
selected cupy && pair cupy 120 "$PYTHON" "$CLIENTS_DIR/cupy_check.py"
selected jax && pair jax 120 "$PYTHON" "$CLIENTS_DIR/jax_step.py"
selected torch_vmm && pair torch_vmm 120 "$PYTHON" "$CLIENTS_DIR/torch_step.py" --expandable-segments

timeout 30 nvidia-smi > "$WORK/logs/nvidia-smi.after.txt" 2>&1

# ------------------------------------------------------------------ report
say "== report (total $(($(now) - START))s)"
"$PYTHON" "$SCRIPT_DIR/compare_results.py" report --work "$WORK" --shim "$SHIM" \
  --summary "$DIR/summary.json" --table "$DIR/summary.txt" --env "$ENVTXT" \
  --launch-n "$LAUNCH_N" --launch-pairs "$LAUNCH_PAIRS" > "$WORK/report.txt" 2> "$WORK/report.err"
STATUS=$?
cat "$WORK/report.txt"
if ((STATUS != 0 && STATUS != 1)) || [[ ! -s "$DIR/summary.json" ]]; then
  say "report failed (status $STATUS):"
  cat "$WORK/report.err"
  say "raw runs (client variant idx rc elapsed):"
  cut -f1-5 "$WORK/runs.tsv"
  printf '{"passed": false, "error": "compare_results.py report failed with status %s; see logs.tar.gz"}\n' \
    "$STATUS" > "$DIR/summary.json"
  STATUS=1
fi

# ------------------------------------------------------------------ archive
tar -czf "$DIR/logs.tar.gz" -C "$DIR" --exclude=work/bin work 2> "$DIR/tar.err" && rm -f "$DIR/tar.err"
if ((DIR_FROM_OUT && !KEEP_WORK)) && [[ -s "$DIR/logs.tar.gz" ]]; then
  rm -rf "$WORK"
fi
say "== done in $(($(now) - START))s: $DIR/summary.json, $DIR/summary.txt, $DIR/logs.tar.gz; exit $STATUS"
exit "$STATUS"
