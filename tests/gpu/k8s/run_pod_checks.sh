#!/usr/bin/env bash
# The Kubernetes "pod" path on a real GPU without a cluster (docs/kubernetes.md, "How it
# works"): the real node broker on the real driver, the real fracgpu-device-plugin
# (--slices 8 --high-slices 2), fracgpu-fake-kubelet registering it and calling
# ListAndWatch / GetPreferredAllocation / Allocate over the real gRPC API, and each
# allocation's process started as a container runtime would (fracgpu-test-container-run:
# private mount namespace, the response's mounts, /etc/ld.so.preload from the mount, no
# LD_PRELOAD, the response's env plus PATH and CUDA_VISIBLE_DEVICES from
# NVIDIA_VISIBLE_DEVICES as the NVIDIA toolkit would set it). Cases:
#   A  2 normal slices: the shim mapped without LD_PRELOAD; PyTorch + NVML see capacity·2/8
#      and are refused above it (two_gpu_caps.py); nvidia-smi shows it; the holder's PID
#      is under the slices' tenant in `fracgpu status --json`
#   B  1 high slice: capacity·1/8 and the tenant's priority is high
#   C  a host process beside B's container, same env without the mounts: the whole GPU
#   tests/gpu/k8s/run_pod_checks.sh [--bin DIR] [--out DIR] [--budget S]
# --bin (default $B, else devrun/bin): fracgpu, libfracgpu.so, fracgpu-device-plugin,
# fracgpu-fake-kubelet, fracgpu-test-container-run and deps/ (their shared libraries; only
# our daemons and tools get it on LD_LIBRARY_PATH, never the container). Results in
# DIR/k8s (--out, default $OUT, else /tmp/fracgpu-pod-out): checks.tsv, results.json,
# summary.txt (the PASS/FAIL table), every JSON the steps printed, logs.tar.gz. Exit 0
# only when every check passed. Must run as root (mount namespace). With
# FRACGPU_POD_CHECK_FAKE=1 it runs on the simulated driver instead (no GPU, no PyTorch):
# the build tree FRACGPU_POD_FAKE_BUILD (default build-podgpu) supplies fakecuda and
# fracgpu-alloc-client, which stands in for the PyTorch and nvidia-smi steps.
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../../.." && pwd)"
BIN="${B:-$REPO/devrun/bin}"
BASE_OUT="${OUT:-/tmp/fracgpu-pod-out}"
BUDGET=150
PYTHON="${PYTHON:-python3}"
usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --bin) BIN="${2:?--bin needs a directory}"; shift 2 ;;
    --out) BASE_OUT="${2:?--out needs a directory}"; shift 2 ;;
    --budget) BUDGET="${2:?--budget needs seconds}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_pod_checks.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$BUDGET" =~ ^[0-9]+$ ]] || { echo "run_pod_checks.sh: --budget must be a whole number" >&2; exit 2; }
[[ -d "$BIN" ]] || { echo "run_pod_checks.sh: --bin $BIN is not a directory" >&2; exit 2; }
BIN="$(cd "$BIN" && pwd)"
for f in fracgpu libfracgpu.so fracgpu-device-plugin fracgpu-fake-kubelet fracgpu-test-container-run; do
  [[ -f "$BIN/$f" ]] || { echo "run_pod_checks.sh: $BIN/$f is missing" >&2; exit 2; }
done
PYTHON="$(command -v "$PYTHON")" || { echo "run_pod_checks.sh: no python3" >&2; exit 2; }
# shellcheck disable=SC2034  # FRACGPU and DEADLINE are read by gpu_phase_lib.sh
FRACGPU="$BIN/fracgpu" SHIM="$BIN/libfracgpu.so" DEPS_LD="$BIN/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
CRUN="$BIN/fracgpu-test-container-run"
PJ=("$PYTHON" "$SCRIPT_DIR/pod_checks.py")
START=$(date +%s)
# shellcheck disable=SC2034
DEADLINE=$((START + BUDGET))
OUTC="$BASE_OUT/k8s"
mkdir -p "$OUTC" || exit 2
OUTC="$(cd "$OUTC" && pwd)"
rm -f "$OUTC"/*.json "$OUTC"/*.out "$OUTC"/*.txt "$OUTC"/*.tsv "$OUTC"/logs.tar.gz
WORK="$(mktemp -d /tmp/fgpod.XXXXXX)" || exit 2
RUN="$WORK/r" STATE="$WORK/s" PLUGIN_DIR="$WORK/device-plugins" HOSTDIR="$WORK/host/fracgpu"
mkdir -p "$WORK/logs" "$RUN" "$STATE" "$PLUGIN_DIR" "$HOSTDIR/lib" "$WORK/scratch"
# shellcheck source=../gpu_phase_lib.sh
source "$SCRIPT_DIR/../gpu_phase_lib.sh"

unset LD_PRELOAD FRACGPU_SOCKET FRACGPU_RUN_DIR FRACGPU_DISABLE CUDA_VISIBLE_DEVICES
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
FAKE=0
[[ "${FRACGPU_POD_CHECK_FAKE:-0}" == 1 ]] && FAKE=1
# What every container gets besides the response's env: PATH, and the library path a
# container image would carry (the caller's; on the simulated node, the fake driver's
# directory, standing in for the toolkit injecting libcuda).
CONTAINER_BASE=(PATH="$PATH" HOME="${HOME:-/root}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1)
[[ -n "${LD_LIBRARY_PATH:-}" ]] && CONTAINER_BASE+=(LD_LIBRARY_PATH="$LD_LIBRARY_PATH")
if ((FAKE)); then
  FAKE_BUILD="${FRACGPU_POD_FAKE_BUILD:-$REPO/build-podgpu}"
  FAKECUDA="$FAKE_BUILD/fakecuda"
  ALLOC_CLIENT="$(find "$FAKE_BUILD" -name fracgpu-alloc-client -type f -perm -u+x 2>/dev/null | head -n 1)"
  [[ -f "$FAKECUDA/libcuda.so.1" && -n "$ALLOC_CLIENT" ]] ||
    { echo "run_pod_checks.sh: FRACGPU_POD_CHECK_FAKE=1 needs $FAKECUDA/libcuda.so.1 and fracgpu-alloc-client in $FAKE_BUILD" >&2; exit 2; }
  FOOTPRINT=$((64 << 20))
  export FAKECUDA_SHM_NAME="/fgpod-$$" FAKECUDA_MEMORY=16GiB FAKECUDA_DEVICE_COUNT=1 FAKECUDA_CONTEXT_FOOTPRINT=64MiB
  export FRACGPU_BROKER_FLAGS="--driver $FAKECUDA/libcuda.so.1 --context-footprint 64MiB"
  CONTAINER_BASE=(PATH="$PATH" HOME="${HOME:-/root}" LD_LIBRARY_PATH="$FAKECUDA"
                  FAKECUDA_SHM_NAME="$FAKECUDA_SHM_NAME" FAKECUDA_MEMORY="$FAKECUDA_MEMORY"
                  FAKECUDA_DEVICE_COUNT="$FAKECUDA_DEVICE_COUNT" FAKECUDA_CONTEXT_FOOTPRINT="$FAKECUDA_CONTEXT_FOOTPRINT")
fi

GROUPS_LIVE=()
PLUGIN_PG=""
# A hard limit 20 s past the budget: a step never gets more than what is left, but a hung
# status call or a slow teardown must still not hold the machine.
setsid bash -c "sleep $((BUDGET + 20)); kill -TERM $$" > /dev/null 2>&1 < /dev/null &
WATCHDOG_PG=$!
disown "$WATCHDOG_PG"  # killed at exit: no job notice
HOST_PRELOAD_BEFORE="$(cat /etc/ld.so.preload 2>/dev/null || echo '<absent>')"
cleanup() {
  local pg
  kill -KILL -- "-$WATCHDOG_PG" 2>/dev/null
  for pg in "${GROUPS_LIVE[@]}"; do killgroup "$pg"; done
  [[ -n "$PLUGIN_PG" ]] && killgroup "$PLUGIN_PG"
  stop_broker
  ((FAKE)) && rm -f "/dev/shm${FAKECUDA_SHM_NAME}"
  tar -czf "$OUTC/logs.tar.gz" -C "$WORK" logs 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
# Interrupted (or the hard limit): what ran so far is still reported.
trap 'say "interrupted"; record node interrupted FAIL "stopped by a signal after $(($(date +%s) - START))s"; "${PJ[@]}" report "$OUTC" > "$OUTC/summary.txt"; exit 130' INT TERM

# record CASE CHECK PASS|FAIL DETAIL
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ' | cut -c1-400)" >> "$OUTC/checks.tsv"
  say "  [$3] $1/$2: $4"
}
# judge CASE CHECK KIND ARGS...: pod_checks.py judges, the result is recorded
judge() {
  local case=$1 check=$2 detail rc; shift 2
  detail="$("${PJ[@]}" judge "$@" 2>&1)"; rc=$?
  record "$case" "$check" "$( ((rc == 0)) && echo PASS || echo FAIL)" "$detail"
  return $rc
}
# allocate CASE RESOURCE COUNT: the fake kubelet's JSON in $OUTC/CASE.allocate.json
allocate() {
  step "$1.allocate" 40 env LD_LIBRARY_PATH="$DEPS_LD" "$BIN/fracgpu-fake-kubelet" --plugin-dir "$PLUGIN_DIR" \
    --resource "$2" --count "$3" --registrations 2 --timeout-s 30
  local rc=$?
  if ((rc != 0)); then
    record "$1" allocate FAIL "fracgpu-fake-kubelet: $(tail -n 1 "$WORK/logs/$1.allocate.err")"
    return 1
  fi
  local resp="$OUTC/$1.allocate.json" tenant slices cls
  tenant="$("${PJ[@]}" get "$resp" allocate annotations fracgpu.io/tenant)"
  slices="$("${PJ[@]}" get "$resp" allocate annotations fracgpu.io/slices)"
  cls="$("${PJ[@]}" get "$resp" allocate annotations fracgpu.io/slice-class)"
  local ok=FAIL
  [[ -n "$tenant" && "$slices" == "$3/8" ]] && ok=PASS
  record "$1" allocate $ok "$2 x$3: preferred $("${PJ[@]}" get "$resp" preferred), tenant $tenant, slices $slices, class $cls"
  [[ $ok == PASS ]]
}
# container_argv RESPONSE CMD...: ARGV runs CMD as the runtime would start the container
container_argv() {
  local resp=$1; shift
  local -a mounts=() envs=()
  mapfile -d '' mounts < <("${PJ[@]}" mounts "$resp")
  mapfile -d '' envs < <("${PJ[@]}" envs "$resp")
  ARGV=(env -i "${CONTAINER_BASE[@]}" "${envs[@]}" CUDA_VISIBLE_DEVICES="$("${PJ[@]}" get "$resp" allocate envs NVIDIA_VISIBLE_DEVICES)"
        "$CRUN" --scratch "$WORK/scratch" "${mounts[@]}" -- "$@")
}
# host_argv RESPONSE CMD...: the same environment on the host, no namespace, no mounts
host_argv() {
  container_argv "$@"
  local i
  for ((i = 0; i < ${#ARGV[@]}; i++)); do [[ "${ARGV[i]}" == "$CRUN" ]] && break; done
  ARGV=("${ARGV[@]:0:i}" "${@:2}")
}
# holder CASE RESPONSE PRIORITY LIMIT_BYTES: a process holding memory in the container;
# the broker's status is recorded once the tenant lists its PID. Leaves HOLDER_PG running.
holder() {
  local case=$1 resp=$2 tenant pid="" i
  tenant="$("${PJ[@]}" get "$resp" allocate annotations fracgpu.io/tenant)"
  if ((FAKE)); then
    container_argv "$resp" sh -c 'echo "pid $$" >&2; exec "$@"' sh "$ALLOC_CLIENT" hold --bytes $((256 << 20))
  else
    container_argv "$resp" sh -c 'echo "pid $$" >&2; exec "$@"' sh "$PYTHON" "$SCRIPT_DIR/pod_checks.py" hold --bytes $((1 << 30))
  fi
  # Created before the start: the wait below must not read a file the child has yet to open.
  : > "$OUTC/$case.holder.out"
  : > "$WORK/logs/$case.holder.err"
  setsid -w timeout -k 3 "$(limit_for 90)" "${ARGV[@]}" > "$OUTC/$case.holder.out" 2> "$WORK/logs/$case.holder.err" < /dev/null &
  HOLDER_PG=$!
  GROUPS_LIVE+=("$HOLDER_PG")
  for ((i = 0; i < 600; i++)); do   # 60 s: PyTorch's start-up
    grep -q holding "$OUTC/$case.holder.out" 2>/dev/null && break
    alive "$HOLDER_PG" || break
    sleep 0.1
  done
  pid="$(sed -n 's/^pid \([0-9]*\)$/\1/p' "$WORK/logs/$case.holder.err" | head -n 1)"
  if ! grep -q holding "$OUTC/$case.holder.out" 2>/dev/null; then
    record "$case" status FAIL "the holder never held its memory: $(tail -n 2 "$WORK/logs/$case.holder.err" | tr '\n' ' ' | cut -c1-300)"
    return 1
  fi
  for ((i = 0; i < 50; i++)); do   # the registration is done once it holds; allow for a slow status
    frac_cli status --json > "$OUTC/$case.status.json" 2>> "$WORK/logs/status.err"
    "${PJ[@]}" judge status "$OUTC/$case.status.json" "$tenant" "${pid:-0}" "$3" "$4" > /dev/null 2>&1 && break
    sleep 0.2
  done
  judge "$case" status status "$OUTC/$case.status.json" "$tenant" "${pid:-0}" "$3" "$4"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -srm)  mode: $( ((FAKE)) && echo simulated || echo real)"
  echo "repo_commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "shim_sha256: $(sha256sum "$SHIM" 2>/dev/null | cut -d' ' -f1)"
  ((FAKE)) || timeout 30 nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used --format=csv 2>&1
  ((FAKE)) || "$PYTHON" -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count())' 2>&1
} > "$OUTC/environment.txt"
say "== fracgpu pod checks: bin $BIN, out $OUTC, budget ${BUDGET}s$( ((FAKE)) && echo ', SIMULATED driver')"
[[ "$(id -u)" == 0 ]] || say "  not root: the container runner will try an unprivileged user namespace"

# The DaemonSet's init container: the shim and an ld.so.preload naming its container path.
cp "$SHIM" "$HOSTDIR/lib/libfracgpu.so"
echo /usr/local/fracgpu/lib/libfracgpu.so > "$HOSTDIR/ld.so.preload"
ensure_broker || { record node broker FAIL "the broker did not come up: $(tail -n 2 "$WORK/logs/broker1.err" | tr '\n' ' ')"; "${PJ[@]}" report "$OUTC" | tee "$OUTC/summary.txt"; exit 1; }
mv "$OUTC/broker1.status.json" "$OUTC/node.status.json" 2>/dev/null
read -r CAPACITY MEMTOTAL < <("${PJ[@]}" capacity "$OUTC/node.status.json" 2>> "$WORK/logs/status.err")
if ! [[ "${CAPACITY:-}" =~ ^[0-9]+$ && "${MEMTOTAL:-}" =~ ^[0-9]+$ ]]; then
  record node broker FAIL "no GPU capacity in the broker's status --json: $(head -c 300 "$OUTC/node.status.json" 2>/dev/null | tr '\n' ' ')"
  "${PJ[@]}" report "$OUTC" | tee "$OUTC/summary.txt"
  exit 1
fi
record node broker PASS "GPU $("${PJ[@]}" get "$OUTC/node.status.json" gpus 0 name): memory_total $MEMTOTAL, capacity $CAPACITY, context_footprint $("${PJ[@]}" get "$OUTC/node.status.json" gpus 0 context_footprint)"
setsid env LD_LIBRARY_PATH="$DEPS_LD" "$BIN/fracgpu-device-plugin" --plugin-dir "$PLUGIN_DIR" --broker-run-dir "$RUN" \
  --shim-host-path "$HOSTDIR/lib/libfracgpu.so" --preload-host-path "$HOSTDIR/ld.so.preload" \
  --slices 8 --high-slices 2 --health-interval-ms 1000 --log-level debug --cdi-dir "$WORK/cdi" \
  > "$WORK/logs/plugin.out" 2> "$WORK/logs/plugin.err" < /dev/null &
PLUGIN_PG=$!
sleep 0.5
alive "$PLUGIN_PG" || say "  the device plugin exited at once: $(tail -n 2 "$WORK/logs/plugin.err" | tr '\n' ' ')"

CAP_A=$((CAPACITY * 2 / 8)) CAP_B=$((CAPACITY * 1 / 8))
# check_cap CASE RESPONSE CAP: the cap as the container sees it — PyTorch + NVML (fill, and
# an oversize tensor refused) and nvidia-smi on the GPU; the simulated driver's
# cuMemGetInfo through fracgpu-alloc-client otherwise.
check_cap() {
  local c=$1 r=$2 cap=$3
  if ((FAKE)); then
    container_argv "$r" "$ALLOC_CLIENT" info
    step "$c.info" 30 "${ARGV[@]}"
    judge "$c" cap info "$OUTC/$c.info.out" "$cap"
    return
  fi
  container_argv "$r" "$PYTHON" "$REPO/tests/gpu/multi/two_gpu_caps.py" --expect "0=$cap"
  step "$c.caps" 60 "${ARGV[@]}"
  judge "$c" caps caps "$OUTC/$c.caps.out" "$cap"
  container_argv "$r" nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits
  step "$c.smi" 30 "${ARGV[@]}"
  judge "$c" nvidia-smi smi "$OUTC/$c.smi.out" "$cap"
}

say "== [A] 2 of 8 normal slices: cap $CAP_A ($(($(date +%s) - START))s)"
if allocate A fracgpu.io/gpu-slice 2; then
  RA="$OUTC/A.allocate.json"
  container_argv "$RA" "$PYTHON" "$SCRIPT_DIR/pod_checks.py" probe
  step A.probe 30 "${ARGV[@]}"
  judge A probe probe "$OUTC/A.probe.out"
  check_cap A "$RA" "$CAP_A"
  if ((FAKE)); then   # PyTorch's oversize tensor does this on the GPU
    container_argv "$RA" "$ALLOC_CLIENT" hold --bytes $((CAP_A - FOOTPRINT + (1 << 20)))
    step A.over 30 "${ARGV[@]}"
    judge A refused refused "$OUTC/A.over.out" "$RC"
  fi
  holder A "$RA" normal "$CAP_A"
  killgroup "$HOLDER_PG"
fi

say "== [B] 1 high slice: cap $CAP_B ($(($(date +%s) - START))s)"
if allocate B fracgpu.io/gpu-slice-high 1; then
  RB="$OUTC/B.allocate.json"
  check_cap B "$RB" "$CAP_B"
  holder B "$RB" high "$CAP_B"

  say "== [C] a host process beside B's container ($(($(date +%s) - START))s)"
  host_argv "$RB" grep -c libfracgpu /proc/self/maps
  step C.maps 10 "${ARGV[@]}"
  judge C no-shim maps "$OUTC/C.maps.out"
  if ((FAKE)); then
    host_argv "$RB" "$ALLOC_CLIENT" info
    step C.info 30 "${ARGV[@]}"
    judge C whole-gpu host "$OUTC/C.info.out" "$MEMTOTAL" "$CAP_B" fake
  else
    host_argv "$RB" "$PYTHON" "$REPO/tests/gpu/multi/two_gpu_caps.py"
    step C.caps 90 "${ARGV[@]}"
    judge C whole-gpu host "$OUTC/C.caps.out" "$MEMTOTAL" "$CAP_B" real
  fi
  # B's holder must still be the tenant's after the host process came and went.
  alive "$HOLDER_PG" && record B holder-survived PASS "B's container process still running beside the host process" ||
    record B holder-survived FAIL "B's container process had exited: $(tail -n 2 "$WORK/logs/B.holder.err" | tr '\n' ' ')"
  killgroup "$HOLDER_PG"
fi

HOST_PRELOAD_AFTER="$(cat /etc/ld.so.preload 2>/dev/null || echo '<absent>')"
[[ "$HOST_PRELOAD_AFTER" == "$HOST_PRELOAD_BEFORE" ]] && record node host-etc PASS "the host's /etc/ld.so.preload unchanged ($HOST_PRELOAD_BEFORE)" ||
  record node host-etc FAIL "the host's /etc/ld.so.preload changed: was $HOST_PRELOAD_BEFORE, now $HOST_PRELOAD_AFTER"
alive "$PLUGIN_PG" && record node plugin-alive PASS "the device plugin ran throughout" ||
  record node plugin-alive FAIL "the device plugin had exited: $(tail -n 2 "$WORK/logs/plugin.err" | tr '\n' ' ')"

say "== report ($(($(date +%s) - START))s)"
"${PJ[@]}" report "$OUTC" | tee "$OUTC/summary.txt"
STATUS=${PIPESTATUS[0]}
say "== done in $(($(date +%s) - START))s: $OUTC/summary.txt; exit $STATUS"
exit "$STATUS"
