#!/bin/sh
# Copies the release binaries the device scripts run from build directory $1
# into ${BIN:-.lead} (git-ignored; pass it to the device tool's carry), in the
# build directory's layout so their run paths still find lib/libkt.so.0.
set -eu
src=$1; dst=${BIN:-.lead}
rm -rf "$dst"
for f in lib/libkt.so.0 tools/kt-bench/kt-bench tests/unit/test_gpu tests/unit/test_moe_kernels \
         tests/unit/test_moe tests/unit/test_llamafile; do
    [ -e "$src/$f" ] || continue
    mkdir -p "$dst/$(dirname "$f")" && cp -L "$src/$f" "$dst/$f"
done
du -sh "$dst"
