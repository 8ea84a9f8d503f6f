#!/usr/bin/env bash
# fracgpu memory-quota checks on a real GPU: one batch, from the repo root.
#
#   tests/gpu/run_memory_checks.sh --bin DIR [--out DIR] [--budget SECONDS] [--keep-work]
#
# --bin DIR holds fracgpu, fracgpu-broker, libfracgpu.so and deps/ (the shared libraries
# of the two binaries; they alone get LD_LIBRARY_PATH=DIR/deps). Checks (memory_checks.py):
#   0 nvml_layout_check.cpp vs the real nvml.h   1 context footprint (informational)
#   2 C++ fill at a 4 GiB cap                    3 PyTorch at 8 GiB, three allocators
#   4 JAX preallocation in an 8 GiB tenant       5 CuPy at 4 GiB
#   6 nvidia-smi / pynvml inside a 6 GiB tenant  7 NVML from outside, 3 GiB held of 4
#   8 overcommit: 100/90 + 60/40 GiB tenants     9 every allocation route, real driver
# DIR (--out; default $OUT, else /tmp/fracgpu-mem-out) receives exactly three files:
# memory_summary.json, memory_summary.txt (the table) and memory_logs.tar.gz (every log).
# The work directory lives outside DIR and is removed unless --keep-work. The batch is
# bounded by --budget (default 240 s; checks that no longer fit are reported as skipped)
# plus a hard limit 40 s later. Exit status: 0 only if every pass/fail check passed.
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
BIN=""
DIR="${OUT:-/tmp/fracgpu-mem-out}"
BUDGET=240
KEEP_WORK=0
PYTHON="${PYTHON:-python3}"

usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case "$1" in
    --bin) BIN="${2:?--bin needs a directory}"; shift 2 ;;
    --out) DIR="${2:?--out needs a directory}"; shift 2 ;;
    --budget) BUDGET="${2:?}"; shift 2 ;;
    --keep-work) KEEP_WORK=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_memory_checks.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [[ -z "$BIN" ]]; then echo "run_memory_checks.sh: --bin DIR is required" >&2; usage >&2; exit 2; fi
if ! [[ "$BUDGET" =~ ^[0-9]+$ ]]; then echo "run_memory_checks.sh: --budget must be a number" >&2; exit 2; fi
if [[ ! -d "$BIN" ]]; then echo "run_memory_checks.sh: --bin $BIN is not a directory" >&2; exit 2; fi
BIN="$(cd "$BIN" && pwd)"

START=$(date +%s)
cd "$REPO" || exit 2
mkdir -p "$DIR" || exit 2
DIR="$(cd "$DIR" && pwd)"
SUMMARY="$DIR/memory_summary.json"
TABLE="$DIR/memory_summary.txt"
LOGS="$DIR/memory_logs.tar.gz"
rm -f "$SUMMARY" "$TABLE" "$LOGS"
WORK="$(mktemp -d /tmp/fracgpu-memchecks.XXXXXX)" || exit 2
mkdir -p "$WORK/logs"

# Whatever memory_checks.py started and left behind (it lists every process group it
# started in WORK/pgids) is ended here, group by group.
cleanup() {
  local pg
  if [[ -f "$WORK/pgids" ]]; then
    while read -r pg; do
      [[ "$pg" =~ ^[0-9]+$ ]] || continue
      if kill -0 -- "-$pg" 2>/dev/null; then
        echo "cleanup: process group $pg still alive, killing it" >> "$WORK/logs/cleanup.txt"
        kill -KILL -- "-$pg" 2>/dev/null
      fi
    done < "$WORK/pgids"
  fi
}
trap cleanup EXIT

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm)"
  echo "repo_commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "bin: $BIN"
  ls -l "$BIN" "$BIN/deps" 2>&1 | sed 's/^/  /'
  echo "shim_sha256: $(sha256sum "$BIN/libfracgpu.so" 2>/dev/null | cut -d' ' -f1)"
  echo "nvidia-smi:"
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_mode \
    --format=csv,noheader 2>&1 | sed 's/^/  /'
  echo "python: $("$PYTHON" --version 2>&1)"
  echo "g++: $(g++ --version 2>&1 | head -n1)"
} > "$WORK/logs/environment.txt" 2>&1
timeout 30 nvidia-smi > "$WORK/logs/nvidia-smi.before.txt" 2>&1

echo "== fracgpu memory checks: bin $BIN, out $DIR, work $WORK, budget ${BUDGET}s"
timeout -k 10 "$((BUDGET + 40))" "$PYTHON" "$SCRIPT_DIR/memory_checks.py" --bin "$BIN" --work "$WORK" \
  --summary "$SUMMARY" --table "$TABLE" --budget "$BUDGET" --python "$PYTHON" < /dev/null 2>&1 \
  | tee "$WORK/logs/memory_checks.console.txt"
STATUS=${PIPESTATUS[0]}
cleanup

timeout 30 nvidia-smi > "$WORK/logs/nvidia-smi.after.txt" 2>&1
timeout 30 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv \
  > "$WORK/logs/nvidia-smi.apps.after.txt" 2>&1

if [[ ! -s "$SUMMARY" || ! -s "$TABLE" ]]; then
  echo "memory_checks.py wrote no summary (status $STATUS)"
  printf '{"passed": false, "error": "memory_checks.py ended with status %s without a summary; see memory_logs.tar.gz"}\n' \
    "$STATUS" > "$SUMMARY"
  {
    echo "fracgpu memory checks: memory_checks.py ended with status $STATUS without a summary"
    tail -n 40 "$WORK/logs/memory_checks.console.txt" 2>/dev/null
    echo "RESULT: FAIL"
  } > "$TABLE"
  STATUS=1
fi
((STATUS == 0)) || STATUS=1

if ! TAR_ERR="$(tar -czf "$LOGS" -C "$WORK" --exclude=./bin . 2>&1)"; then echo "archiving the logs failed: $TAR_ERR"; fi
if ((KEEP_WORK)); then
  echo "work directory kept: $WORK"
else
  rm -rf "$WORK"
fi
echo "== done in $(($(date +%s) - START))s: $SUMMARY, $TABLE, $LOGS; exit $STATUS"
exit "$STATUS"
