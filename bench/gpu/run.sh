#!/usr/bin/env bash
# fracgpu benchmark suite: fracgpu side by side with native time slicing, MPS, fracgpu over MPS and HAMi-core
# on any NVIDIA GPU (or fracgpu's simulated GPU), one command, one output directory.
#
#   bench/gpu/run.sh [--quick] [--only "overhead shares conserve ceilings latency memory faults"]
#                    [--hami PATH/libvgpu.so] [--build DIR] [--out DIR] [--budget S] [--gpu real|sim|auto]
#
# The whole run keeps within --budget (default 480 s, --quick 210 s): each phase has a planned
# share of it (bench/gpu/budget.py) and results.json records planned against actual seconds.
#
# --build DIR: a tools/pack_devrun.sh tree (DIR/bin: fracgpu, fracgpu-broker, libfracgpu.so, deps/,
# fracgpu-bench-client if packed with --with) or a build tree (bin/, lib/, fakecuda/, fakenvml/).
# --out DIR (default $OUT): results.json, results.csv, summary.txt, *.png, bench.tar.gz.
# PYTHON picks the interpreter (default python3). Everything else: bench/gpu/README.md.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python3}" "$HERE/bench.py" "$@"
