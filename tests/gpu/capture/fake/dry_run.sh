#!/usr/bin/env bash
# Dry run of run_capture_checks.sh without a GPU: the node broker and every `fracgpu run` on the
# simulated driver (fakecuda/), the PyTorch clients replaced by fake_python.py (same files,
# barriers and JSON, made-up rates), the cuda-samples really built with nvcc if --samples is
# given (they then fail natively: there is no GPU, and they are reported "not judged"). Checks
# the runner's process control, budget, tenants, report and archive before GPU time is spent.
#
#   tests/gpu/capture/fake/dry_run.sh [--build DIR] [RUNNER ARGS...]
#
# --build DIR (default build of the repo) has bin/fracgpu, lib/libfracgpu.so and
# fakecuda/libcuda.so.1; packed with tools/pack_devrun.sh into a temporary devrun. The runner
# gets --out (a temporary directory, printed) and --budget 240 unless given. FAKE_FAIL and
# FAKE_HANG (see fake_python.py) inject failures. Exit status: the runner's.
set -u
set -o pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../../.." && pwd)"
BUILD="$REPO/build"
if [[ "${1:-}" == --build ]]; then BUILD="${2:?--build needs a directory}"; shift 2; fi
[[ -f "$BUILD/fakecuda/libcuda.so.1" ]] || { echo "dry_run.sh: no $BUILD/fakecuda/libcuda.so.1" >&2; exit 2; }
T="$(mktemp -d /tmp/fgcap-dry.XXXXXX)"
"$REPO/tools/pack_devrun.sh" "$BUILD" "$T/devrun" > "$T/pack.log" 2>&1 || { cat "$T/pack.log" >&2; exit 2; }
export FAKECUDA_SHM_NAME="/fgcapdry-$$" FAKECUDA_MEMORY=141GiB FAKECUDA_DEVICE_COUNT=1 FAKECUDA_CONTEXT_FOOTPRINT=64MiB
export FRACGPU_BROKER_FLAGS="--driver $BUILD/fakecuda/libcuda.so.1 --context-footprint 64MiB"
export PYTHON="$HERE/fake_python.py"
args=("$@")
[[ " ${args[*]} " == *" --out "* ]] || args+=(--out "$T/out")
[[ " ${args[*]} " == *" --budget "* ]] || args+=(--budget 240)
echo "dry_run.sh: results in $T/out (work files are removed by the runner unless --keep-work)" >&2
B="$T/devrun/bin" "$REPO/tests/gpu/capture/run_capture_checks.sh" "${args[@]}"
rc=$?
rm -f "/dev/shm${FAKECUDA_SHM_NAME}"
echo "dry_run.sh: runner exit $rc; summary: $T/out/capture/summary.md" >&2
exit "$rc"
