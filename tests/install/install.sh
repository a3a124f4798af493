#!/bin/sh
# Installs this build into a temporary directory, then builds examples/info.c
# out of tree with `pkg-config --cflags --libs libkt` against the *installed*
# files and runs it. Also checks that the private dependencies in libkt.pc
# resolve (`--static`) and that no internal header was installed.
# Usage: install.sh BUILD_DIR SOURCE_DIR   (env CC; SANITIZE = b_sanitize value)
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet > "$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }

pc=$(find "$tmp/root" -name libkt.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: libkt.pc was not installed"; exit 1; }
PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
prefix=$(pkg-config --variable=prefix libkt)
# The files sit under the destdir: point the .pc's prefix there.
pkgconf() { pkg-config --define-variable=prefix="$tmp/root$prefix" "$@"; }
libdir=$(pkgconf --variable=libdir libkt)
includedir=$(pkgconf --variable=includedir libkt)

for f in kt/kt.h kt/core.h kt/hw.h kt/version.h; do
    [ -f "$includedir/$f" ] || { echo "FAIL: $includedir/$f not installed"; exit 1; }
done
if find "$tmp/root" -name 'kt_internal.h' -o -name 'kt_cuda.h' -o -name 'kt_config.h' | grep -q .; then
    echo "FAIL: an internal header was installed"; exit 1
fi
[ -e "$libdir/libkt.so.0" ] || { echo "FAIL: $libdir/libkt.so.0 missing"; exit 1; }
pkgconf --static --libs libkt > /dev/null || {
    echo "FAIL: libkt.pc's private dependencies do not resolve"; exit 1; }

san=
if [ -n "${SANITIZE:-}" ] && [ "$SANITIZE" != none ]; then san="-fsanitize=$SANITIZE"; fi
cflags=$(pkgconf --cflags libkt)
libs=$(pkgconf --libs libkt)
echo "cc $src/examples/info.c $cflags $libs"
# shellcheck disable=SC2086
${CC:-cc} -std=c99 -Wall -Wextra -pedantic -Werror $san "$src/examples/info.c" -o "$tmp/info" \
    $cflags $libs
# Keep the caller's LD_LIBRARY_PATH after ours: dependencies may live there.
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=$("$tmp/info")
echo "$out"
# The program must have loaded the installed library, not the build tree's.
case "$out" in
    "libkt $(pkgconf --modversion libkt)"*) ;;
    *) echo "FAIL: unexpected output from the installed example"; exit 1 ;;
esac
ldd "$tmp/info" | grep -q "$tmp/root" || {
    echo "FAIL: the example did not resolve libkt from the install prefix"; exit 1; }
# An installed kt-run finds the bundled demo model installed next to it
# (PREFIX/share/libkt/models/kimi-k2-demo), whatever the working directory.
ktrun="$tmp/root$prefix/bin/kt-run"
if [ -x "$ktrun" ]; then
    used=$(cd / && env -u KT_DEFAULT_MODEL "$ktrun" -p "The json module can be used to" -n 4 \
           -v --no-stats 2>&1 >/dev/null | grep "^kt-run: " | head -n 1)
    case "$used" in
        "kt-run: $tmp/root$prefix/bin/../share/libkt/models/kimi-k2-demo:"*) ;;
        *) echo "FAIL: the installed kt-run did not use the installed demo model: $used"
           exit 1 ;;
    esac
fi
echo "install test passed"
