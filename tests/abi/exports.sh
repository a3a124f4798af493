#!/bin/sh
# libkt.so exports only kt_ symbols (never kt__ internals), every KT_API
# function declared in the public headers is exported, and the SONAME is
# libkt.so.<ABI major>.
# Usage: exports.sh exports LIBKT_SO EXPECTED_SONAME
#        exports.sh declared LIBKT_SO HEADER...      (every KT_API function exported)
set -u
mode=$1
lib=$2
shift 2
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Names without the @@KT_0.1 version suffix; the version node itself (an
# absolute symbol named KT_0.1) is not a function.
nm -D --defined-only "$lib" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u \
    > "$tmp/exported"
[ -s "$tmp/exported" ] || { echo "FAIL: nm found no exported symbols in $lib"; exit 1; }
stray=$(grep -vE '^kt_' "$tmp/exported"; grep -E '^kt__' "$tmp/exported")
if [ "$mode" = exports ] && [ -n "$stray" ]; then
    echo "FAIL: exported symbols outside the kt_ API (hidden visibility, lib/libkt.map):"
    echo "$stray" | sed 's/^/    /'
    fails=$((fails + 1))
fi

if [ "$mode" = exports ]; then
    soname=$1
    got=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
    if [ "$got" != "$soname" ]; then
        echo "FAIL: SONAME is '$got', expected '$soname'"
        fails=$((fails + 1))
    fi
    echo "$(wc -l < "$tmp/exported") symbols exported, SONAME $got"
    [ "$fails" -eq 0 ]
    exit
fi

# KT_API declarations: the identifier right before the first '(' on the line.
grep -hE '^[[:space:]]*KT_API[[:space:]]' "$@" | sed -E 's/\(.*//; s/.*[^a-z0-9_]([a-z0-9_]+)$/\1/' \
    | sort -u > "$tmp/declared"
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$missing" ]; then
    echo "FAIL: declared KT_API but not exported (not implemented?):"
    echo "$missing" | sed 's/^/    /'
    fails=$((fails + 1))
fi

echo "$(wc -l < "$tmp/exported") exported, $(wc -l < "$tmp/declared") declared"
[ "$fails" -eq 0 ]
