#!/usr/bin/env bash
# fracgpu capture checks on a real GPU (issue "CUDA graphs and stream capture must survive
# sharing"): CUDA-graph capture in PyTorch (torch.cuda.graph, thread_local capture mode,
# torch.compile reduce-overhead, a serving loop over batch sizes sharing one graph pool) and
# NVIDIA's cuda-samples, natively and under fracgpu next to a competing tenant; plus the
# compute share a graph-replay tenant gets. One batch of about 9 minutes (--budget, 540 s).
#
#   tests/gpu/capture/run_capture_checks.sh [--bin DIR] [--out DIR] [--budget S]
#       [--samples DIR] [--only "a b c d"] [--repeat N] [--seconds S] [--samples-list FILE]
#       [--build-jobs N] [--keep-work]
#
# --bin DIR (default $B, else devrun/bin of the repo): fracgpu, fracgpu-broker, libfracgpu.so
#   and deps/ (tools/pack_devrun.sh makes it; only fracgpu gets deps/ on LD_LIBRARY_PATH,
#   tenants keep the caller's). --out DIR (default $OUT, else /tmp/fracgpu-capture-out):
#   results go to DIR/capture: summary.md (the table, also printed), summary.json, logs.tar.gz.
# --samples DIR: the NVIDIA/cuda-samples source (tools/copy_cuda_samples.sh); default
#   devrun/cuda-samples or cuda-samples of the repo if present. --samples-list FILE: the samples
#   and their kind (default cuda_samples.list here). --build-jobs N: compile jobs (16).
# --repeat N: captures from scratch per client (20). --seconds S: window of the share check (10).
# Phases (ids for --only):
#  a  each capture_client.py mode alone, natively: graph, graph_thread_local, compile, serving
#  b  each mode under `fracgpu run --memory 40GiB --compute W` next to a saturating bf16 matmul
#     tenant at --compute 100-W, W = 20, 50, 80 (graph_thread_local at 50 only); no failure allowed
#  c  share: a graph-replay tenant (--compute 30) and a matmul tenant (--compute 70), each alone
#     and then together: the replay tenant's share within 3 points of 30%
#  d  cuda-samples (built for sm_90 in the background from the start): each natively and under
#     `fracgpu run --memory 16GiB`; the graph samples also next to a competitor, --compute 50 each
# Every process runs in its own process group under `timeout`, killed when its step ends; a node
# broker (`fracgpu broker`) serves every fracgpu step and is stopped by an EXIT trap. Steps that
# no longer fit the budget are reported as skipped (and the batch fails). Exit status 0 only if
# every check passed.
# shellcheck disable=SC2317  # cleanup and report run from the EXIT trap
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../../.." && pwd)"
COMPUTE_DIR="$REPO/tests/gpu/compute"
BIN="${B:-$REPO/devrun/bin}"
BASE_OUT="${OUT:-/tmp/fracgpu-capture-out}"
BUDGET=540
ONLY=""
REPEAT=20
SHARE_SECS=10
SAMPLES=""
SAMPLES_LIST="$SCRIPT_DIR/cuda_samples.list"
BUILD_JOBS=16
KEEP_WORK=0
MEM=40GiB
SAMPLE_MEM=16GiB
RESERVE=20          # seconds kept at the end of the budget for the report and the archive
PYTHON="${PYTHON:-python3}"
ARCH_NUM="${FRACGPU_SAMPLES_ARCH:-90}"

usage() { sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --bin) BIN="${2:?--bin needs a directory}"; shift 2 ;;
    --out) BASE_OUT="${2:?--out needs a directory}"; shift 2 ;;
    --budget) BUDGET="${2:?}"; shift 2 ;;
    --samples) SAMPLES="${2:?--samples needs a directory}"; shift 2 ;;
    --samples-list) SAMPLES_LIST="${2:?}"; shift 2 ;;
    --only) ONLY="${2:?}"; shift 2 ;;
    --repeat) REPEAT="${2:?}"; shift 2 ;;
    --seconds) SHARE_SECS="${2:?}"; shift 2 ;;
    --build-jobs) BUILD_JOBS="${2:?}"; shift 2 ;;
    --keep-work) KEEP_WORK=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_capture_checks.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
for v in BUDGET REPEAT SHARE_SECS BUILD_JOBS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "run_capture_checks.sh: $v must be a whole number" >&2; exit 2; }
done
for p in $ONLY; do
  [[ "$p" =~ ^[abcd]$ ]] || { echo "run_capture_checks.sh: --only takes phases a b c d, not '$p'" >&2; exit 2; }
done
[[ -d "$BIN" ]] || { echo "run_capture_checks.sh: --bin $BIN is not a directory" >&2; exit 2; }
BIN="$(cd "$BIN" && pwd)"
if [[ -z "$SAMPLES" ]]; then
  for d in "$REPO/devrun/cuda-samples" "$REPO/cuda-samples"; do [[ -d "$d/Samples" ]] && { SAMPLES=$d; break; }; done
fi
[[ -n "$SAMPLES" && -d "$SAMPLES" ]] && SAMPLES="$(cd "$SAMPLES" && pwd)"
FRACGPU="$BIN/fracgpu"
SHIM="$BIN/libfracgpu.so"
DEPS_LD="$BIN/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

START=$(date +%s)
HARD_END=$((START + BUDGET))
DEADLINE=$((HARD_END - RESERVE))   # gpu_phase_lib's left() counts down to this
FINAL="$BASE_OUT/capture"
mkdir -p "$FINAL" || exit 2
FINAL="$(cd "$FINAL" && pwd)"
rm -f "$FINAL"/summary.md "$FINAL"/summary.json "$FINAL"/logs.tar.gz
WORK="$(mktemp -d /tmp/fgcap.XXXXXX)" || exit 2   # short: tenant sockets live under $RUN
RUN="$WORK/r" STATE="$WORK/s" OUTC="$WORK/res"
mkdir -p "$WORK/logs" "$RUN" "$STATE" "$OUTC"
printf 'phase\ttag\tmode\trc\telapsed_s\tlimit_s\terr\n' > "$OUTC/runs.tsv"
printf 'phase\tstatus\tdetail\n' > "$OUTC/phases.tsv"
printf 'name\tkind\tvariant\trc\tseconds\tlimit_s\tpassed_line\n' > "$OUTC/samples.tsv"

# Tenants start from a clean environment; fracgpu gets deps/, its command does not.
unset LD_PRELOAD FRACGPU_SOCKET FRACGPU_HOOK_STATS FRACGPU_RUN_DIR FRACGPU_DISABLE \
  CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# One inductor/Triton cache for the batch: phase a compiles cold, later compiles hit the cache.
export TORCHINDUCTOR_CACHE_DIR="$WORK/cache/inductor" TRITON_CACHE_DIR="$WORK/cache/triton"
if [[ -n "${LD_LIBRARY_PATH+x}" ]]; then RESTORE_LD=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"); else RESTORE_LD=(env -u LD_LIBRARY_PATH); fi

# say, left, since, alive, frac_cli, killgroup, limit_for, ensure_broker, stop_broker
# shellcheck source=SCRIPTDIR/../gpu_phase_lib.sh
source "$SCRIPT_DIR/../gpu_phase_lib.sh"
say() { printf '[capture %4ds] %s\n' "$(($(date +%s) - START))" "$*" >&2; }
selected() { [[ -z "$ONLY" ]] || [[ " $ONLY " == *" $1 "* ]]; }
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$OUTC/runs.tsv"; }
phase_status() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$OUTC/phases.tsv"; }
tname() {  # a valid tenant name: lowercase letters, digits, . _ -; at most 63 characters
  local n="${1,,}"
  n="${n//[^a-z0-9._-]/-}"
  printf '%s' "${n:0:63}"
}

CLEANED=0 REPORTED=0 BUILD_PID="" HARD_PID=""
PIDS=() TAGS=() MODES=() LIMITS=() TENANTS=() T0S=()
PHASE="-" PH="$WORK/logs"
reset_procs() { PIDS=() TAGS=() MODES=() LIMITS=() TENANTS=() T0S=(); }
report() {  # the table (stdout), summary.md/json and logs.tar.gz in $FINAL; sets STATUS
  ((REPORTED)) && return 0
  REPORTED=1
  {
    echo "compute apps after:"
    timeout 20 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
  } >> "$WORK/logs/environment.txt" 2>&1
  say "== report ($(($(date +%s) - START)) s since the start)"
  "$PYTHON" "$SCRIPT_DIR/capture_report.py" --dir "$OUTC" --final "$FINAL" --only "$ONLY" --repeat "$REPEAT" \
    --samples-list "$SAMPLES_LIST" --seconds "$SHARE_SECS" 2> "$WORK/logs/report.err"
  STATUS=$?
  if ((STATUS > 1)); then
    say "capture_report.py failed (rc $STATUS): $(tail -n 3 "$WORK/logs/report.err" | tr '\n' ' ')"
    STATUS=1
  fi
  cp "$OUTC"/*.tsv "$WORK/logs/" 2>/dev/null
  tar -czf "$FINAL/logs.tar.gz" -C "$WORK" --exclude=./r --exclude=./s --exclude=./cache \
    --exclude=./samples/src --exclude=./samples/build --exclude='./samples/probe/*/build' . 2> /dev/null \
    || say "archiving the logs failed"
  local size
  size=$(stat -c %s "$FINAL/logs.tar.gz" 2>/dev/null || echo 0)
  if ((size > 15 * 1024 * 1024)); then   # at most 16 MiB per file comes back: keep the small logs
    say "logs.tar.gz is $size bytes: archiving without the sample build tree"
    tar -czf "$FINAL/logs.tar.gz" -C "$WORK" --exclude=./r --exclude=./s --exclude=./cache --exclude=./samples . 2> /dev/null
  fi
  say "== done in $(($(date +%s) - START)) s: $FINAL/summary.md, summary.json, logs.tar.gz; exit $STATUS"
}
cleanup() {
  ((CLEANED)) && return 0
  CLEANED=1
  local pg
  for pg in "${PIDS[@]}" $BUILD_PID; do [[ "$pg" =~ ^[0-9]+$ ]] && killgroup "$pg"; done
  stop_broker
  [[ -n "$HARD_PID" ]] && kill -- "-$HARD_PID" 2>/dev/null
  STATUS=1
  report
  if ! ((KEEP_WORK)); then rm -rf "$WORK"; else say "work directory kept: $WORK"; fi
}
trap 'cleanup; exit "${STATUS:-1}"' EXIT
trap 'say "interrupted (signal): writing the report"; exit 130' INT TERM
# A hard stop 10 s after the budget: the EXIT trap still writes the report.
setsid bash -c "sleep $((BUDGET + 10)); kill -TERM $$" > /dev/null 2>&1 < /dev/null &
HARD_PID=$!

# ------------------------------------------------------------------ process control
# spawn TAG LIMIT MODE [fracgpu run flags...] -- CMD...: CMD in its own process group under
# timeout LIMIT, stdout/stderr in $PH/TAG.out/.err. MODE: native | frac (a fracgpu tenant named
# PHASE-TAG). Sets SPAWNED (its pid = its process group).
spawn() {
  local tag=$1 limit=$2 mode=$3 tn=""
  shift 3
  local -a margs=() pre=()
  while (($#)) && [[ "$1" != -- ]]; do margs+=("$1"); shift; done
  shift
  case "$mode" in
    native) pre=(env) ;;
    frac) tn="$(tname "$PHASE-$tag")"
          pre=(env LD_LIBRARY_PATH="$DEPS_LD" FRACGPU_SHIM="$SHIM" "$FRACGPU" --run-dir "$RUN" run
               --name "$tn" "${margs[@]}" -- "${RESTORE_LD[@]}") ;;
    *) say "spawn: unknown mode $mode"; return 1 ;;
  esac
  T0S+=("$(date +%s.%N)")
  setsid timeout -k 5 "$limit" "${pre[@]}" "$@" > "$PH/$tag.out" 2> "$PH/$tag.err" < /dev/null &
  SPAWNED=$!
  PIDS+=("$SPAWNED") TAGS+=("$tag") MODES+=("$mode${margs[*]:+ ${margs[*]}}") LIMITS+=("$limit") TENANTS+=("$tn")
}
# reap I: waits for the I-th spawned process of the step, records it, kills what is left of its
# group and deletes its fracgpu tenant; sets RC (and ELAPSED)
reap() {
  local i=$1
  RC=127
  [[ -n "${PIDS[$i]}" ]] || return 0
  wait "${PIDS[$i]}"
  RC=$?
  ELAPSED=$(since "${T0S[$i]}")
  record "$PHASE" "${TAGS[$i]}" "${MODES[$i]}" "$RC" "$ELAPSED" "${LIMITS[$i]}" "$PH/${TAGS[$i]}.err"
  if ((RC != 0)); then
    say "  ${TAGS[$i]} (${MODES[$i]}): rc=$RC$( ((RC == 124 || RC == 137)) && echo " (timed out after ${LIMITS[$i]} s)"); stderr:"
    tail -n 3 "$PH/${TAGS[$i]}.err" | cut -c1-300 | sed 's/^/      /' >&2
  fi
  killgroup "${PIDS[$i]}"
  PIDS[i]=""
  [[ -n "${TENANTS[$i]}" ]] && frac_cli tenant delete "${TENANTS[$i]}" > /dev/null 2>&1
  return 0
}
reap_all() { local i; for i in "${!PIDS[@]}"; do reap "$i"; done; reset_procs; }
step_begin() {  # step_begin PHASE ESTIMATE DESCRIPTION: false if it does not fit in the budget
  PHASE=$1
  local est=$2
  shift 2
  reset_procs
  if (($(left) < est)); then
    say "== [$PHASE] SKIPPED: $(left) s of the budget left, needs ~$est s ($*)"
    phase_status "$PHASE" skipped "time budget: $(left) s left, needs ~$est s"
    return 1
  fi
  PH="$WORK/logs/$PHASE"
  mkdir -p "$PH"
  STEP_T0=$(date +%s.%N)
  say "== [$PHASE] $* ($(left) s left)"
  phase_status "$PHASE" run "$*"
  return 0
}
wait_file() {  # wait_file FILE PID SECONDS: true once FILE exists; false if PID died or time ran out
  local f=$1 pid=$2 end=$(($(date +%s) + $3))
  while [[ ! -e "$f" ]]; do
    alive "$pid" || { [[ -e "$f" ]]; return; }
    (($(date +%s) >= end)) && return 1
    sleep 0.05
  done
}

CAP=("$PYTHON" "$SCRIPT_DIR/capture_client.py")
MATMUL=("$PYTHON" "$COMPUTE_DIR/matmul_tenant.py")
# client TAG WANT_LIMIT MODE-ARGS... -- CLIENT-ARGS...: one capture_client run, waited for
client() {
  local tag=$1 want=$2 lim
  shift 2
  local -a margs=()
  while (($#)) && [[ "$1" != -- ]]; do margs+=("$1"); shift; done
  shift
  lim=$(limit_for "$want")
  spawn "$tag" "$lim" "${margs[@]}" -- "${CAP[@]}" --out "$OUTC/$PHASE.$tag.json" --tag "$PHASE.$tag" \
    --watchdog-s "$((lim > 12 ? lim - 6 : lim))" "$@"
}
mode_args() {  # the client arguments of each mode in phases a and b
  case "$1" in
    graph|graph_thread_local) echo "--mode $1 --repeat $REPEAT --seconds 2" ;;
    compile) echo "--mode compile --repeat $REPEAT --seconds 2" ;;
    serving) echo "--mode serving --repeat $REPEAT --seconds 5" ;;
  esac
}
mode_limit() { case "$1" in compile) echo "${2:-120}" ;; *) echo 60 ;; esac; }
# competitor TAG COMPUTE: a saturating 8192^2 bf16 matmul fracgpu tenant until $PH/TAG.stop
competitor() {
  local tag=$1 w=$2 lim
  lim=$(limit_for 400)
  spawn "$tag" "$lim" frac --memory "$MEM" --compute "$w" -- "${MATMUL[@]}" --seconds "$lim" \
    --stop-file "$PH/$tag.stop" --ready "$PH/$tag.ready" --out "$OUTC/$PHASE.$tag.json" --tag "$PHASE.$tag"
  COMP_IDX=$((${#PIDS[@]} - 1))
  if wait_file "$PH/$tag.ready" "$SPAWNED" 90; then
    say "  competitor $tag (--compute $w) saturating the GPU after $(since "$STEP_T0") s"
    return 0
  fi
  say "  competitor $tag did NOT get ready: $(tail -n 2 "$PH/$tag.err" | tr '\n' ' ' | cut -c1-300)"
  return 1
}
stop_competitor() {  # stop_competitor TAG: stop file, then reap it
  [[ -n "$COMP_IDX" ]] || return 0
  touch "$PH/$1.stop"
  reap "$COMP_IDX"
  COMP_IDX=""
}
COMP_IDX=""
result_line() {  # result_line JSON: one line about a client's result, for the progress log
  python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
print("ok" if r.get("ok") else "FAILED", r.get("captures"), "of", r.get("expected_captures"), "captures,", r.get("replays"),
      "replays", (r.get("errors") or [r.get("error") or ""])[0][:200])' "$1" 2>/dev/null || echo "no result"
}

# ------------------------------------------------------------------ environment
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm)"
  echo "repo_commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "bin: $BIN"
  echo "shim_sha256: $(sha256sum "$SHIM" 2>/dev/null | cut -d' ' -f1)"
  echo "fracgpu_sha256: $(sha256sum "$FRACGPU" 2>/dev/null | cut -d' ' -f1)"
  echo "budget: $BUDGET  repeat: $REPEAT  share window: $SHARE_SECS s  only: ${ONLY:-all}"
  echo "samples: ${SAMPLES:-none}  list: $SAMPLES_LIST"
  echo "python: $("$PYTHON" --version 2>&1)"
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_mode,clocks.sm,clocks.max.sm \
    --format=csv 2>&1
  echo "compute apps before:"
  timeout 30 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
} > "$WORK/logs/environment.txt" 2>&1
say "== fracgpu capture checks: bin $BIN, out $FINAL, work $WORK, budget ${BUDGET}s, phases ${ONLY:-a b c d}"
for f in "$FRACGPU" "$SHIM"; do [[ -e "$f" ]] || say "WARNING: $f is missing: the fracgpu steps will fail"; done

# ------------------------------------------------------------------ the samples' build, in the background
SBUILD="$WORK/samples"
if selected d; then
  if [[ -z "$SAMPLES" ]]; then
    say "== [d] no cuda-samples source (--samples DIR, or devrun/cuda-samples): phase d is not run"
    phase_status d skipped "no cuda-samples source: pass --samples DIR (tools/copy_cuda_samples.sh DIR)"
  else
    blimit=$((BUDGET - 200))
    ((blimit > 360)) && blimit=360
    ((blimit < 60)) && blimit=60
    say "== [d] building the cuda-samples of $SAMPLES_LIST in the background (nice, -j$BUILD_JOBS, at most ${blimit}s)"
    setsid nice -n 19 bash "$SCRIPT_DIR/build_cuda_samples.sh" --src "$SAMPLES" --work "$SBUILD" --list "$SAMPLES_LIST" \
      --jobs "$BUILD_JOBS" --arch "$ARCH_NUM" --timeout "$blimit" > "$WORK/logs/samples-build.out" 2>&1 < /dev/null &
    BUILD_PID=$!
  fi
fi
if selected b || selected c || selected d; then ensure_broker || say "WARNING: no node broker: the fracgpu steps will fail"; fi

# ------------------------------------------------------------------ a: each mode alone, natively
if selected a && step_begin a 20 "each mode alone, natively"; then
  for mode in graph graph_thread_local compile serving; do
    need=20
    [[ $mode == compile ]] && need=60
    if (($(left) < need)); then say "  $mode: SKIPPED (time budget)"; phase_status "a.$mode" skipped "time budget"; continue; fi
    # shellcheck disable=SC2046
    client "$mode" "$(mode_limit "$mode" 180)" native -- $(mode_args "$mode")
    reap 0
    reset_procs
    say "  $mode: $(result_line "$OUTC/a.$mode.json") ($ELAPSED s)"
  done
fi

# ------------------------------------------------------------------ b: under fracgpu next to a competitor
if selected b; then
  for W in 20 50 80; do
    modes="graph compile serving"
    ((W == 50)) && modes="graph graph_thread_local compile serving"
    if step_begin "b$W" 60 "modes ($modes) at --compute $W next to a matmul tenant at --compute $((100 - W))"; then
      competitor comp $((100 - W)) || true
      for mode in $modes; do
        if (($(left) < 20)); then say "  $mode: SKIPPED (time budget)"; phase_status "b$W.$mode" skipped "time budget"; continue; fi
        [[ $mode == compile ]] && (($(left) < 40)) && { say "  $mode: SKIPPED (time budget)"; phase_status "b$W.$mode" skipped "time budget"; continue; }
        alive "${PIDS[$COMP_IDX]}" || say "  WARNING: the competitor is not running any more"
        # shellcheck disable=SC2046
        client "$mode" "$(mode_limit "$mode")" frac --memory "$MEM" --compute "$W" -- $(mode_args "$mode")
        reap $((${#PIDS[@]} - 1))
        say "  $mode: $(result_line "$OUTC/b$W.$mode.json") ($ELAPSED s)"
      done
      stop_competitor comp
      reset_procs
      say "  phase b$W done in $(since "$STEP_T0") s"
    fi
  done
fi

# The share check and the samples' runs are measured without the build competing for the CPU.
if [[ -n "$BUILD_PID" ]] && (selected c || selected d); then
  if alive "$BUILD_PID"; then say "== waiting for the cuda-samples build ($(left) s left)"; fi
  wait "$BUILD_PID"
  BRC=$?
  BUILD_PID=""
  say "== cuda-samples build: rc $BRC: $(tail -n 1 "$WORK/logs/samples-build.out")"
  cp "$SBUILD/built.tsv" "$OUTC/built.tsv" 2>/dev/null
fi

# ------------------------------------------------------------------ c: share of a graph-replay tenant
if selected c; then
  CAP_SHARE=(--mode graph --repeat 3 --seconds "$SHARE_SECS" --hidden 4096 --batch 4096 --layers 4 --sync-every 8
             --verify-every-s 2)
  MM_SHARE=(--seconds "$SHARE_SECS")
  share_run() {  # share_run STEP WHO...: the tenants (cap, mm) of one step, released together
    local who
    if ! step_begin "$1" $((SHARE_SECS + 15)) "share: $*"; then return; fi
    shift
    for who in "$@"; do
      case "$who" in
        cap) client cap 90 frac --memory "$MEM" --compute 30 -- "${CAP_SHARE[@]}" --ready "$PH/cap.ready" --barrier "$PH/go" ;;
        mm) spawn mm "$(limit_for 90)" frac --memory "$MEM" --compute 70 -- "${MATMUL[@]}" "${MM_SHARE[@]}" \
              --ready "$PH/mm.ready" --barrier "$PH/go" --out "$OUTC/$PHASE.mm.json" --tag "$PHASE.mm" ;;
      esac
    done
    local i n=${#PIDS[@]} ready end=$(($(date +%s) + 90))
    while :; do
      ready=0
      for i in "${!PIDS[@]}"; do
        if [[ -e "$PH/${TAGS[$i]}.ready" ]] || ! alive "${PIDS[$i]}"; then ready=$((ready + 1)); fi
      done
      ((ready >= n)) && break
      (($(date +%s) >= end)) && break
      sleep 0.05
    done
    touch "$PH/go"
    say "  released $n tenant(s) after $(since "$STEP_T0") s"
    reap_all
    say "  $PHASE done in $(since "$STEP_T0") s"
  }
  share_run c_cap_alone cap
  share_run c_mm_alone mm
  share_run c_both cap mm
fi

# ------------------------------------------------------------------ d: NVIDIA cuda-samples
# sample NAME KIND VARIANT DIR TIMEOUT ARGS...: one run of a built sample (in its binary directory)
sample() {
  local name=$1 kind=$2 variant=$3 dir=$4 want=$5 lim passed
  shift 5
  lim=$(limit_for "$want")
  case "$variant" in
    native) spawn "$name.$variant" "$lim" native -- env -C "$dir" "./$name" "$@" ;;
    frac) spawn "$name.$variant" "$lim" frac --memory "$SAMPLE_MEM" -- env -C "$dir" "./$name" "$@" ;;
    contended) spawn "$name.$variant" "$lim" frac --memory "$SAMPLE_MEM" --compute 50 -- env -C "$dir" "./$name" "$@" ;;
  esac
  reap $((${#PIDS[@]} - 1))
  passed="$(grep -m1 -iE 'test passed|passed|result = pass' "$PH/$name.$variant.out" | tr '\t' ' ' | cut -c1-80)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$kind" "$variant" "$RC" "$ELAPSED" "$lim" "$passed" >> "$OUTC/samples.tsv"
  say "  $name $variant: rc $RC ($ELAPSED s)"
}
if selected d && [[ -n "$SAMPLES" ]] && step_begin d 30 "cuda-samples: native, fracgpu alone, graph samples next to a competitor"; then
  # The list, joined with the build's status: built samples only, graph ones first.
  declare -A BDIR=()
  while IFS=$'\t' read -r name st detail; do [[ "$st" == built ]] && BDIR[$name]=$detail; done < "$OUTC/built.tsv"
  GRAPH_S=() PLAIN_S=()
  declare -A KIND=() STO=() SARGS=()
  while read -r rel kind to rest; do
    [[ -z "$rel" || "$rel" == \#* || "$kind" == skip ]] && continue
    name="${rel##*/}"
    [[ -n "${BDIR[$name]:-}" ]] || continue
    KIND[$name]=$kind STO[$name]=${to:-60} SARGS[$name]="$rest"
    if [[ "$kind" == graph ]]; then GRAPH_S+=("$name"); else PLAIN_S+=("$name"); fi
  done < "$SAMPLES_LIST"
  say "  ${#GRAPH_S[@]} graph and ${#PLAIN_S[@]} other samples built"
  run_pair() {  # native then fracgpu alone, if the budget allows
    local name=$1 v
    for v in native frac; do
      if (($(left) < 8)); then
        printf '%s\t%s\t%s\t%s\t0\t0\t\n' "$name" "${KIND[$name]}" "$v" skipped >> "$OUTC/samples.tsv"
        continue
      fi
      # shellcheck disable=SC2086
      sample "$name" "${KIND[$name]}" "$v" "${BDIR[$name]}" "${STO[$name]}" ${SARGS[$name]}
    done
  }
  for name in "${GRAPH_S[@]}"; do run_pair "$name"; done
  if ((${#GRAPH_S[@]})); then
    comp_ok=0
    if (($(left) >= 30)); then competitor dcomp 50 && comp_ok=1; fi
    if ((comp_ok)); then
      for name in "${GRAPH_S[@]}"; do
        if (($(left) < 8)); then
          printf '%s\t%s\t%s\t%s\t0\t0\t\n' "$name" graph contended skipped >> "$OUTC/samples.tsv"
          continue
        fi
        alive "${PIDS[$COMP_IDX]}" || say "  WARNING: the competitor is not running any more"
        # shellcheck disable=SC2086
        sample "$name" graph contended "${BDIR[$name]}" "${STO[$name]}" ${SARGS[$name]}
      done
      stop_competitor dcomp
    else
      for name in "${GRAPH_S[@]}"; do
        printf '%s\t%s\t%s\t%s\t0\t0\t\n' "$name" graph contended no-competitor >> "$OUTC/samples.tsv"
      done
      stop_competitor dcomp
    fi
  fi
  for name in "${PLAIN_S[@]}"; do run_pair "$name"; done
  say "  phase d done in $(since "$STEP_T0") s"
fi
stop_broker

report
trap - EXIT
CLEANED=1
kill -- "-$HARD_PID" 2>/dev/null
if ! ((KEEP_WORK)); then rm -rf "$WORK"; else say "work directory kept: $WORK"; fi
exit "$STATUS"
