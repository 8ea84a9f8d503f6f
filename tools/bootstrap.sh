#!/usr/bin/env bash
# Installs what fracgpu's build needs (Debian 12 / Ubuntu packages), fetches the pinned
# Kubernetes manifest tools into build/manifest-tools and builds fracgpu into build/.
# Used by the README's first command and by CI. Needs root or sudo for apt.
#   tools/bootstrap.sh [extra cmake arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-yaml binutils
  libboost-dev libspdlog-dev libfmt-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev prometheus-cpp-dev
  prometheus python3-matplotlib
  curl ca-certificates
)
# Node.js and npm run the Kubernetes manifests' schema check. Debian's packages only where
# the machine has none: a NodeSource nodejs already brings npm, and Debian's npm
# conflicts with it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  PACKAGES+=(nodejs npm)
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
if command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${PACKAGES[@]}"
else
  echo "bootstrap: no apt-get here; install the equivalents of: ${PACKAGES[*]}" >&2
fi

CUDA_INCLUDE=${FRACGPU_CUDA_INCLUDE_DIR:-/usr/local/cuda/include}
if [[ ! -f "$CUDA_INCLUDE/cudaTypedefs.h" ]]; then
  echo "bootstrap: the CUDA toolkit headers are needed at $CUDA_INCLUDE (cuda.h, cudaTypedefs.h);" \
       "install the CUDA toolkit or set FRACGPU_CUDA_INCLUDE_DIR" >&2
  exit 1
fi

# kubectl and kubernetes-models for the manifests' schema test, pinned, into the build tree.
# Without them (offline) the build goes on and configuring warns that the test is left out;
# with -DFRACGPU_REQUIRE_MANIFEST_TOOLS=ON (CI) configuring fails instead.
if ! tools/fetch_manifest_tools.sh build/manifest-tools; then
  echo "bootstrap: could not fetch the Kubernetes manifest tools (see above): the manifest schema" \
       "test will not be registered; re-run tools/fetch_manifest_tools.sh build/manifest-tools when online" >&2
fi

cmake -S . -B build -G Ninja -DFRACGPU_CUDA_INCLUDE_DIR="$CUDA_INCLUDE" "$@"
cmake --build build -j"$(nproc)"
echo "bootstrap: built; binaries in build/bin, the shim in build/lib/libfracgpu.so"
