#!/bin/bash
# Issue 31 item 4 on the GPU machine, one call: the launch path of a tenant timed piece by piece.
# D holds plain/ (tools/pack_devrun.sh BUILD D/plain --with fracgpu-bench-client) and
# prof/libfracgpu.so (the shim of a build configured with -DFRACGPU_LAUNCH_PROFILE=ON). First
# fresh no-tenant launchtime processes (native, plain shim, profiling shim, alternated), then the
# bench's overhead phase with the profiling shim as --shim-b (its tenant processes write the
# profiles); tools/launch_profile_summary.py tabulates both into $OUT.
#   D=devrun/ovh31 PAIRS=5 tools/launch_profile_run.sh      (about 40 s + 15 s per pair)
set -u
D=$(cd "${D:?D: the packed folder}" && pwd); P=/tmp/fracgpu-launch-profile
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p $P /tmp/cl /tmp/pt /tmp/pn
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
lscpu | grep -E "Model name|^CPU\(s\)" >> $OUT/gpu.txt
C=$D/plain/bin/fracgpu-bench-client
for i in $(seq "${DIRECT:-4}"); do
  for w in native shim prof; do
    case $w in native) pre="";; shim) pre=$D/plain/bin/libfracgpu.so;; prof) pre=$D/prof/libfracgpu.so;; esac
    LD_PRELOAD=$pre timeout 20 $C --mode launchtime --count 20000 --reps 3 --sync-every 32 \
      --out /tmp/cl/$w-$i.json > /dev/null 2>&1 || echo "$w-$i failed"
  done
done
mv $P/*.json /tmp/pn/ 2>/dev/null
python3 $HERE/launch_profile_summary.py /tmp/pn --clients /tmp/cl > $OUT/direct.txt 2>&1
cat $OUT/direct.txt
timeout $((60 + 20 * ${PAIRS:-5})) $HERE/../bench/gpu/run.sh --build $D/plain --out /tmp/r --only overhead \
  --overhead-pairs ${PAIRS:-5} --budget $((40 + 20 * ${PAIRS:-5})) --shim-b $D/prof/libfracgpu.so > $OUT/run.log 2>&1
echo "bench rc $?"
cp /tmp/r/results.json $OUT/ 2>/dev/null
mv $P/*.json /tmp/pt/ 2>/dev/null
python3 $HERE/launch_profile_summary.py /tmp/pt --results $OUT/results.json > $OUT/summary.txt 2>&1
tar czf $OUT/raw.tgz -C /tmp pt pn cl
cat $OUT/summary.txt
