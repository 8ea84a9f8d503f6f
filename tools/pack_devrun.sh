#!/usr/bin/env bash
# Packs the built binaries for the GPU machine: DEST/bin/{fracgpu,fracgpu-broker,libfracgpu.so}
# and DEST/bin/deps/ with the shared libraries of the two binaries that the GPU machine
# (Ubuntu 24.04, glibc 2.39, no network) may lack. The binaries' RPATH becomes $ORIGIN/deps
# (DT_RPATH, which also serves their libraries' own dependencies), so they run there without
# LD_LIBRARY_PATH; the GPU suites (tests/gpu/*/run_*_checks.sh --bin DEST/bin) still put
# DEST/bin/deps on LD_LIBRARY_PATH for fracgpu and the broker only, never for tenants.
#
#   tools/pack_devrun.sh [BUILD_DIR] [DEST] [--with NAME]... [--cuda-client] [--no-strip]
#
# BUILD_DIR (default build of the repo) has bin/fracgpu, bin/fracgpu-broker, lib/libfracgpu.so;
# DEST (default devrun of the repo, git-ignored) gets bin/ (replaced). --with NAME adds another
# binary of BUILD_DIR/bin (e.g. fracgpu-device-plugin for tests/gpu/k8s) with its libraries.
# --cuda-client also builds tests/gpu/cuda_client.cu for sm_90 with nvcc into DEST/bin (the compute
# suite's launch-rate client: saves building it on the GPU machine). Debug info is stripped
# (strip --strip-debug; --no-strip keeps it) to keep DEST small for the device tool's 64 MiB carry.
# Not copied: glibc's libraries (libc, libm, libpthread, libdl, librt, libresolv, libutil,
# ld-linux), libstdc++ and libgcc_s (newer on Ubuntu 24.04), and the NVIDIA driver's libraries
# (libcuda, libnvidia-ml: the GPU machine's own must be used). Needs patchelf (apt-get install
# patchelf). Prints what it packed and the total size; exit 0 on success.
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
BUILD="" DEST="" STRIP=1 CUDA_CLIENT=0
EXTRA=()
usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --with) EXTRA+=("${2:?--with needs a binary name}"); shift 2 ;;
    --cuda-client) CUDA_CLIENT=1; shift ;;
    --no-strip) STRIP=0; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "pack_devrun.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) if [[ -z "$BUILD" ]]; then BUILD=$1; elif [[ -z "$DEST" ]]; then DEST=$1
       else echo "pack_devrun.sh: too many arguments" >&2; exit 2; fi; shift ;;
  esac
done
BUILD="${BUILD:-$REPO/build}"
DEST="${DEST:-$REPO/devrun}"
die() { echo "pack_devrun.sh: $*" >&2; exit 1; }
command -v patchelf > /dev/null 2>&1 || die "patchelf is missing (apt-get install -y patchelf)"
[[ -d "$BUILD" ]] || die "no build directory $BUILD"
BINS=(fracgpu fracgpu-broker "${EXTRA[@]}")
for b in "${BINS[@]}"; do [[ -x "$BUILD/bin/$b" ]] || die "$BUILD/bin/$b is missing (build it first)"; done
[[ -f "$BUILD/lib/libfracgpu.so" ]] || die "$BUILD/lib/libfracgpu.so is missing (build it first)"

OUTB="$DEST/bin"
rm -rf "$OUTB"
mkdir -p "$OUTB/deps" || die "cannot create $OUTB"

# Libraries never copied: glibc's, the C++ runtime (newer there), the NVIDIA driver's.
skip_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libmvec.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*) return 0 ;;
    libutil.so*|libanl.so*|libnsl.so*|libcrypt.so.1*|libstdc++.so*|libgcc_s.so*|libatomic.so*) return 0 ;;
    libcuda.so*|libnvidia-*|libnvcuvid.so*|libcudadebugger.so*) return 0 ;;
  esac
  return 1
}
copy_deps() {  # copy_deps FILE: the non-skipped libraries ldd resolves for FILE into deps/
  local name arrow path rest
  if ldd "$1" 2>&1 | grep -q 'not found'; then
    die "$1 has unresolved libraries here: $(ldd "$1" | grep 'not found' | tr '\n' ' ')"
  fi
  while read -r name arrow path rest; do
    [[ "$arrow" == "=>" && -n "$path" && "$path" == /* ]] || continue
    skip_lib "$name" && continue
    [[ -e "$OUTB/deps/$name" ]] && continue
    cp -L "$path" "$OUTB/deps/$name" || die "cannot copy $path"
    chmod u+w "$OUTB/deps/$name"
  done < <(ldd "$1")
}
for b in "${BINS[@]}"; do
  cp "$BUILD/bin/$b" "$OUTB/$b" || die "cannot copy $b"
  copy_deps "$BUILD/bin/$b"
done
cp "$BUILD/lib/libfracgpu.so" "$OUTB/libfracgpu.so" || die "cannot copy libfracgpu.so"
# The shim is self-contained by design (static C++ runtime): say so if it is not.
shim_needs="$(ldd "$OUTB/libfracgpu.so" 2>/dev/null | awk '{print $1}' | while read -r n; do skip_lib "${n##*/}" || echo "$n"; done | tr '\n' ' ')"
[[ -z "${shim_needs// /}" ]] || echo "pack_devrun.sh: WARNING: libfracgpu.so needs $shim_needs (not self-contained; not packed)" >&2

if ((STRIP)); then
  for f in "$OUTB"/* "$OUTB"/deps/*; do [[ -f "$f" ]] && strip --strip-debug "$f" 2>/dev/null; done
fi
# shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
for b in "${BINS[@]}"; do patchelf --force-rpath --set-rpath '$ORIGIN/deps' "$OUTB/$b" || die "patchelf $b failed"; done
# shellcheck disable=SC2016
for f in "$OUTB"/deps/*; do [[ -f "$f" ]] && patchelf --force-rpath --set-rpath '$ORIGIN' "$f" 2>/dev/null; done

if ((CUDA_CLIENT)); then
  NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
  [[ -x "$NVCC" ]] || NVCC="$(command -v nvcc)" || die "--cuda-client: no nvcc"
  STUBS="$(dirname "$(dirname "$NVCC")")/lib64/stubs"
  "$NVCC" -O2 -arch="${FRACGPU_GPU_ARCH:-sm_90}" -o "$OUTB/cuda_client" "$REPO/tests/gpu/cuda_client.cu" \
    -L"$STUBS" -lcuda || die "building cuda_client failed"
  # The stub libcuda.so's SONAME is libcuda.so.1: the GPU machine's driver is found by ldconfig.
fi

# Check: with an empty LD_LIBRARY_PATH every library of the packed binaries resolves, deps/ first.
for b in "${BINS[@]}"; do
  miss="$(env -u LD_LIBRARY_PATH ldd "$OUTB/$b" | grep 'not found' || true)"
  [[ -z "$miss" ]] || die "$b: unresolved after packing: $miss"
done
{
  echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(cd "$BUILD" && pwd)"
  echo "repo_commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (dirty)')"
  (cd "$OUTB" && sha256sum -- * deps/* 2>/dev/null)
} > "$OUTB/PACKED.txt"
total=$(du -sb "$DEST" | cut -f1)
echo "pack_devrun.sh: $OUTB: ${BINS[*]} libfracgpu.so$( ((CUDA_CLIENT)) && echo ' cuda_client'); deps: $(find "$OUTB/deps" -maxdepth 1 -type f -printf '%f\n' | sort | tr '\n' ' ')"
echo "pack_devrun.sh: total $(du -sh "$DEST" | cut -f1) ($total bytes) in $DEST"
((total < 40 * 1024 * 1024)) || echo "pack_devrun.sh: WARNING: over 40 MiB; the device tool carries 64 MiB in all" >&2
exit 0
