#!/usr/bin/env bash
# Exports NVIDIA cuda-samples from a local git mirror (the search tool's `fetch` of
# github:NVIDIA/cuda-samples puts one at /work/.mirror/NVIDIA+cuda-samples/repo) into DEST,
# for tests/gpu/capture/run_capture_checks.sh --samples DEST (phase d).
#
#   tools/copy_cuda_samples.sh DEST [--mirror GITDIR] [--rev REV] [--list FILE | --all] [--with-docs]
#
# By default only what the listed samples need is exported: the top-level CMakeLists.txt,
# cmake/, Common/, and each sample directory of the list (tests/gpu/capture/cuda_samples.list,
# "skip" lines left out) without its doc/ folder: about 10 MiB instead of the whole tree's
# 170 MiB, so that it can be carried to the GPU machine (64 MiB in all, with devrun/).
# Suggested DEST: devrun/cuda-samples (devrun/ is git-ignored; carry ["devrun"] brings both).
# --all exports every file; --with-docs keeps doc/ folders. Blobs that the mirror does not hold
# (it may leave its largest files out) are skipped and listed in DEST/MISSING.txt; DEST/SOURCE.txt
# names the mirror and the commit. Files are written one by one with `git cat-file` (git archive
# stops at a missing blob, even outside the paths asked for). DEST is replaced. Exit 0 on success.
set -u
set -o pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
MIRROR="${CUDA_SAMPLES_MIRROR:-/work/.mirror/NVIDIA+cuda-samples/repo}"
REV=HEAD
LIST="$REPO/tests/gpu/capture/cuda_samples.list"
ALL=0 DOCS=0 DEST=""
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    --mirror) MIRROR="${2:?}"; shift 2 ;;
    --rev) REV="${2:?}"; shift 2 ;;
    --list) LIST="${2:?}"; shift 2 ;;
    --all) ALL=1; shift ;;
    --with-docs) DOCS=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "copy_cuda_samples.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) [[ -z "$DEST" ]] || { echo "copy_cuda_samples.sh: one DEST only" >&2; exit 2; }; DEST=$1; shift ;;
  esac
done
[[ -n "$DEST" ]] || { usage >&2; exit 2; }
git -C "$MIRROR" rev-parse --verify -q "$REV^{commit}" > /dev/null \
  || { echo "copy_cuda_samples.sh: $MIRROR has no commit $REV (fetch github:NVIDIA/cuda-samples first)" >&2; exit 1; }
COMMIT="$(git -C "$MIRROR" rev-parse "$REV^{commit}")"

# The paths to export.
PATHS=()
if ((ALL)); then
  PATHS=(.)
else
  [[ -r "$LIST" ]] || { echo "copy_cuda_samples.sh: cannot read $LIST" >&2; exit 2; }
  PATHS=(CMakeLists.txt cmake Common)
  while read -r rel kind _; do
    [[ -z "$rel" || "$rel" == \#* || "$kind" == skip ]] && continue
    PATHS+=("Samples/$rel")
  done < "$LIST"
fi

# Every blob under those paths, less doc/ folders and blobs the mirror lacks.
TMP="$(mktemp -d)" || exit 1
trap 'rm -rf "$TMP"' EXIT
git -C "$MIRROR" ls-tree -r "$COMMIT" -- "${PATHS[@]}" > "$TMP/tree" || exit 1
if ! ((DOCS)); then grep -vE $'\t''(.*/)?doc/' "$TMP/tree" > "$TMP/t2"; mv "$TMP/t2" "$TMP/tree"; fi
awk '$2 == "blob" {print $3}' "$TMP/tree" | git -C "$MIRROR" cat-file --batch-check='%(objectname) %(objecttype)' \
  > "$TMP/check" 2>&1
awk '$2 == "missing" {print $1}' "$TMP/check" | sort -u > "$TMP/missing.sha"
rm -rf "$DEST"
mkdir -p "$DEST" || exit 1
: > "$TMP/missing.txt"
n=0
while IFS=$'\t' read -r meta path; do
  read -r mode type sha <<< "$meta"
  [[ "$type" == blob ]] || continue   # submodules (commit entries) are not exported
  if grep -qx "$sha" "$TMP/missing.sha"; then echo "$path" >> "$TMP/missing.txt"; continue; fi
  mkdir -p "$DEST/$(dirname "$path")"
  if [[ "$mode" == 120000 ]]; then
    ln -sfn "$(git -C "$MIRROR" cat-file blob "$sha")" "$DEST/$path" || exit 1
  else
    git -C "$MIRROR" cat-file blob "$sha" > "$DEST/$path" || { echo "copy_cuda_samples.sh: cannot read $path" >&2; exit 1; }
    [[ "$mode" == 100755 ]] && chmod +x "$DEST/$path"
  fi
  n=$((n + 1))
done < "$TMP/tree"
((n > 0)) || { echo "copy_cuda_samples.sh: nothing to export under ${PATHS[*]}" >&2; exit 1; }
cp "$TMP/missing.txt" "$DEST/MISSING.txt"
printf 'mirror: %s\ncommit: %s\nexported: %s\nfiles: %d\nmissing blobs: %d (MISSING.txt)\n' "$MIRROR" "$COMMIT" \
  "$(if ((ALL)); then echo "the whole tree"; else echo "${#PATHS[@]} paths from $LIST"; fi)" "$n" \
  "$(wc -l < "$TMP/missing.txt")" > "$DEST/SOURCE.txt"
echo "copy_cuda_samples.sh: $n files of $COMMIT into $DEST ($(du -sh "$DEST" | cut -f1)); $(wc -l < "$TMP/missing.txt") missing blobs skipped"
