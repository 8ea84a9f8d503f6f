#!/usr/bin/env bash
# fracgpu compute-quota benchmark on a real GPU (issue "Compute quotas", items 5 and 6): one
# batch of about 5.5 minutes, run from anywhere on the GPU machine. It measures, with the same
# PyTorch tenants, what native time slicing, NVIDIA MPS and fracgpu's scheduler do with
# shares, idle capacity, ceilings and a latency-sensitive tenant, plus the launch overhead of
# the scheduler, and prints one markdown table with PASS/FAIL per criterion (compute_report.py).
#
#   tests/gpu/compute/run_compute_checks.sh [--bin DIR] [--out DIR] [--seconds S] [--budget S]
#       [--memory SIZE] [--launch-n N] [--launch-pairs K] [--no-launch-native]
#       [--only "p1 p2 ..."] [--keep-work]
#
# --bin DIR (default $B, else devrun/bin of the repo) holds fracgpu, fracgpu-broker,
# libfracgpu.so and deps/ (the two binaries' shared libraries: only they get deps/ on
# LD_LIBRARY_PATH, tenants keep the caller's). Results go to DIR/compute (--out DIR, default
# $OUT, else /tmp/fracgpu-compute-out): one JSON file per tenant run (PHASE.TAG.json),
# runs.tsv, environment.txt, summary.md (the table), summary.json and logs.tar.gz.
# Phases (ids for --only): p1 alone, native | p2 two tenants, native | p8a latency alone |
# p8b latency + batch, native | p3 MPS 70/30 | p3s MPS 30% alone | p8c latency + batch, MPS |
# p4 fracgpu 70/30 | p5 fracgpu 50/30/20 | p6 fracgpu lone --compute 30 | p7 fracgpu
# --compute-limit 30 | p8d latency (--priority high) + batch, fracgpu | p9 launch rate, fracgpu
# run vs plain LD_PRELOAD (vs native) alternated | p10 alone again (drift of the reference).
# Every tenant runs in its own process group under `timeout` (60 s, less near the end of the
# budget, default 520 s) and the group is killed when its phase ends; one phase failing does
# not stop the others; the MPS daemon and the node broker are stopped by an EXIT trap.
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../../.." && pwd)"
BIN="${B:-$REPO/devrun/bin}"
BASE_OUT="${OUT:-/tmp/fracgpu-compute-out}"
SECS=10
BUDGET=520
MEM=40GiB
SIZE=8192
LAT_REQ=2000
LAUNCH_N=200000
LAUNCH_PAIRS=5
LAUNCH_NATIVE=1
ONLY=""
KEEP_WORK=0
TENANT_LIMIT=60
READY_LIMIT=60
PYTHON="${PYTHON:-python3}"
ARCH="${FRACGPU_GPU_ARCH:-sm_90}"

usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --bin) BIN="${2:?--bin needs a directory}"; shift 2 ;;
    --out) BASE_OUT="${2:?--out needs a directory}"; shift 2 ;;
    --seconds) SECS="${2:?}"; shift 2 ;;
    --budget) BUDGET="${2:?}"; shift 2 ;;
    --memory) MEM="${2:?}"; shift 2 ;;
    --launch-n) LAUNCH_N="${2:?}"; shift 2 ;;
    --launch-pairs) LAUNCH_PAIRS="${2:?}"; shift 2 ;;
    --no-launch-native) LAUNCH_NATIVE=0; shift ;;
    --only) ONLY="${2:?}"; shift 2 ;;
    --keep-work) KEEP_WORK=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_compute_checks.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in SECS BUDGET LAUNCH_N LAUNCH_PAIRS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "run_compute_checks.sh: $v must be a whole number" >&2; exit 2; }
done
[[ -d "$BIN" ]] || { echo "run_compute_checks.sh: --bin $BIN is not a directory" >&2; exit 2; }
BIN="$(cd "$BIN" && pwd)"
FRACGPU="$BIN/fracgpu"
SHIM="$BIN/libfracgpu.so"
DEPS_LD="$BIN/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

START=$(date +%s)
DEADLINE=$((START + BUDGET))
OUTC="$BASE_OUT/compute"
mkdir -p "$OUTC" || exit 2
OUTC="$(cd "$OUTC" && pwd)"
rm -f "$OUTC"/*.json "$OUTC"/summary.md "$OUTC"/runs.tsv "$OUTC"/environment.txt "$OUTC"/logs.tar.gz
WORK="$(mktemp -d /tmp/fgc.XXXXXX)" || exit 2   # short: tenant sockets live under $RUN
RUN="$WORK/r" STATE="$WORK/s" MPS_PIPE="$WORK/mp" MPS_LOG="$WORK/ml"
mkdir -p "$WORK/logs" "$RUN" "$STATE"
printf 'phase\ttag\tmode\trc\telapsed_s\tlimit_s\terr\n' > "$OUTC/runs.tsv"

# Tenants start from a clean environment; fracgpu run gets deps/, its command does not.
unset LD_PRELOAD FRACGPU_SOCKET FRACGPU_HOOK_STATS FRACGPU_RUN_DIR FRACGPU_DISABLE \
  CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if [[ -n "${LD_LIBRARY_PATH+x}" ]]; then RESTORE_LD=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"); else RESTORE_LD=(env -u LD_LIBRARY_PATH); fi

# say, left, since, alive, frac_cli, killgroup, ensure_broker, stop_broker
source "$SCRIPT_DIR/../gpu_phase_lib.sh"
selected() { [[ -z "$ONLY" ]] || [[ " $ONLY " == *" $1 "* ]]; }
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$OUTC/runs.tsv"; }

MPS_STARTED=0
BUILD_PID=""
CLEANED=0
PIDS=() TAGS=() MODES=() MM_EXTRA=() LAT_EXTRA=()
stop_mps() {
  ((MPS_STARTED)) || return 0
  local servers rc pid
  servers="$(echo get_server_list | env CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG" \
    timeout 5 nvidia-cuda-mps-control 2>/dev/null)"
  echo quit | env CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG" \
    timeout 30 nvidia-cuda-mps-control >> "$WORK/logs/mps.control.txt" 2>&1
  rc=$?
  if ((rc != 0)); then
    say "  MPS quit failed (rc $rc): ending its server(s) ${servers//$'\n'/ } and daemon by pid"
    for pid in $servers; do [[ "$pid" =~ ^[0-9]+$ ]] && kill -KILL "$pid" 2>/dev/null; done
    pid="$(cat "$MPS_PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null)"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -TERM "$pid" 2>/dev/null
  fi
  MPS_STARTED=0
  cp -r "$MPS_LOG" "$WORK/logs/mps-log" 2>/dev/null
  local slog=false
  [[ -s "$MPS_LOG/server.log" ]] && slog=true
  printf '{"started": true, "quit_rc": %d, "server_log": %s}\n' "$rc" "$slog" > "$OUTC/mps.json"
  say "  MPS daemon stopped (quit rc $rc; server log: $slog)"
}
cleanup() {
  ((CLEANED)) && return 0
  CLEANED=1
  local pg   # finished phases already killed their groups: what is left is the current phase's
  for pg in "${PIDS[@]}" $BUILD_PID; do [[ "$pg" =~ ^[0-9]+$ ]] && killgroup "$pg"; done
  stop_mps
  stop_broker
  if ! ((KEEP_WORK)); then rm -rf "$WORK"; else say "work directory kept: $WORK"; fi
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

# spawn TAG MODE [MODE-ARGS...] -- CMD...: starts CMD in its own process group under timeout.
# MODE: native | mps [PERCENT] | frac [fracgpu run flags] | preload (LD_PRELOAD, no broker)
spawn() {
  local tag=$1 mode=$2 limit
  shift 2
  local -a margs=() pre=()
  while (($#)) && [[ "$1" != -- ]]; do margs+=("$1"); shift; done
  shift
  case "$mode" in
    native) pre=(env) ;;
    mps) pre=(env CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG")
         [[ -n "${margs[0]:-}" ]] && pre+=(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="${margs[0]}") ;;
    frac) pre=(env LD_LIBRARY_PATH="$DEPS_LD" FRACGPU_SHIM="$SHIM" "$FRACGPU" --run-dir "$RUN" run
               --memory "$MEM" --name "$PHASE-$tag" "${margs[@]}" -- "${RESTORE_LD[@]}") ;;
    preload) pre=(env LD_PRELOAD="$SHIM") ;;
  esac
  limit=$(($(left) - 10))
  ((limit > TENANT_LIMIT)) && limit=$TENANT_LIMIT
  ((limit < 5)) && limit=5
  setsid timeout -k 5 "$limit" "${pre[@]}" "$@" > "$PH/$tag.out" 2> "$PH/$tag.err" < /dev/null &
  local pid=$!
  PIDS+=("$pid") TAGS+=("$tag") MODES+=("$mode${margs[*]:+ ${margs[*]}}")
}
mm() {  # mm TAG MODE [MODE-ARGS...]: a matmul tenant of this phase
  local tag=$1 mode=$2
  shift 2
  spawn "$tag" "$mode" "$@" -- "$PYTHON" "$SCRIPT_DIR/matmul_tenant.py" --size "$SIZE" --seconds "$SECS" \
    --barrier "$PH/go" --ready "$PH/$tag.ready" --out "$OUTC/$PHASE.$tag.json" --tag "$PHASE.$tag" "${MM_EXTRA[@]}"
}
lat() {  # lat TAG MODE [MODE-ARGS...]: the latency tenant of this phase
  local tag=$1 mode=$2
  shift 2
  spawn "$tag" "$mode" "$@" -- "$PYTHON" "$SCRIPT_DIR/latency_tenant.py" --requests "$LAT_REQ" \
    --barrier "$PH/go" --ready "$PH/$tag.ready" --done-file "$PH/lat.done" --out "$OUTC/$PHASE.$tag.json" \
    --tag "$PHASE.$tag" "${LAT_EXTRA[@]}"
}

begin_phase() {  # begin_phase ID ESTIMATE_S DESCRIPTION...: false if not selected or no time left
  PHASE=$1
  local est=$2
  shift 2
  PIDS=() TAGS=() MODES=() MM_EXTRA=() LAT_EXTRA=() SNAPSHOT=0
  selected "$PHASE" || return 1
  if (($(left) < est)); then
    say "== [$PHASE] SKIPPED: $(left)s of the budget left, needs ~${est}s ($*)"
    record "$PHASE" - - skipped 0 0 "time budget"
    return 1
  fi
  PH="$WORK/$PHASE"
  mkdir -p "$PH"
  PHASE_T0=$(date +%s.%N)
  say "== [$PHASE] $* ($(left)s left)"
}
release_and_wait() {  # all tenants ready (or dead, or READY_LIMIT), barrier, wait for every one
  local n=${#PIDS[@]} t_end=$(($(date +%s) + READY_LIMIT)) ready dead i rc
  while :; do
    ready=0 dead=0
    for i in "${!PIDS[@]}"; do
      if [[ -e "$PH/${TAGS[$i]}.ready" ]]; then ready=$((ready + 1)); elif ! alive "${PIDS[$i]}"; then dead=$((dead + 1)); fi
    done
    ((ready + dead >= n)) && break
    (($(date +%s) >= t_end)) && break
    sleep 0.05
  done
  touch "$PH/go"
  say "  $ready/$n tenants ready, released $(since "$PHASE_T0")s after the start"
  if ((SNAPSHOT && ready > 0)); then
    sleep "$((SECS / 2))"
    frac_cli status --json > "$OUTC/$PHASE.status.json" 2> "$PH/status.err" || rm -f "$OUTC/$PHASE.status.json"
  fi
  for i in "${!PIDS[@]}"; do
    wait "${PIDS[$i]}"
    rc=$?
    record "$PHASE" "${TAGS[$i]}" "${MODES[$i]}" "$rc" "$(since "$PHASE_T0")" "$TENANT_LIMIT" "$PH/${TAGS[$i]}.err"
    ((rc == 0)) || { say "  ${TAGS[$i]} (${MODES[$i]}): rc=$rc; stderr:"; tail -n 3 "$PH/${TAGS[$i]}.err" | sed 's/^/    /'; }
  done
}
finish_phase() {  # kills what is left of the phase's groups; deletes its fracgpu tenants
  local i
  for i in "${!PIDS[@]}"; do killgroup "${PIDS[$i]}"; done
  if [[ "${MODES[*]:-}" == *frac* ]] && [[ -n "$BROKER_PID" ]]; then
    for i in "${!TAGS[@]}"; do frac_cli tenant delete "$PHASE-${TAGS[$i]}" > /dev/null 2>&1; done
  fi
  PIDS=()
  say "  phase $PHASE done in $(since "$PHASE_T0")s"
}
phase_tenants() { release_and_wait; finish_phase; }

start_mps() {
  mkdir -p "$MPS_PIPE" "$MPS_LOG"
  if env CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" CUDA_MPS_LOG_DIRECTORY="$MPS_LOG" timeout 20 nvidia-cuda-mps-control -d \
    > "$WORK/logs/mps.start.txt" 2>&1 < /dev/null; then
    MPS_STARTED=1
    say "== MPS control daemon started (pipe $MPS_PIPE)"
  else
    say "== MPS control daemon did NOT start: $(tail -n 2 "$WORK/logs/mps.start.txt")"
  fi
}

# ------------------------------------------------------------------ environment, build
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm)"
  echo "repo_commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "bin: $BIN"
  echo "shim_sha256: $(sha256sum "$SHIM" 2>/dev/null | cut -d' ' -f1)"
  echo "fracgpu_sha256: $(sha256sum "$FRACGPU" 2>/dev/null | cut -d' ' -f1)"
  echo "seconds: $SECS  size: $SIZE  memory: $MEM  latency_requests: $LAT_REQ  launch: $LAUNCH_N x $LAUNCH_PAIRS"
  echo "python: $("$PYTHON" --version 2>&1)"
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_mode,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
    --format=csv 2>&1
  echo "compute apps before:"
  timeout 30 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
} > "$OUTC/environment.txt" 2>&1
say "== fracgpu compute checks: bin $BIN, out $OUTC, work $WORK, budget ${BUDGET}s, ${SECS}s windows"
for f in "$FRACGPU" "$SHIM"; do [[ -e "$f" ]] || say "WARNING: $f is missing: the fracgpu phases will fail"; done

CUDA_CLIENT="$BIN/cuda_client"
if selected p9 && [[ ! -x "$CUDA_CLIENT" ]]; then   # built in the background during the first phases
  CUDA_CLIENT="$WORK/cuda_client"
  NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
  [[ -x "$NVCC" ]] || NVCC="$(command -v nvcc || echo nvcc)"
  setsid timeout 240 "$NVCC" -O2 -arch="$ARCH" -o "$CUDA_CLIENT" "$REPO/tests/gpu/cuda_client.cu" -lcuda \
    > "$WORK/logs/build.out" 2> "$WORK/logs/build.err" < /dev/null &
  BUILD_PID=$!
fi

# ------------------------------------------------------------------ native
if begin_phase p1 25 "alone: one ${SIZE}^2 bf16 matmul tenant, native, ${SECS}s"; then
  mm alone native; phase_tenants
fi
if begin_phase p2 25 "native time slicing: two tenants"; then
  mm a native; mm b native; phase_tenants
fi
if begin_phase p8a 20 "latency tenant alone (2048^2 + sync, 2 ms think, $LAT_REQ requests)"; then
  lat lat native; phase_tenants
fi
if begin_phase p8b 25 "latency tenant next to a ${SIZE}^2 batch tenant, native"; then
  MM_EXTRA=(--stop-file "$PH/lat.done" --seconds "$((SECS + 25))")
  lat lat native; mm batch native; phase_tenants
fi

# ------------------------------------------------------------------ MPS
if selected p3 || selected p3s || selected p8c; then
  start_mps
  if ! ((MPS_STARTED)); then   # clients would silently run natively: the MPS phases are not run
    printf '{"started": false}\n' > "$OUTC/mps.json"
    for p in p3 p3s p8c; do selected "$p" && record "$p" - mps 126 0 0 "the MPS daemon did not start"; done
    ONLY_SAVED=$ONLY ONLY="none"
  fi
  if begin_phase p3 25 "MPS: active thread percentage 70 / 30"; then
    mm a70 mps 70; mm b30 mps 30; phase_tenants
  fi
  if begin_phase p3s 25 "MPS: 30% alone"; then
    mm s30 mps 30; phase_tenants
  fi
  if begin_phase p8c 25 "latency tenant next to a batch tenant, MPS (both 100%)"; then
    MM_EXTRA=(--stop-file "$PH/lat.done" --seconds "$((SECS + 25))")
    lat lat mps; mm batch mps; phase_tenants
  fi
  stop_mps
  [[ -n "${ONLY_SAVED+x}" ]] && { ONLY=$ONLY_SAVED; unset ONLY_SAVED; }
fi

# ------------------------------------------------------------------ fracgpu
FRAC_PHASES="p4 p5 p6 p7 p8d p9"
any_frac=0
for p in $FRAC_PHASES; do selected "$p" && any_frac=1; done
if ((any_frac)); then ensure_broker; fi
if begin_phase p4 25 "fracgpu: --compute 70 / 30"; then
  if ensure_broker; then SNAPSHOT=1; mm a70 frac --compute 70; mm b30 frac --compute 30; phase_tenants; fi
fi
if begin_phase p5 25 "fracgpu: --compute 50 / 30 / 20"; then
  if ensure_broker; then
    SNAPSHOT=1; mm a50 frac --compute 50; mm b30 frac --compute 30; mm c20 frac --compute 20; phase_tenants
  fi
fi
if begin_phase p6 25 "fracgpu: a lone tenant with --compute 30 (work-conserving)"; then
  if ensure_broker; then mm s30 frac --compute 30; phase_tenants; fi
fi
if begin_phase p7 25 "fracgpu: a lone tenant with --compute-limit 30 (ceiling)"; then
  if ensure_broker; then SNAPSHOT=1; mm lim30 frac --compute-limit 30; phase_tenants; fi
fi
if begin_phase p8d 25 "latency tenant (--priority high) next to a batch tenant (normal), fracgpu"; then
  if ensure_broker; then
    MM_EXTRA=(--stop-file "$PH/lat.done" --seconds "$((SECS + 25))")
    lat lat frac --priority high; mm batch frac; phase_tenants
  fi
fi

# ------------------------------------------------------------------ launch overhead
if begin_phase p9 40 "launch rate: $LAUNCH_N empty launches, fracgpu run vs LD_PRELOAD without a broker, x$LAUNCH_PAIRS"; then
  if [[ -n "$BUILD_PID" ]]; then
    wait "$BUILD_PID"; rc=$?
    BUILD_PID=""
    ((rc == 0)) || say "  cuda_client build FAILED (rc $rc): $(tail -n 5 "$WORK/logs/build.err" | tr '\n' ' ')"
  fi
  variants="frac preload"
  ((LAUNCH_NATIVE)) && variants="$variants native"
  if [[ -x "$CUDA_CLIENT" ]] && ensure_broker; then
    for ((i = 1; i <= LAUNCH_PAIRS; i++)); do
      if (($(left) < 25)); then say "  launch series cut after $((i - 1)) rounds (time budget)"; break; fi
      for v in $variants; do
        PIDS=() TAGS=() MODES=()
        spawn "$v.$i" "$v" -- "$CUDA_CLIENT" --mode launch-rate "$LAUNCH_N"
        wait "${PIDS[0]}"; rc=$?
        record "$PHASE" "$v.$i" "$v" "$rc" "$(since "$PHASE_T0")" "$TENANT_LIMIT" "$PH/$v.$i.err"
        tail -n 1 "$PH/$v.$i.out" > "$OUTC/p9.$v.$i.json"
        [[ -s "$OUTC/p9.$v.$i.json" ]] || rm -f "$OUTC/p9.$v.$i.json"
        say "  $v.$i rc=$rc $(sed -n 's/.*"ns_per_launch":\([0-9.]*\).*/\1 ns per launch/p' "$OUTC/p9.$v.$i.json" 2>/dev/null)"
        killgroup "${PIDS[0]}"
        PIDS=()
        [[ "$v" == frac ]] && frac_cli tenant delete "$PHASE-$v.$i" > /dev/null 2>&1
      done
    done
  else
    say "  no cuda_client or no broker: launch phase not run"
    record "$PHASE" - - 126 0 0 "no cuda_client ($CUDA_CLIENT) or no node broker"
  fi
  say "  phase $PHASE done in $(since "$PHASE_T0")s"
fi
stop_broker

if begin_phase p10 25 "alone again, native (drift of the reference)"; then
  mm alone native; phase_tenants
fi

# ------------------------------------------------------------------ report
{
  echo "compute apps after:"
  timeout 30 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
} >> "$OUTC/environment.txt" 2>&1
say "== report ($(($(date +%s) - START))s since the start)"
"$PYTHON" "$SCRIPT_DIR/compute_report.py" --dir "$OUTC" --seconds "$SECS" --launch-n "$LAUNCH_N" --only "$ONLY"
STATUS=$?
cp "$OUTC/runs.tsv" "$WORK/logs/" 2>/dev/null
tar -czf "$OUTC/logs.tar.gz" -C "$WORK" --exclude=./r --exclude=./s --exclude=./mp --exclude=./cuda_client . 2> /dev/null \
  || say "archiving the logs failed"
say "== done in $(($(date +%s) - START))s: $OUTC/summary.md, summary.json, logs.tar.gz; exit $STATUS"
exit "$STATUS"
