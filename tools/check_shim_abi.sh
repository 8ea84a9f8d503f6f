#!/usr/bin/env bash
# The shim's glibc floor (docs/design.md, "Portability"), checked on the built library:
# fails, naming each offender, when it requires a glibc symbol version newer than the
# floor (GLIBC_2.17 unless given), any libstdc++/libgcc version (GLIBCXX_, CXXABI_, GCC_:
# those must be linked in statically), or a library other than glibc's own. ctest runs it
# as shim_glibc_floor.
#   tools/check_shim_abi.sh LIBRARY [FLOOR]      e.g. tools/check_shim_abi.sh build/lib/libfracgpu.so 2.17
set -euo pipefail
if [[ $# -lt 1 ]]; then echo "usage: check_shim_abi.sh LIBRARY [FLOOR]" >&2; exit 2; fi
lib=$1
floor=${2:-2.17}
[[ -r $lib ]] || { echo "check_shim_abi: cannot read $lib" >&2; exit 2; }
command -v readelf >/dev/null || { echo "check_shim_abi: readelf (binutils) is needed" >&2; exit 2; }

# Every version the library needs (readelf -V), each with the dynamic symbols that use it.
versions=$(readelf -V -W "$lib" | awk '/Version needs section/ {on = 1; next} /^$/ {on = 0} on && $2 == "Name:" {print $3}' | sort -u)
symbols=$(readelf --dyn-syms -W "$lib" | awk '$7 == "UND" && $8 ~ /@/ {split($8, p, "@"); print p[2], p[1]}')

failed=0
while read -r version; do
  [[ -n $version ]] || continue
  offends=$(awk -v v="$version" -v floor="$floor" 'BEGIN {
      if (v ~ /^(GLIBCXX|CXXABI|GCC)_/) { print "a libstdc++/libgcc version (link it statically)"; exit }
      if (v !~ /^GLIBC_[0-9]+(\.[0-9]+)*$/) { print "not a numbered glibc version"; exit }
      n = split(substr(v, 7), have, "."); split(floor, most, ".")
      for (i = 1; i <= (n > 3 ? n : 3); i++) {
        if (have[i] + 0 > most[i] + 0) { print "newer than GLIBC_" floor; exit }
        if (have[i] + 0 < most[i] + 0) exit
      }
    }')
  if [[ -n $offends ]]; then
    users=$(awk -v v="$version" '$1 == v {printf " %s", $2}' <<<"$symbols")
    echo "check_shim_abi: $lib needs $version, $offends:${users:- (no symbol names it)}"
    failed=1
  fi
done <<<"$versions"

allowed=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 "
needed=$(readelf -d -W "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for library in $needed; do
  if [[ $allowed != *" $library "* && $library != ld-linux* ]]; then
    echo "check_shim_abi: $lib depends on $library (only glibc's libraries are allowed)"
    failed=1
  fi
done

if [[ $failed -ne 0 ]]; then exit 1; fi
newest=$(grep '^GLIBC_[0-9]' <<<"$versions" | sort -V | tail -1)
echo "check_shim_abi: $lib ok: newest version needed ${newest:-none} (floor GLIBC_$floor); needs:" $needed
