#!/usr/bin/env bash
# The shim's include layering (docs/design.md, "Layers"), checked on the sources: fails,
# naming each offending line, when a file includes one of a higher layer or spells a
# project include other than from its library's include root. Layers, lowest first:
#   contract  include/fracgpu/   shared by shim and broker       includes: fracgpu/
#   core      interpose/core/    the plain, unit-tested core     includes: fracgpu/ core/ tables/
#   preload   interpose/*        wrappers, exports, runtime,     includes: fracgpu/ core/ tables/
#                                hook bodies                               and its own files
#   tables    interpose/tables/  X-macro tables: data, includable by every layer; includes: tables/
# Every project include is spelled from a root: "fracgpu/x.h" (include/), "core/x.h",
# "tables/x.def" or, in the preload layer, "x.h" (interpose/). ctest runs it as shim_layers.
#   tools/check_layers.sh [SOURCE_ROOT]      (default: the checkout this script is in)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
[[ -d $root/interpose && -d $root/include/fracgpu ]] || { echo "check_layers: no interpose/ and include/fracgpu/ under $root" >&2; exit 2; }
root=$(cd "$root" && pwd)

# Files allowed one same-directory spelling for now, with the reason. Keep this empty.
declare -A exceptions=()

layer_of_file() {  # the layer a source file belongs to
  case $1 in
    include/fracgpu/*) echo contract ;;
    interpose/tables/*) echo tables ;;
    interpose/core/*) echo core ;;
    interpose/*/*) echo unknown ;;
    interpose/*) echo preload ;;
    *) echo unknown ;;
  esac
}

rank() {  # lower layers first; tables are data, includable by all
  case $1 in
    tables) echo 0 ;;
    contract) echo 1 ;;
    core) echo 2 ;;
    preload) echo 3 ;;
    *) echo 9 ;;
  esac
}

layer_of_include() {  # the layer an include names, or "unrooted" when it is not spelled from a root
  local path=$1
  case $path in
    fracgpu/*) [[ -f $root/include/$path ]] && { echo contract; return; } ;;
    core/*) [[ -f $root/interpose/$path ]] && { echo core; return; } ;;
    tables/*) [[ -f $root/interpose/$path ]] && { echo tables; return; } ;;
    */*) ;;
    *) [[ -f $root/interpose/$path ]] && { echo preload; return; } ;;
  esac
  echo unrooted
}

failed=0
checked=0
cd "$root"
while IFS= read -r file; do
  layer=$(layer_of_file "$file")
  if [[ $layer == unknown ]]; then
    echo "check_layers: $file is in no layer (interpose/ has core/ and tables/ only)"
    failed=1
    continue
  fi
  checked=$((checked + 1))
  while IFS=: read -r line path; do
    [[ -n $path ]] || continue
    target=$(layer_of_include "$path")
    if [[ $target == unrooted ]]; then
      # Not under a project root: a system or third-party header unless it exists beside the file.
      [[ -f $(dirname "$file")/$path ]] || continue
      [[ -z ${exceptions["$file:$path"]:-} ]] || continue
      echo "check_layers: $file:$line includes \"$path\": spell it from the include root (core/, tables/, fracgpu/)"
      failed=1
      continue
    fi
    if [[ $layer == tables && $target != tables ]]; then
      echo "check_layers: $file:$line includes \"$path\": tables are data and include only tables/"
      failed=1
    elif [[ $target != tables && $(rank "$target") -gt $(rank "$layer") ]]; then
      echo "check_layers: $file:$line includes \"$path\": the $layer layer may not include the $target layer"
      failed=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$file" |
           sed 's/^\([0-9]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^">]*\)[">].*/\1:\2/')
done < <(find include/fracgpu interpose -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.S' -o -name '*.def' \) | LC_ALL=C sort)

if [[ $failed -ne 0 ]]; then exit 1; fi
echo "check_layers: $checked files ok (contract <- core <- preload; tables are data)"
