#!/usr/bin/env bash
# Quick start on a fresh Debian 12 machine: installs the build dependencies
# (apt-get; sudo when not root), builds libkt and its tools in ./build
# (release), then runs the main job (kt-run on the bundled demo model). Re-running it only rebuilds what changed.
# CUDA is used when nvcc is found (PATH or /usr/local/cuda), skipped otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meson ninja-build pkg-config gcc g++ clang libhwloc-dev libnuma-dev libcjson-dev
          libcmocka-dev libdnnl-dev libpcre2-dev libmicrohttpd-dev libedit-dev)

if command -v apt-get > /dev/null; then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        "${sudo[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
            --no-install-recommends "${missing[@]}"
    fi
else
    echo "quickstart: no apt-get; assuming these are installed: ${packages[*]}" >&2
fi

if [ ! -f build/build.ninja ]; then
    meson setup build --buildtype=release
fi
ninja -C build

# What libkt sees on this machine (CPU, instruction sets, NUMA, GPUs).
./build/tools/kt-run/kt-run doctor
echo

# The main job: greedy generation on the bundled demo model (models/kimi-k2-demo,
# a small trained Kimi-K2-architecture MoE). Its first 48 tokens are the
# continuation transformers predicts (models/kimi-k2-demo/reference.json).
./build/tools/kt-run/kt-run -p "The json module can be used to"
