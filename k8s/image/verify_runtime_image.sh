#!/usr/bin/env bash
# Checks the final stage of k8s/Dockerfile without a container engine, by emulating it: a
# Debian 12 minbase root (what debian:12-slim is made from) gets the Dockerfile's own
# runtime package list installed with apt, and the files of `cmake --install --strip` of a
# build configured with the Dockerfile's cmake options, where the Dockerfile's COPY puts
# them. Then, in a chroot with the root read-only (the manifests' readOnlyRootFilesystem)
# and the image's default PATH: no program has a missing library (ldd), `fracgpu-broker
# --help`, `fracgpu-device-plugin --help` and `fracgpu --help` work and know every flag
# the DaemonSet passes, and the DaemonSet's install-shim command, taken verbatim from
# k8s/deploy/base/daemonset.yaml, installs the shim and ld.so.preload into a host
# directory (twice, as on an upgrade). What it does NOT prove: that `docker build` of the
# Dockerfile succeeds (its build stage is not emulated: the binaries come from the build
# folder given, built on this Debian 12 machine from its source tree with the same
# options), anything about the NVIDIA container toolkit, a GPU, or a real cluster.
# Needs root (debootstrap, chroot, mount namespace) and deb.debian.org (or DEBIAN_MIRROR).
#
#   k8s/image/verify_runtime_image.sh [BUILD_DIR]      (default: build-image)
# Environment: FRACGPU_IMAGE_VERIFY_DIR (work folder, default /tmp/fracgpu-image-verify;
# the debootstrapped base is kept there between runs), DEBIAN_MIRROR, JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
BUILD=$(realpath -m "${1:-build-image}")
WORK=${FRACGPU_IMAGE_VERIFY_DIR:-/tmp/fracgpu-image-verify}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
JOBS=${JOBS:-2}
DOCKERFILE=$REPO/k8s/Dockerfile
DAEMONSET=$REPO/k8s/deploy/base/daemonset.yaml
FACTS="python3 $REPO/k8s/image/image_facts.py"
# Docker's PATH for an image that sets none (debian:12-slim sets none).
IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { printf 'verify-image: %s\n' "$*"; }
fail() { printf 'verify-image: FAIL: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null || fail "needs debootstrap (apt-get install debootstrap)"
python3 -c 'import yaml' 2>/dev/null || fail "needs python3 with PyYAML (python3-yaml)"

# 1. The build folder must be configured as the Dockerfile's build stage configures.
[[ -f $BUILD/CMakeCache.txt ]] || fail "$BUILD is not a configured build folder; configure it with:
  cmake -S . -B $BUILD -G Ninja $($FACTS cmake-options "$DOCKERFILE" | sed 's/^/-D/' | tr '\n' ' ')"
while IFS='=' read -r key want; do
  have=$(sed -n "s/^$key:[A-Z]*=//p" "$BUILD/CMakeCache.txt")
  if [[ $key == FRACGPU_CUDA_INCLUDE_DIR ]]; then
    # The folder differs between machines; what matters is the headers, which the
    # Dockerfile pins by SHA-256.
    for pin in CUDA_H_SHA256:cuda.h CUDA_TYPEDEFS_H_SHA256:cudaTypedefs.h; do
      want_sum=$(sed -n "s/^ARG ${pin%%:*}=//p" "$DOCKERFILE")
      have_sum=$(sha256sum "$have/${pin#*:}" | cut -d' ' -f1)
      [[ $have_sum == "$want_sum" ]] || fail "$have/${pin#*:} is not the header k8s/Dockerfile pins"
    done
  elif [[ $have != "$want" ]]; then
    fail "$BUILD has $key=$have, the Dockerfile builds with $key=$want"
  fi
done < <($FACTS cmake-options "$DOCKERFILE")
say "build folder $BUILD has the Dockerfile's cmake options"

mapfile -t TARGETS < <($FACTS cmake-targets "$DOCKERFILE")
cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}"

# 2. The base: Debian 12 minbase, kept between runs (a few minutes to make).
mkdir -p "$WORK"
if [[ ! -f $WORK/base/.fracgpu-base-done ]]; then
  say "debootstrap --variant=minbase bookworm from $MIRROR"
  rm -rf "$WORK/base"
  debootstrap --variant=minbase bookworm "$WORK/base" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    fail "debootstrap failed, see $WORK/debootstrap.log"
  touch "$WORK/base/.fracgpu-base-done"
fi

# 3. The runtime stage: the base plus the Dockerfile's packages, then its COPY.
ROOT=$WORK/root
rm -rf "$ROOT" && cp -a "$WORK/base" "$ROOT" && rm -f "$ROOT/.fracgpu-base-done"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mapfile -t PACKAGES < <($FACTS runtime-packages "$DOCKERFILE")
[[ ${#PACKAGES[@]} -gt 0 ]] || fail "no runtime packages found in $DOCKERFILE"
say "apt-get install ${PACKAGES[*]}"
unshare -m bash -c '
  set -e
  mount -t proc proc "$1/proc"
  mount --rbind /dev "$1/dev"
  chroot "$1" env -i PATH='"$IMAGE_PATH"' DEBIAN_FRONTEND=noninteractive sh -c "
    apt-get update -q >/dev/null &&
    apt-get install -y -q --no-install-recommends $2 >/dev/null &&
    rm -rf /var/lib/apt/lists/*"
' _ "$ROOT" "${PACKAGES[*]}" || fail "apt-get install of the runtime packages failed"

read -r DESTDIR PREFIX < <($FACTS staging "$DOCKERFILE")
STAGING=$WORK/staging
rm -rf "$STAGING"
DESTDIR=$STAGING cmake --install "$BUILD" --prefix "$PREFIX" --strip >/dev/null
# COPY --from=build /staging/usr/local/ /usr/local/ — checked to be the only COPY from the
# build stage by tests/k8s/check_image.py; here the same folder is copied the same way.
python3 - "$DOCKERFILE" "$DESTDIR" "$PREFIX" <<'EOF' || fail "the final stage's COPY is not the one this script emulates"
import sys; sys.path.insert(0, sys.argv[1].rsplit("/", 1)[0] + "/image")
import image_facts as f
copies = [c for c in f.parse(sys.argv[1])[-1].copies() if c[0] == "build"]
want = [("build", [sys.argv[2] + sys.argv[3] + "/"], sys.argv[3] + "/")]
sys.exit(0 if copies == want else f"{copies} != {want}")
EOF
cp -a "$STAGING$PREFIX/." "$ROOT$PREFIX/"
say "installed into the root: $(cd "$STAGING$PREFIX" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')"

# 4. The checks, in a private mount namespace: the root read-only, /proc, and a host
# folder for the init container's /host/fracgpu.
HOSTDIR=$WORK/host-fracgpu
rm -rf "$HOSTDIR" && mkdir -p "$HOSTDIR" "$ROOT/host/fracgpu"
python3 - "$DAEMONSET" "$WORK" <<'EOF'
# Each container's command, NUL-separated, exactly as the DaemonSet gives it.
import sys, yaml
spec = yaml.safe_load(open(sys.argv[1]))["spec"]["template"]["spec"]
for c in spec.get("initContainers", []) + spec["containers"]:
    with open(f"{sys.argv[2]}/command.{c['name']}", "w") as f:
        f.write("\0".join(c["command"]))
EOF

cat >"$WORK/checks.sh" <<'EOF'
set -eu
ROOT=$1 HOSTDIR=$2 WORK=$3 IMAGE_PATH=$4 STAGED_SHIM=$5
mount --bind "$ROOT" "$ROOT"
mount -o remount,ro,bind "$ROOT"
mount -t proc proc "$ROOT/proc"
mount --rbind /dev "$ROOT/dev"
mount --bind "$HOSTDIR" "$ROOT/host/fracgpu"
in_image() { chroot "$ROOT" env -i PATH="$IMAGE_PATH" HOME=/root "$@"; }
status=0
bad() { echo "verify-image: FAIL: $*" >&2; status=1; }

for prog in /usr/local/bin/fracgpu-broker /usr/local/bin/fracgpu-device-plugin /usr/local/bin/fracgpu; do
  out=$(in_image ldd "$prog" 2>&1) || bad "ldd $prog: $out"
  if grep -q 'not found' <<<"$out"; then bad "$prog lacks libraries: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')"; fi
done
# The shim needs only glibc (libstdc++ is linked in); it must load in the image too.
out=$(in_image ldd /usr/local/lib/libfracgpu.so 2>&1) || bad "ldd libfracgpu.so: $out"
if grep -q 'not found' <<<"$out"; then bad "libfracgpu.so lacks libraries"; fi

# Each daemon's --help, and every flag its DaemonSet container passes must be in it.
for name in broker device-plugin; do
  mapfile -d '' -t cmd <"$WORK/command.$name"
  help=$(in_image "${cmd[0]}" --help 2>&1) || { bad "${cmd[0]} --help failed: $help"; continue; }
  echo "verify-image: ${cmd[0]} --help: $(head -n1 <<<"$help")"
  for arg in "${cmd[@]:1}"; do
    flag=${arg%%=*}
    grep -q -- "$flag" <<<"$help" || bad "${cmd[0]} --help does not list $flag, which the DaemonSet passes"
  done
done
if help=$(in_image fracgpu --help 2>&1); then
  echo "verify-image: fracgpu --help: $(head -n1 <<<"$help")"
else
  bad "fracgpu --help failed: $help"
fi
# The root really is read-only here, as in the pod: a write outside the volume must fail.
if in_image /bin/sh -c 'echo x > /fracgpu-write-test' 2>/dev/null; then bad "the root is writable: the read-only emulation does not hold"; fi

# The install-shim init container, twice (the second run is a node's upgrade, over files
# already there); a read-only root means it may write nowhere but /host/fracgpu.
mapfile -d '' -t cmd <"$WORK/command.install-shim"
for run in 1 2; do
  in_image "${cmd[@]}" || bad "install-shim (run $run) failed"
done
cmp -s "$HOSTDIR/lib/libfracgpu.so" "$STAGED_SHIM" || bad "the host's lib/libfracgpu.so is not the image's shim"
[ "$(stat -c %a "$HOSTDIR/lib/libfracgpu.so")" = 755 ] || bad "lib/libfracgpu.so is not mode 0755"
[ "$(cat "$HOSTDIR/ld.so.preload")" = /usr/local/fracgpu/lib/libfracgpu.so ] || bad "ld.so.preload: $(cat "$HOSTDIR/ld.so.preload")"
[ "$(stat -c %a "$HOSTDIR/ld.so.preload")" = 644 ] || bad "ld.so.preload is not mode 0644"
[ -d "$HOSTDIR/state" ] || bad "install-shim did not make state/"
leftovers=$(find "$HOSTDIR" -name '.*.new')
[ -z "$leftovers" ] || bad "temporary files left: $leftovers"
echo "verify-image: install-shim: $(cd "$HOSTDIR" && find . -type f -printf '%p %m %s\n' | sort | tr '\n' ';')"
exit $status
EOF
unshare -m bash "$WORK/checks.sh" "$ROOT" "$HOSTDIR" "$WORK" "$IMAGE_PATH" "$STAGING$PREFIX/lib/libfracgpu.so" ||
  fail "see the lines above"
say "OK: the final stage of k8s/Dockerfile, emulated in $ROOT, runs what the DaemonSet runs"
