#!/bin/sh
# Packs the release binaries the device scripts run, from build directory $1,
# into ${BIN:-.lead}/bin.tar.xz (git-ignored; pass the folder to the device
# tool's carry), in the build directory's layout so their run paths still find
# lib/libkt.so.0; xz because their CUDA code makes them ~4 MB each (20 MB ->
# 1.3 MB) and the carried tree must stay under 64 MiB.
set -eu
src=$1; dst=${BIN:-.lead}
rm -rf "$dst"; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in lib/libkt.so.0 tools/kt-bench/kt-bench tools/kt-convert/kt-convert tools/kt-run/kt-run \
         tests/unit/test_gpu tests/unit/test_gpu_attn tests/unit/test_mover \
         tests/unit/test_moe_kernels tests/unit/test_moe tests/unit/test_llamafile; do
    [ -e "$src/$f" ] || continue
    mkdir -p "$tmp/$(dirname "$f")" && cp -L "$src/$f" "$tmp/$f"
done
mkdir -p "$dst" && tar -C "$tmp" -cJf "$dst/bin.tar.xz" . && du -sh "$dst"
