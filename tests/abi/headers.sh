#!/bin/sh
# Every public header compiles alone, twice included, as C99 and as C++11 with
# -Wall -Wextra -pedantic -Werror (K2), and includes nothing but <stddef.h>,
# <stdint.h> and other kt/ headers.
# Usage: headers.sh SRC_INCLUDE_DIR BUILD_INCLUDE_DIR HEADER...   (env CC, CXX, CLANG)
set -u
src_inc=$1
build_inc=$2
shift 2
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

compile() { # compiler-command language std header
    cmd=$1; lang=$2; std=$3; h=$4
    printf '#include <kt/%s>\n#include <kt/%s>\ntypedef int kt_abi_header_ok;\n' "$h" "$h" \
        > "$tmp/tu"
    extra=
    [ "$lang" = c ] && extra="-Wstrict-prototypes -Wmissing-prototypes"
    # shellcheck disable=SC2086
    if ! $cmd -x "$lang" -std="$std" -Wall -Wextra -pedantic -Werror $extra -fsyntax-only \
            -I"$src_inc" -I"$build_inc" "$tmp/tu" > "$tmp/log" 2>&1; then
        echo "FAIL: kt/$h as $lang ($std) with $cmd:"
        sed 's/^/    /' "$tmp/log"
        fails=$((fails + 1))
    fi
}

n=0
for path in "$@"; do
    h=$(basename "$path")
    n=$((n + 1))
    compile "${CC:-cc}" c c99 "$h"
    if [ -n "${CXX:-}" ]; then compile "$CXX" c++ c++11 "$h"; fi
    if [ -n "${CLANG:-}" ]; then compile "$CLANG" c c99 "$h"; fi
    # Only <stddef.h>, <stdint.h> and kt/ headers.
    bad=$(grep -E '^[[:space:]]*#[[:space:]]*include' "$path" |
          grep -vE '<(stddef|stdint)\.h>|["<]kt/[a-z0-9_]+\.h[">]')
    if [ -n "$bad" ]; then
        echo "FAIL: kt/$h includes more than <stddef.h>, <stdint.h> and kt/ headers:"
        echo "$bad" | sed 's/^/    /'
        fails=$((fails + 1))
    fi
done
# Every KT_X_INIT macro initialises its kt_x without warnings in C and C++
# (missing initialisers, narrowing, wrong order show up here, not in users' builds).
inits=$(grep -ho '#define KT_[A-Z0-9_]*_INIT\b' "$@" | awk '{print $2}' | sort -u)
{
    echo '#include <kt/kt.h>'
    echo 'void kt_abi_inits(void);'
    echo 'void kt_abi_inits(void)'
    echo '{'
    for m in $inits; do
        t=$(echo "${m%_INIT}" | tr 'A-Z' 'a-z')
        echo "    $t v_$t = $m;"
        echo "    (void)v_$t;"
    done
    echo '}'
} > "$tmp/inits.c"
for pair in "${CC:-cc} c c99" "${CXX:-} c++ c++11"; do
    set -- $pair
    [ $# -eq 3 ] || continue
    if ! $1 -x "$2" -std="$3" -Wall -Wextra -pedantic -Werror -fsyntax-only \
            -I"$src_inc" -I"$build_inc" "$tmp/inits.c" > "$tmp/log" 2>&1; then
        echo "FAIL: the *_INIT macros as $2 ($3) (KT_X_INIT must initialise a kt_x):"
        sed 's/^/    /' "$tmp/log"
        fails=$((fails + 1))
    fi
done
echo "$(echo "$inits" | wc -w) *_INIT macros checked"
[ -n "${CXX:-}" ] || echo "note: no C++ compiler found; C++ checks skipped"
echo "$n headers checked, $fails failures"
[ "$fails" -eq 0 ]
