#!/usr/bin/env bash
# fracgpu on two GPUs of one host (issue "Multi-GPU"): one batch of about 5 minutes on a
# machine with two NVIDIA GPUs, native and fracgpu side by side, with real clients:
#   m1 caps   PyTorch + NVML in one process, a different cap on each GPU (24 / 12 GiB):
#             totals, how much fits, an oversize tensor refused; the same tenant under
#             CUDA_VISIBLE_DEVICES=1 and =<GPU 1's UUID>; nvidia-smi inside the tenant
#   m2 peer   cuDeviceCanAccessPeer / cuDeviceGetP2PAttribute (ctypes), torch's peer
#             query and a 1 GiB peer copy, native vs fracgpu: must be identical
#   m3 nccl   PyTorch distributed NCCL all-reduce, one process per GPU, native and under
#             fracgpu (caps 40 / 30 GiB, compute 60 / 40: the launch gate engaged),
#             alternated --pairs times; right sums, bus bandwidth ratio of medians
#   m4 share  8192^2 bf16 matmul tenants on both GPUs: each GPU alone (reference), two
#             tenants natively, and fracgpu with tenant A 70 % of GPU 0 / 20 % of GPU 1 and
#             tenant B 30 % / 80 %; then m4d: A on both GPUs, B on GPU 1 only (GPU 0 must
#             stay A's whole GPU while GPU 1 is split); m4e: the single-GPU control of
#             m4c's GPU 1 (A 20 % / B 80 %, both on GPU 0 only)
#   tests/gpu/multi/run_multi_gpu_checks.sh [--bin DIR] [--out DIR] [--seconds S]
#       [--pairs K] [--budget S] [--sync-every N] [--only "m1 m2 ..."]
# --bin (default $B, else devrun/bin) holds fracgpu, fracgpu-broker, libfracgpu.so and
# deps/. Results in DIR/multi (--out, default $OUT, else /tmp/fracgpu-multi-out): one JSON
# per run, summary.md (PASS/FAIL table from multi_report.py), summary.json, logs.tar.gz,
# the broker's status during each share phase (PHASE.status.json), all also in
# DIR/multi.tar.gz. --sync-every: matmuls between the tenants' synchronisations (8).
# NVLink multicast stays off everywhere (NCCL_NVLS_ENABLE=0 and friends are exported).
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../../.." && pwd)"
BIN="${B:-$REPO/devrun/bin}"
BASE_OUT="${OUT:-/tmp/fracgpu-multi-out}"
SECS=10 PAIRS=4 BUDGET=540 ONLY="" SYNC_EVERY=8
PYTHON="${PYTHON:-python3}"
usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --bin) BIN="${2:?--bin needs a directory}"; shift 2 ;;
    --out) BASE_OUT="${2:?--out needs a directory}"; shift 2 ;;
    --seconds) SECS="${2:?}"; shift 2 ;;
    --pairs) PAIRS="${2:?}"; shift 2 ;;
    --budget) BUDGET="${2:?}"; shift 2 ;;
    --only) ONLY="${2:?}"; shift 2 ;;
    --sync-every) SYNC_EVERY="${2:?}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_multi_gpu_checks.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in SECS PAIRS BUDGET SYNC_EVERY; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "run_multi_gpu_checks.sh: $v must be a whole number" >&2; exit 2; }
done
[[ -d "$BIN" ]] || { echo "run_multi_gpu_checks.sh: --bin $BIN is not a directory" >&2; exit 2; }
BIN="$(cd "$BIN" && pwd)"
FRACGPU="$BIN/fracgpu" SHIM="$BIN/libfracgpu.so" DEPS_LD="$BIN/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
START=$(date +%s)
DEADLINE=$((START + BUDGET))
OUTC="$BASE_OUT/multi"
mkdir -p "$OUTC" || exit 2
OUTC="$(cd "$OUTC" && pwd)"
rm -f "$OUTC"/*.json "$OUTC"/*.out "$OUTC"/*.txt "$OUTC"/summary.md "$OUTC"/logs.tar.gz
WORK="$(mktemp -d /tmp/fgm.XXXXXX)" || exit 2
RUN="$WORK/r" STATE="$WORK/s"
mkdir -p "$WORK/logs" "$RUN" "$STATE"
source "$SCRIPT_DIR/../gpu_phase_lib.sh"

unset LD_PRELOAD FRACGPU_SOCKET FRACGPU_RUN_DIR FRACGPU_DISABLE CUDA_VISIBLE_DEVICES
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if [[ -n "${LD_LIBRARY_PATH+x}" ]]; then RESTORE_LD=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"); else RESTORE_LD=(env -u LD_LIBRARY_PATH); fi
selected() { [[ -z "$ONLY" ]] || [[ " $ONLY " == *" $1 "* ]]; }
GROUPS_LIVE=()
cleanup() {
  local pg
  for pg in "${GROUPS_LIVE[@]}"; do killgroup "$pg"; done
  stop_broker
  tar -czf "$OUTC/logs.tar.gz" -C "$WORK" logs 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

# frac_argv NAME [fracgpu run flags] -- CMD...: sets ARGV to run CMD as tenant NAME of the
# node broker (fracgpu gets deps/ on its library path, CMD the caller's).
frac_argv() {
  local name=$1; shift
  local -a flags=()
  while (($#)) && [[ "$1" != -- ]]; do flags+=("$1"); shift; done
  shift
  ARGV=(env LD_LIBRARY_PATH="$DEPS_LD" FRACGPU_SHIM="$SHIM" "$FRACGPU" --run-dir "$RUN" run --name "$name"
        "${flags[@]}" -- "${RESTORE_LD[@]}" "$@")
}
# one TAG LIMIT CMD... | one TAG LIMIT frac NAME FLAGS -- CMD...: step (gpu_phase_lib.sh) for CMD,
# as a tenant with `frac`, and its exit status in runs.tsv.
one() {
  local tag=$1 limit=$2; shift 2
  if [[ "$1" == frac ]]; then shift; frac_argv "$@"; set -- "${ARGV[@]}"; fi
  step "$tag" "$limit" "$@"
  printf '%s\t%s\n' "$tag" "$RC" >> "$OUTC/runs.tsv"
  return $RC
}
phase() {  # phase ID NEEDED_S TEXT: false when not selected or out of time
  selected "$1" || return 1
  if (($(left) < $2)); then say "== [$1] SKIPPED: $(left)s left, needs ~$2s"; printf '%s\tskipped\n' "$1" >> "$OUTC/runs.tsv"; return 1; fi
  say "== [$1] $3 ($(($(date +%s) - START))s)"
}

mm_cmd() {  # mm_cmd PHASE TAG GPU DEVICE: a matmul process on DEVICE (as the process numbers it)
  printf '%q ' "$PYTHON" "$REPO/tests/gpu/compute/matmul_tenant.py" --device "$4" --seconds "$SECS" --sync-every "$SYNC_EVERY" \
    --barrier "$PH/go" --ready "$PH/$2.g$3.ready" --out "$OUTC/$1.$2.g$3.json" --tag "$1.$2.g$3"
}
# mm_tenant PHASE TAG native|"fracgpu run flags" GPU[:DEVICE]...: one tenant TAG (natively:
# a group of processes) with a matmul process on each physical GPU, written to
# PHASE.TAG.gGPU.json; DEVICE is the index the process uses when it differs from GPU (a
# tenant given only GPU 1 sees it as device 0). All wait for $PH/go.
mm_tenant() {
  local phase=$1 tag=$2 mode=$3; shift 3
  local script="" d
  for d in "$@"; do script+="$(mm_cmd "$phase" "$tag" "${d%%:*}" "${d##*:}") & "; done
  script+="wait"
  if [[ "$mode" == native ]]; then
    setsid timeout -k 5 60 bash -c "$script" > "$WORK/logs/$phase.$tag.out" 2>&1 < /dev/null &
  else
    # shellcheck disable=SC2086  # the flags are words
    setsid timeout -k 5 60 env LD_LIBRARY_PATH="$DEPS_LD" FRACGPU_SHIM="$SHIM" "$FRACGPU" --run-dir "$RUN" run \
      --name "$phase-$tag" $mode -- "${RESTORE_LD[@]}" bash -c "$script" > "$WORK/logs/$phase.$tag.out" 2>&1 < /dev/null &
  fi
  GROUPS_LIVE+=("$!")
}
share_phase() {  # share_phase PHASE, after mm_tenant calls: wait for ready, release, wait, clean
  local want i pg
  want=$(printf '%s\n' "${GROUPS_LIVE[@]}" | wc -l)
  for ((i = 0; i < 900; i++)); do   # 90 s at most; ends early when every group has exited
    (($(ls "$PH"/*.ready 2>/dev/null | wc -l) >= READY_WANT)) && break
    for pg in "${GROUPS_LIVE[@]}"; do alive "$pg" && break; pg=""; done
    [[ -n "$pg" ]] || break
    sleep 0.1
  done
  touch "$PH/go"
  sleep $((SECS - 1))   # the broker's measured shares near the end of the window
  frac_cli status --json > "$OUTC/$1.status.json" 2>/dev/null
  for pg in "${GROUPS_LIVE[@]}"; do wait "$pg" 2>/dev/null; done
  for pg in "${GROUPS_LIVE[@]}"; do killgroup "$pg"; done
  GROUPS_LIVE=()
  say "  $1: $want tenant groups, $(ls "$PH"/*.ready 2>/dev/null | wc -l)/$READY_WANT processes were ready"
}
new_phase_dir() { PH="$WORK/$1"; mkdir -p "$PH"; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -srm)"
  echo "repo_commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "shim_sha256: $(sha256sum "$SHIM" 2>/dev/null | cut -d' ' -f1)"
  timeout 30 nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,clocks.max.sm --format=csv 2>&1
  timeout 30 nvidia-smi topo -m 2>&1
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())' 2>&1
} > "$OUTC/environment.txt"
say "== fracgpu multi-GPU checks: bin $BIN, out $OUTC, budget ${BUDGET}s"
ensure_broker || exit 1
GPU1_UUID=$(timeout 30 nvidia-smi --query-gpu=uuid --format=csv,noheader -i 1 2>/dev/null | tr -d ' ')

if phase m1 40 "per-device caps, PyTorch + NVML"; then
  CAPS=(--memory 0=24GiB,1=12GiB --gpu 0,1)
  one m1.caps 60 frac caps "${CAPS[@]}" -- "$PYTHON" "$SCRIPT_DIR/two_gpu_caps.py" --expect 0=24GiB,1=12GiB
  one m1.cvd_index 60 frac caps-i "${CAPS[@]}" -- env CUDA_VISIBLE_DEVICES=1 "$PYTHON" "$SCRIPT_DIR/two_gpu_caps.py" --expect 0=12GiB
  one m1.cvd_uuid 60 frac caps-u "${CAPS[@]}" -- env CUDA_VISIBLE_DEVICES="$GPU1_UUID" "$PYTHON" "$SCRIPT_DIR/two_gpu_caps.py" --expect 0=12GiB
  frac_argv smi "${CAPS[@]}" -- nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits
  timeout 60 "${ARGV[@]}" > "$OUTC/m1.nvidia_smi.txt" 2> "$WORK/logs/m1.smi.err" < /dev/null
  timeout 30 nvidia-smi --query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits > "$OUTC/m1.nvidia_smi_native.txt" 2>&1
fi
if phase m2 30 "peer-to-peer detection and copy, native vs fracgpu"; then
  one m2.native 60 "$PYTHON" "$SCRIPT_DIR/peer_probe.py"
  one m2.frac 60 frac peer --memory 40GiB --gpu 0,1 -- "$PYTHON" "$SCRIPT_DIR/peer_probe.py"
fi
if phase m3 60 "NCCL all-reduce, native vs fracgpu, alternated"; then
  AR=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node=2 "$SCRIPT_DIR/allreduce.py" --sizes-mib 64,256,1024)
  for ((k = 1; k <= PAIRS; k++)); do
    (($(left) > 50)) || { say "  m3: stopping after $((k - 1)) pairs (budget)"; break; }
    one "m3.native.$k" 90 "${AR[@]}"
    one "m3.frac.$k" 90 frac "nccl-$k" --memory 0=40GiB,1=30GiB --compute 0=60,1=40 --gpu 0,1 -- "${AR[@]}"
  done
fi
if phase m4a $((SECS + 25)) "matmul alone on each GPU (reference)"; then
  new_phase_dir m4a; READY_WANT=2
  mm_tenant m4a solo native 0 1
  share_phase m4a
fi
if phase m4b $((SECS + 25)) "two tenants on both GPUs, native time slicing"; then
  new_phase_dir m4b; READY_WANT=4
  mm_tenant m4b a native 0 1
  mm_tenant m4b b native 0 1
  share_phase m4b
fi
if phase m4c $((SECS + 25)) "fracgpu: A 70/20, B 30/80 on GPU 0/1"; then
  new_phase_dir m4c; READY_WANT=4
  mm_tenant m4c a "--memory 20GiB --gpu 0,1 --compute 0=70,1=20" 0 1
  mm_tenant m4c b "--memory 20GiB --gpu 0,1 --compute 0=30,1=80" 0 1
  share_phase m4c
fi
if phase m4d $((SECS + 25)) "fracgpu: A 50/50 on both GPUs, B 50 on GPU 1 only"; then
  new_phase_dir m4d; READY_WANT=3
  mm_tenant m4d a "--memory 20GiB --gpu 0,1 --compute 50" 0 1
  mm_tenant m4d b "--memory 20GiB --gpu 1 --compute 50" 1:0
  share_phase m4d
fi
if phase m4e $((SECS + 25)) "fracgpu: A 20, B 80, both on GPU 0 only (control)"; then
  new_phase_dir m4e; READY_WANT=2
  mm_tenant m4e a "--memory 20GiB --gpu 0 --compute 20" 0
  mm_tenant m4e b "--memory 20GiB --gpu 0 --compute 80" 0
  share_phase m4e
fi

say "== report ($(($(date +%s) - START))s)"
"$PYTHON" "$SCRIPT_DIR/multi_report.py" "$OUTC" --secs "$SECS" --only "$ONLY" | tee "$OUTC/summary.md"
STATUS=${PIPESTATUS[0]}
tar -czf "$OUTC/logs.tar.gz" -C "$WORK" logs 2>/dev/null
tar -czf "$BASE_OUT/multi.tar.gz" -C "$BASE_OUT" multi 2>/dev/null
say "== done in $(($(date +%s) - START))s: $OUTC/summary.md; exit $STATUS"
exit "$STATUS"
