#!/usr/bin/env bash
# Builds a chosen list of NVIDIA cuda-samples for one GPU architecture, so that one failing
# sample does not stop the others. Used by run_capture_checks.sh (phase d); runs on its own too
# (the CPU machine has nvcc, so the list can be checked there before GPU time is spent).
#
#   tests/gpu/capture/build_cuda_samples.sh --src DIR --work DIR [--list FILE] [--jobs N]
#       [--arch 90] [--timeout S] [--configure-only]
#
# --src DIR   the cuda-samples source (NVIDIA/cuda-samples: Common/, cmake/, Samples/; e.g. what
#             tools/copy_cuda_samples.sh exported); only read
# --work DIR  everything goes here: src/ (Common, cmake and the listed samples copied, each
#             sample's `set(CMAKE_CUDA_ARCHITECTURES 75 80 ... 120)` replaced by --arch, which
#             -DCMAKE_CUDA_ARCHITECTURES alone cannot override), wrap/CMakeLists.txt (one
#             project that add_subdirectory()s each sample whose CUDA:: libraries the toolkit
#             has), build/ (Ninja, or Makefiles without ninja), configure.log, build.log and
#             built.tsv: NAME<TAB>STATUS<TAB>DETAIL per listed sample, STATUS one of built
#             (DETAIL: its binary directory, where it must run: data files are copied there),
#             build-failed, not-configured, missing (not in --src), skip (the list's reason)
# --list FILE samples to build (default cuda_samples.list beside this script; format there)
# --jobs N    parallel compile jobs (default 16)  --arch A  CUDA architecture (default 90)
# --timeout S wall-clock limit of configure + build (default 420); what is unbuilt by then fails
# --configure-only stops after the configure (built.tsv then says "configured" for the others).
# The build is `ninja -k 0` (or `make -k`) of the configured targets only. If the one configure
# fails, each sample is configured alone (in parallel) and the ones that fail are left out.
# NVCC (default /usr/local/cuda/bin/nvcc, else nvcc on PATH) and CMAKE (default cmake) may be set.
# Exit status: 0 when at least one sample was built, 1 otherwise, 2 on bad usage.
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="" WORK="" LIST="$SCRIPT_DIR/cuda_samples.list" JOBS=16 ARCH=90 TIMEOUT=420 CONFIGURE_ONLY=0
usage() { sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --src) SRC="${2:?--src needs a directory}"; shift 2 ;;
    --work) WORK="${2:?--work needs a directory}"; shift 2 ;;
    --list) LIST="${2:?--list needs a file}"; shift 2 ;;
    --jobs) JOBS="${2:?}"; shift 2 ;;
    --arch) ARCH="${2:?}"; shift 2 ;;
    --timeout) TIMEOUT="${2:?}"; shift 2 ;;
    --configure-only) CONFIGURE_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build_cuda_samples.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ -n "$SRC" && -n "$WORK" ]] || { echo "build_cuda_samples.sh: --src and --work are required" >&2; exit 2; }
[[ -d "$SRC/Samples" && -d "$SRC/Common" ]] || { echo "build_cuda_samples.sh: $SRC has no Samples/ and Common/" >&2; exit 2; }
[[ -r "$LIST" ]] || { echo "build_cuda_samples.sh: cannot read --list $LIST" >&2; exit 2; }
for v in JOBS ARCH TIMEOUT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "build_cuda_samples.sh: --${v,,} must be a whole number" >&2; exit 2; }
done
SRC="$(cd "$SRC" && pwd)"
mkdir -p "$WORK" || exit 2
WORK="$(cd "$WORK" && pwd)"
NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
[[ -x "$NVCC" ]] || NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
CMAKE="${CMAKE:-cmake}"
T0=$(date +%s)
END=$((T0 + TIMEOUT))
left() { echo $((END - $(date +%s))); }
say() { printf '[build_cuda_samples] %s\n' "$*"; }

STATUS_TSV="$WORK/built.tsv"
: > "$STATUS_TSV"
status() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$STATUS_TSV"; }

# ------------------------------------------------------------------ the list, copied and patched
rm -rf "$WORK/src" "$WORK/wrap" "$WORK/build" "$WORK/probe"
mkdir -p "$WORK/src/Samples"
cp -R "$SRC/Common" "$WORK/src/" || { say "cannot copy $SRC/Common"; exit 1; }
[[ -d "$SRC/cmake" ]] && cp -R "$SRC/cmake" "$WORK/src/"
PATHS=()
while read -r rel kind rest; do
  [[ -z "$rel" || "$rel" == \#* ]] && continue
  name="${rel##*/}"
  if [[ "$kind" == skip ]]; then status "$name" skip "${rest:-listed as skip}"; continue; fi
  if [[ ! -f "$SRC/Samples/$rel/CMakeLists.txt" ]]; then status "$name" missing "no Samples/$rel/CMakeLists.txt in $SRC"; continue; fi
  mkdir -p "$WORK/src/Samples/${rel%/*}"
  cp -R "$SRC/Samples/$rel" "$WORK/src/Samples/$rel"
  PATHS+=("$rel")
done < "$LIST"
chmod -R u+w "$WORK/src"
patched=0
for rel in "${PATHS[@]}"; do
  f="$WORK/src/Samples/$rel/CMakeLists.txt"
  if grep -q 'set(CMAKE_CUDA_ARCHITECTURES' "$f"; then
    sed -i -E "s/^([[:space:]]*)set\(CMAKE_CUDA_ARCHITECTURES[[:space:]][^)]*\)/\1set(CMAKE_CUDA_ARCHITECTURES $ARCH)/" "$f"
    patched=$((patched + 1))
  fi
done
say "${#PATHS[@]} samples to build from $SRC for sm_$ARCH ($patched CMakeLists patched to that architecture); nvcc $NVCC"
((${#PATHS[@]})) || { say "nothing to build"; exit 1; }

# gen_wrapper DIR STATUS_FILE REL...: a CMakeLists.txt in DIR that adds each sample
gen_wrapper() {
  local dir=$1 st=$2 rel
  shift 2
  mkdir -p "$dir"
  {
    cat <<EOF
cmake_minimum_required(VERSION 3.20)
project(fracgpu_cuda_samples LANGUAGES C CXX CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_ARCHITECTURES $ARCH)
set(CMAKE_CUDA_FLAGS "\${CMAKE_CUDA_FLAGS} -Wno-deprecated-gpu-targets -lineinfo --extended-lambda")
set(FRACGPU_SAMPLES_ROOT "$WORK/src")
set(FRACGPU_STATUS "$st")
file(WRITE "\${FRACGPU_STATUS}" "")
function(fracgpu_sample rel)
  get_filename_component(name "\${rel}" NAME)
  set(dir "\${FRACGPU_SAMPLES_ROOT}/Samples/\${rel}")
  file(READ "\${dir}/CMakeLists.txt" txt)
  string(REGEX MATCHALL "CUDA::[A-Za-z0-9_]+" libs "\${txt}")
  if(libs)
    list(REMOVE_DUPLICATES libs)
  endif()
  foreach(lib IN LISTS libs)
    if(NOT TARGET \${lib})
      file(APPEND "\${FRACGPU_STATUS}" "\${name}\tnot-configured\tthe toolkit has no \${lib}\n")
      return()
    endif()
  endforeach()
  add_subdirectory("\${dir}" "\${CMAKE_BINARY_DIR}/s/\${name}")
  if(TARGET \${name})
    file(APPEND "\${FRACGPU_STATUS}" "\${name}\tconfigured\t\${CMAKE_BINARY_DIR}/s/\${name}\n")
  else()
    file(APPEND "\${FRACGPU_STATUS}" "\${name}\tnot-configured\tits CMakeLists.txt defined no target (a dependency it did not find: see configure.log)\n")
  endif()
endfunction()
EOF
    for rel in "$@"; do printf 'fracgpu_sample(%s)\n' "$rel"; done
  } > "$dir/CMakeLists.txt"
}
GEN=(-G "Unix Makefiles")
command -v ninja > /dev/null 2>&1 && GEN=(-G Ninja)
configure() {  # configure WRAPDIR BUILDDIR LOG
  local l; l=$(left)
  ((l > 5)) || return 124
  timeout -k 5 "$l" "$CMAKE" -S "$1" -B "$2" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > "$3" 2>&1 < /dev/null
}

# ------------------------------------------------------------------ configure (all at once, else one by one)
gen_wrapper "$WORK/wrap" "$WORK/configured.tsv" "${PATHS[@]}"
if configure "$WORK/wrap" "$WORK/build" "$WORK/configure.log"; then
  say "configured in $(($(date +%s) - T0)) s"
else
  rc=$?
  say "configure of all samples failed (rc $rc): $(grep -m2 -E 'CMake Error|error' "$WORK/configure.log" | tr '\n' ' ' | cut -c1-300)"
  say "configuring each sample alone to find the ones that break it"
  GOOD=()
  declare -A PROBE_PID=()
  for rel in "${PATHS[@]}"; do
    name="${rel##*/}"
    while (($(jobs -rp | wc -l) >= JOBS)); do sleep 0.2; done
    gen_wrapper "$WORK/probe/$name/wrap" "$WORK/probe/$name/configured.tsv" "$rel"
    configure "$WORK/probe/$name/wrap" "$WORK/probe/$name/build" "$WORK/probe/$name/configure.log" &
    PROBE_PID[$name]=$!
  done
  for rel in "${PATHS[@]}"; do
    name="${rel##*/}"
    if wait "${PROBE_PID[$name]}"; then
      GOOD+=("$rel")
    else
      status "$name" not-configured "its configure fails: $(grep -m1 -A2 'CMake Error' "$WORK/probe/$name/configure.log" | tr '\n' ' ' | cut -c1-240)"
    fi
  done
  if ((${#GOOD[@]} == 0)) || { gen_wrapper "$WORK/wrap" "$WORK/configured.tsv" "${GOOD[@]}"
       ! configure "$WORK/wrap" "$WORK/build" "$WORK/configure.log"; }; then
    say "no configurable set of samples; see $WORK/configure.log"
    for rel in "${GOOD[@]}"; do status "${rel##*/}" not-configured "configure of the remaining samples failed"; done
    exit 1
  fi
  say "configured ${#GOOD[@]} samples in $(($(date +%s) - T0)) s"
fi

# ------------------------------------------------------------------ build the configured targets, keep going
TARGETS=()
while IFS=$'\t' read -r name st detail; do
  [[ -z "$name" ]] && continue
  if [[ "$st" == configured ]]; then TARGETS+=("$name"); else status "$name" "$st" "$detail"; fi
done < "$WORK/configured.tsv"
if ((CONFIGURE_ONLY)); then
  for name in "${TARGETS[@]}"; do status "$name" configured "$WORK/build/s/$name"; done
  say "configure only: ${#TARGETS[@]} of ${#PATHS[@]} samples configured in $(($(date +%s) - T0)) s; status in $STATUS_TSV"
  ((${#TARGETS[@]} > 0))
  exit
fi
say "building ${#TARGETS[@]} targets with ${GEN[1]}, $JOBS jobs ($(left) s left)"
brc=0
if ((${#TARGETS[@]})); then
  l=$(left)
  ((l < 5)) && l=5
  if [[ "${GEN[1]}" == Ninja ]]; then
    timeout -k 5 "$l" ninja -C "$WORK/build" -k 0 -j "$JOBS" "${TARGETS[@]}" > "$WORK/build.log" 2>&1 < /dev/null
  else
    timeout -k 5 "$l" make -C "$WORK/build" -k -j "$JOBS" "${TARGETS[@]}" > "$WORK/build.log" 2>&1 < /dev/null
  fi
  brc=$?
fi
built=0
for name in "${TARGETS[@]}"; do
  bdir="$WORK/build/s/$name"
  if [[ -x "$bdir/$name" ]] && ! grep -qE "^FAILED: .*s/$name/" "$WORK/build.log"; then
    status "$name" built "$bdir"
    built=$((built + 1))
  else
    why="$(grep -A6 -E "^FAILED: .*s/$name/" "$WORK/build.log" | grep -m1 -iE 'error|fatal|undefined' | cut -c1-240)"
    [[ -z "$why" && ($brc == 124 || $brc == 137) ]] && why="the build ran out of time (--timeout $TIMEOUT)"
    status "$name" build-failed "${why:-see build.log}"
  fi
done
say "built $built of ${#PATHS[@]} samples in $(($(date +%s) - T0)) s (build rc $brc); status in $STATUS_TSV"
((built > 0))
