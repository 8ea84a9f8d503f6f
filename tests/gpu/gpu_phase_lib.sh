# Shell helpers shared by the real-GPU suites (compute/run_compute_checks.sh,
# multi/run_multi_gpu_checks.sh, k8s/run_pod_checks.sh): process-group control for
# tenants, a step under a time limit within the budget, the fracgpu CLI with the
# binaries' own libraries, and a node broker that several tenants share. Sourced, not
# run. The caller sets FRACGPU, SHIM, DEPS_LD (deps/ for fracgpu's own shared libraries),
# RUN and STATE (the broker's run and state directories), WORK (logs go to $WORK/logs),
# OUTC (results) and DEADLINE (epoch seconds when the batch must end).

say() { printf '%s\n' "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
alive() { local s; s="$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" || return 1; [[ -n "$s" && "$s" != Z ]]; }
frac_cli() { env LD_LIBRARY_PATH="$DEPS_LD" FRACGPU_SHIM="$SHIM" timeout -k 2 20 "$FRACGPU" --run-dir "$RUN" "$@" < /dev/null; }
killgroup() {  # killgroup PGID: TERM, up to 3 s, then KILL (the group, even if its leader is gone)
  local pg=$1 i
  if alive "$pg"; then
    kill -TERM -- "-$pg" 2>/dev/null
    for ((i = 0; i < 30; i++)); do alive "$pg" || break; sleep 0.1; done
  fi
  kill -KILL -- "-$pg" 2>/dev/null
  return 0
}

# limit_for S: S seconds, or what is left of the budget (less 5 s, at least 3) when that is less.
limit_for() { local l=$(($(left) - 5)); ((l < $1)) && echo $((l < 3 ? 3 : l)) || echo "$1"; }
# step TAG LIMIT CMD...: CMD in its own session under a time limit; stdout to $OUTC/TAG.out
# (its last JSON line is TAG.json), stderr to $WORK/logs/TAG.err; sets RC.
step() {
  local tag=$1 limit; limit=$(limit_for "$2"); shift 2
  setsid -w timeout -k 3 "$limit" "$@" > "$OUTC/$tag.out" 2> "$WORK/logs/$tag.err" < /dev/null
  RC=$?
  grep '^{' "$OUTC/$tag.out" | tail -n 1 > "$OUTC/$tag.json"
  [[ -s "$OUTC/$tag.json" ]] || rm -f "$OUTC/$tag.json"
  ((RC == 0)) || say "  $tag: rc $RC: $(tail -n 3 "$WORK/logs/$tag.err" | tr '\n' ' ' | cut -c1-300)"
  return $RC
}

BROKER_PID=""
ensure_broker() {  # a node broker answering at $RUN, (re)started if needed
  if [[ -n "$BROKER_PID" ]] && alive "$BROKER_PID"; then return 0; fi
  [[ -n "$BROKER_PID" ]] && { say "  the node broker (pid $BROKER_PID) had exited; starting another"; wait "$BROKER_PID" 2>/dev/null; }
  local n=$((${BROKER_STARTS:-0} + 1)) i
  BROKER_STARTS=$n
  setsid env LD_LIBRARY_PATH="$DEPS_LD" "$FRACGPU" --run-dir "$RUN" broker --state-dir "$STATE" ${FRACGPU_BROKER_FLAGS:-} \
    > "$WORK/logs/broker$n.out" 2> "$WORK/logs/broker$n.err" < /dev/null &
  BROKER_PID=$!
  for ((i = 0; i < 300; i++)); do
    alive "$BROKER_PID" || break
    if [[ -S "$RUN/admin.sock" ]] && frac_cli tenant list > /dev/null 2>&1; then
      say "== node broker $n up (pid $BROKER_PID, run dir $RUN) after $((i / 5))s"
      frac_cli status --json > "$OUTC/broker$n.status.json" 2> /dev/null
      return 0
    fi
    sleep 0.2
  done
  say "== node broker $n did NOT come up: $(tail -n 3 "$WORK/logs/broker$n.err" | tr '\n' ' ')"
  return 1
}
stop_broker() {
  [[ -n "$BROKER_PID" ]] || return 0
  kill -TERM "$BROKER_PID" 2>/dev/null
  local i
  for ((i = 0; i < 100; i++)); do alive "$BROKER_PID" || break; sleep 0.1; done
  killgroup "$BROKER_PID"
  wait "$BROKER_PID" 2>/dev/null
  BROKER_PID=""
}
