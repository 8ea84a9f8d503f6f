#!/bin/sh
# Regenerates interpose/tables/driver_exports.def: every public entry point of the CUDA driver,
# which the shim (carrying the driver's SONAME) must export. The list is the toolkit's
# stub libcuda.so plus tools/driver-exports-beyond-stub.txt: functions the real driver
# exports that the stub omits (OpenGL/EGL/VDPAU interop, cuMemGetAttribute, the
# debugger's cudbg* entry points; read from driver 580.159.04).
#   tools/gen-driver-exports.sh [stub-libcuda.so]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
stub=${1:-/usr/local/cuda/lib64/stubs/libcuda.so}
out=$here/../interpose/tables/driver_exports.def
[ -r "$stub" ] || { echo "gen-driver-exports: cannot read $stub" >&2; exit 1; }
tmp=$(mktemp)
sed -n '1,/^$/p' "$out" > "$tmp"   # keep the banner comment
{ nm -D --defined-only "$stub" | awk '$2=="T"{print $3}'; cat "$here/driver-exports-beyond-stub.txt"; } |
  LC_ALL=C sort -u | sed 's/.*/FRACGPU_DRIVER_SYMBOL(&)/' >> "$tmp"
mv "$tmp" "$out"
echo "wrote $(grep -c FRACGPU_DRIVER_SYMBOL "$out") symbols to $out"
