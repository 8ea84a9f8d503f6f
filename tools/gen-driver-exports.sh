#!/bin/sh
# Regenerates interpose/driver_exports.def from the CUDA toolkit's stub libcuda.so:
# the complete list of public driver entry points the shim must export.
set -eu
stub=${1:-/usr/local/cuda/lib64/stubs/libcuda.so}
out=$(dirname "$0")/../interpose/driver_exports.def
[ -r "$stub" ] || { echo "gen-driver-exports: cannot read $stub" >&2; exit 1; }
tmp=$(mktemp)
sed -n '1,/^$/p' "$out" > "$tmp"   # keep the banner comment
nm -D --defined-only "$stub" | awk '$2=="T"{print $3}' | sort -u | sed 's/.*/FRACGPU_DRIVER_SYMBOL(&)/' >> "$tmp"
mv "$tmp" "$out"
echo "wrote $(grep -c FRACGPU_DRIVER_SYMBOL "$out") symbols to $out"
