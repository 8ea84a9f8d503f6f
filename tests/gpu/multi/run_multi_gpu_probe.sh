#!/usr/bin/env bash
# Probe on a two-GPU machine (nvidia-h200-x2): NCCL all-reduce natively and under
# `fracgpu run` with a 40 GiB cap on both GPUs, alternated 3 times; prints each run's JSON.
#   tests/gpu/multi/run_multi_gpu_probe.sh BIN_DIR
set -u
B=${1:?bin dir with fracgpu, libfracgpu.so, deps/}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd)
nvidia-smi -L
nvidia-smi topo -m 2>/dev/null | head -5
run_native() { timeout 180 python3 -m torch.distributed.run --standalone --nproc_per_node=2 "$HERE/allreduce.py" 2>"$1.err" | tail -1; }
run_shim() {
  FRACGPU_SHIM=$B/libfracgpu.so FRACGPU_RUN_DIR=$(mktemp -d) LD_LIBRARY_PATH=$B/deps timeout 240 \
    "$B/fracgpu" run --memory 40GiB --gpu 0,1 -- env LD_LIBRARY_PATH= NCCL_NVLS_ENABLE=0 \
    python3 -m torch.distributed.run --standalone --nproc_per_node=2 "$HERE/allreduce.py" 2>"$1.err" | tail -1
}
for i in 1 2 3; do
  echo "native $i: $(run_native /tmp/native$i)"
  echo "shim   $i: $(run_shim /tmp/shim$i)"
done
tail -5 /tmp/shim1.err
