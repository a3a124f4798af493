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
[ -n "${CXX:-}" ] || echo "note: no C++ compiler found; C++ checks skipped"
echo "$n headers checked, $fails failures"
[ "$fails" -eq 0 ]
