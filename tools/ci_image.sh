#!/usr/bin/env bash
# The node image built by a real container engine and checked by running it (issue 29,
# item 1). With podman (4.3.1 on Debian 12) and runc, no image registry:
#   1. a Debian 12 base, debootstrapped from the Debian mirror apt uses here and imported as
#      docker.io/library/debian:12 and :12-slim (kept between runs: a few minutes once);
#   2. this build's installed files (`cmake --install BUILD_DIR --strip`) given to
#      `podman build -f k8s/Dockerfile` as the named context "binaries": the compile stages
#      are skipped and the FINAL stage of the Dockerfile, the image that ships, is built for
#      real (its apt packages, its COPY, its labels, user and command);
#   3. the image is run (podman run --runtime runc --network none): its default command
#      prints the CLI's help, every program starts and answers --help, nothing lacks a
#      library, and the image's own libfracgpu.so, preloaded in a container running as uid
#      1000 with a read-only root, no new privileges and every capability dropped, caps a
#      program over the simulated GPU (a host broker's tenant of 2 GiB on a 16 GiB device:
#      cuMemGetInfo says 2 GiB, an allocation past the cap is refused), the device reached
#      as a container reaches a real one (its file mode 0666, the pid helper's socket).
# The compile stages themselves (build, the CUDA header pins) are not run here: they take
# minutes on 2 cores; `podman build` of the whole file works the same way without the
# "binaries" context (k8s/Dockerfile's banner).
#
#   tools/ci_image.sh [BUILD_DIR]        (default: build; root, podman, runc, debootstrap)
# Environment: FRACGPU_CI_IMAGE_DIR (cache and scratch, default /var/tmp/fracgpu-ci-image),
# DEBIAN_MIRROR (default: the Debian mirror of /etc/apt/sources.list*), FRACGPU_IMAGE (the
# tag built, default localhost/fracgpu:ci), FRACGPU_CI_IMAGE_SKIP_WITHOUT_PODMAN (set: exit 77,
# "skipped", where podman is missing; the ctest test runtime_image sets it). Idempotent: a second run rebuilds only what
# changed (podman's layer cache) and takes about 20 s.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BUILD=$(realpath -m "${1:-build}")
WORK=${FRACGPU_CI_IMAGE_DIR:-/var/tmp/fracgpu-ci-image}
IMAGE=${FRACGPU_IMAGE:-localhost/fracgpu:ci}
start=$(date +%s)
step() { printf 'ci-image: %3d s: %s\n' "$(($(date +%s) - start))" "$*"; }
fail() {
  printf 'ci-image: FAIL: %s\n' "$*" >&2
  exit 1
}

# 0. What it needs.
if [[ -n ${FRACGPU_CI_IMAGE_SKIP_WITHOUT_PODMAN:-} ]] && ! command -v podman >/dev/null; then
  echo "ci-image: SKIP: podman is not installed (apt-get install -y podman runc debootstrap)"
  exit 77 # ctest's skip code (tests/runtime/CMakeLists.txt); CI installs podman
fi
[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap, podman's rootful storage)"
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || fail "needs $tool (apt-get install -y podman runc debootstrap)"
done
[[ -f $BUILD/CMakeCache.txt ]] || fail "$BUILD is not a configured build folder"
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
for program in bin/fakecuda-ctl bin/fracgpu-broker bin/fracgpu bin/fracgpu-alloc-client \
  fakecuda/libcuda.so.1; do
  [[ -x $BUILD/$program ]] || fail "$BUILD/$program is not built (cmake --build $BUILD)"
done
if [[ -n $(cache_value FRACGPU_SANITIZE) ]]; then
  fail "$BUILD is a sanitizer build: the image holds no sanitizer runtime"
fi
mkdir -p "$WORK"

# 1. The base images.
debian_mirror() {
  local uri
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' |
    grep -E '/debian/?$' | head -1 || true)
  [[ -n $uri ]] || uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources \
    2>/dev/null | tr ' ' '\n' | grep -E '/debian/?$' | head -1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}
if ! podman image exists docker.io/library/debian:12 ||
  ! podman image exists docker.io/library/debian:12-slim; then
  MIRROR=${DEBIAN_MIRROR:-$(debian_mirror)}
  if [[ ! -f $WORK/base-root/.fracgpu-done ]]; then
    step "debootstrap --variant=minbase bookworm from $MIRROR"
    rm -rf "$WORK/base-root"
    debootstrap --variant=minbase bookworm "$WORK/base-root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
      fail "debootstrap failed, see $WORK/debootstrap.log"
    touch "$WORK/base-root/.fracgpu-done"
  fi
  step "podman import debian:12"
  tar -C "$WORK/base-root" --exclude=./.fracgpu-done -c . |
    podman import --change 'CMD ["bash"]' - docker.io/library/debian:12 >"$WORK/import.log" 2>&1 ||
    fail "podman import of the Debian 12 root failed"
  # -slim: what debuerreotype's slimify does to the official image (no docs, man pages or
  # locales, kept out of later installs by dpkg's path-exclude too).
  step "podman import debian:12-slim"
  rm -rf "$WORK/slim-root" && cp -a "$WORK/base-root" "$WORK/slim-root"
  cat >"$WORK/slim-root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  (
    cd "$WORK/slim-root"
    find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
    find usr/share/doc -mindepth 1 -type d -empty -delete
    rm -rf usr/share/man/* usr/share/groff/* usr/share/info/* usr/share/lintian/* var/lib/apt/lists/*
    find usr/share/locale -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  )
  tar -C "$WORK/slim-root" --exclude=./.fracgpu-done -c . |
    podman import --change 'CMD ["bash"]' - docker.io/library/debian:12-slim >"$WORK/import.log" 2>&1 ||
    fail "podman import of the slim root failed"
  rm -rf "$WORK/slim-root"
fi

# 2. The image: this build's installed files as the "binaries" context, the final stage built.
step "cmake --install $BUILD (stripped) as the \"binaries\" build context"
FACTS="python3 $REPO/k8s/image/image_facts.py"
read -r DESTDIR PREFIX < <($FACTS staging k8s/Dockerfile)
mapfile -t TARGETS < <($FACTS cmake-targets k8s/Dockerfile)
cmake --build "$BUILD" --target "${TARGETS[@]}" >/dev/null || fail "cmake --build $BUILD failed"
rm -rf "$WORK/binaries"
DESTDIR=$WORK/binaries$DESTDIR cmake --install "$BUILD" --prefix "$PREFIX" --strip >/dev/null ||
  fail "cmake --install $BUILD failed"
CUDA_INCLUDE=$(cache_value FRACGPU_CUDA_INCLUDE_DIR)
step "podman build -f k8s/Dockerfile (final stage) -t $IMAGE"
podman build --pull=never --network host --runtime runc \
  --build-context binaries="$WORK/binaries" --build-context cuda-headers="$CUDA_INCLUDE" \
  --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  -f k8s/Dockerfile -t "$IMAGE" . >"$WORK/podman-build.log" 2>&1 ||
  fail "podman build failed, see $WORK/podman-build.log: $(tail -5 "$WORK/podman-build.log")"

# 3. Run it.
RUN=(podman run --rm --network none --runtime runc
  --ulimit nofile=20000:20000 --ulimit nproc=32768:32768)
expect_in() { # expect_in WHAT NEEDLE COMMAND...: the command succeeds and prints NEEDLE
  local what=$1 needle=$2 out
  shift 2
  out=$("$@" 2>&1) || fail "$what: exit $?: $out"
  [[ $out == *"$needle"* ]] || fail "$what: no \"$needle\" in: $out"
}
step "podman run: the default command, each program's --help, no library missing"
expect_in "the image's default command" "Usage" "${RUN[@]}" "$IMAGE"
expect_in "fracgpu-broker --help" "--run-dir" "${RUN[@]}" "$IMAGE" fracgpu-broker --help
expect_in "fracgpu-device-plugin --help" "--broker-run-dir" "${RUN[@]}" "$IMAGE" \
  fracgpu-device-plugin --help
expect_in "fracgpu --help" "tenant" "${RUN[@]}" "$IMAGE" fracgpu --help
missing=$("${RUN[@]}" "$IMAGE" sh -c 'ldd /usr/local/bin/* /usr/local/lib/libfracgpu.so' 2>&1) ||
  fail "ldd in the image: $missing"
[[ $missing != *"not found"* ]] || fail "libraries missing in the image: $missing"
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
[[ $user == 0:0 ]] || fail "the image's user is \"$user\", the Dockerfile says 0:0"

step "podman run: the image's shim caps a uid-1000 container over the simulated GPU"
SCRATCH=$(mktemp -d /tmp/fracgpu-ci-image.XXXXXX)
SHM=/fracgpu-ci-image-$$
BROKER_PID= HELPER_PID=
cleanup() {
  [[ -n $BROKER_PID ]] && kill "$BROKER_PID" 2>/dev/null
  [[ -n $HELPER_PID ]] && kill "$HELPER_PID" 2>/dev/null
  wait 2>/dev/null
  rm -f "/dev/shm$SHM"
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
export FAKECUDA_SHM_NAME=$SHM FAKECUDA_MEMORY=16GiB FAKECUDA_CONTEXT_FOOTPRINT=64MiB \
  FAKECUDA_SHM_MODE=0666
"$BUILD/bin/fracgpu-broker" --run-dir "$SCRATCH/run" --state-dir "$SCRATCH/state" \
  --driver "$BUILD/fakecuda/libcuda.so.1" --context-footprint auto >"$SCRATCH/broker.log" 2>&1 &
BROKER_PID=$!
"$BUILD/bin/fakecuda-ctl" pid-helper >"$SCRATCH/helper.log" 2>&1 &
HELPER_PID=$!
for _ in $(seq 100); do
  [[ -S $SCRATCH/run/admin.sock && -S /dev/shm$SHM.pids ]] && break
  sleep 0.1
done
[[ -S $SCRATCH/run/admin.sock ]] || fail "the broker did not start: $(cat "$SCRATCH/broker.log")"
[[ -S /dev/shm$SHM.pids ]] || fail "the pid helper did not start: $(cat "$SCRATCH/helper.log")"
"$BUILD/bin/fracgpu" --run-dir "$SCRATCH/run" tenant create ci --memory 2GiB --gpu 0 >/dev/null ||
  fail "fracgpu tenant create failed"
TENANT_DIR=$SCRATCH/run/pods/ci
[[ -S $TENANT_DIR/broker.sock ]] || fail "no tenant socket in $TENANT_DIR: $(ls -R "$SCRATCH/run")"
POD=("${RUN[@]}" --user 1000:1000 --read-only --cap-drop all --security-opt no-new-privileges
  -v "$TENANT_DIR:/run/fracgpu:ro"
  -v "/dev/shm$SHM:/dev/shm$SHM" -v "/dev/shm$SHM.pids:/dev/shm$SHM.pids"
  -v "$BUILD/fakecuda/libcuda.so.1:/usr/lib/x86_64-linux-gnu/libcuda.so.1:ro"
  -v "$BUILD/bin/fracgpu-alloc-client:/opt/fracgpu-alloc-client:ro"
  -e LD_PRELOAD=/usr/local/lib/libfracgpu.so -e FRACGPU_SOCKET=/run/fracgpu/broker.sock
  -e FAKECUDA_SHM_NAME="$SHM" "$IMAGE")
info=$("${POD[@]}" /opt/fracgpu-alloc-client info 2>&1) || fail "info in the container: $info"
[[ $info == *'"total":2147483648'* ]] || fail "the container does not see its 2 GiB cap: $info"
fill=$("${POD[@]}" /opt/fracgpu-alloc-client fill --chunk 268435456 2>&1) ||
  fail "fill in the container: $fill"
# 2 GiB less the 64 MiB context footprint: 7 chunks of 256 MiB fit, the 8th is refused.
[[ $fill == *'"allocated":1879048192'* ]] || fail "the cap did not hold in the container: $fill"
step "in the container: info $info; fill $fill"
step "ok: $IMAGE built by podman and checked by running it"
