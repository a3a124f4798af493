#!/bin/sh
# llama_cpp_h2h.sh LLAMA_SRC WORK KT_BUILD
#
# libkt's LLAMAFILE experts against llama.cpp on the same GGUF files and the
# same threads (issue #9: ">= 1.3x llama.cpp's decode, 3x its prefill").
#
#   LLAMA_SRC  a llama.cpp source tree (e.g. vendor/llama.cpp of the
#              llama-cpp-python sdist from PyPI); nothing of it enters libkt
#   WORK       scratch directory: llama.cpp's build, the models, the logs
#   KT_BUILD   a libkt build directory with tools/kt-bench/kt-bench
#
# Stages (STAGES, default "build model measure"):
#   build    cmake Release, GGML_NATIVE=ON, no CUDA; only llama-bench and
#            llama-quantize, nice -n 19, ninja -j2 (25-60 min on a busy
#            2-core VM). An sdist's vendor/llama.cpp carries a .git file
#            pointing at a submodule directory that is not there, which sends
#            ninja into "build.ninja still dirty" forever: it is renamed
#            .git.dangling.
#            AMX=0 adds -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 to the C and
#            C++ flags: on the 2-core AMX Xeon VM (session 16) the native
#            build's AMX buffer died with SIGILL at ldtilecfg (ggml_backend_amx_
#            mul_mat) at the first matmul; llama16 recompiled only ggml-cpu's
#            ggml-cpu.c/.cpp and amx/*.cpp so (AMX=0 itself not yet run). ggml's
#            AMX buffer takes MUL_MAT only, never the experts' MUL_MAT_ID.
#   model    scripts/llama_cpp_h2h_model.py writes a Qwen3-30B-A3B-shaped
#            file (2048 / 768 / 128 experts / top-8, LAYERS layers, 1
#            attention head, 1024-token vocabulary) in BF16 (9.7 GB for 8
#            layers), llama-quantize --pure makes TYPES from it (every tensor
#            of the type except the F32 norms and router), and a LAYERS/2 copy
#            of each is cut from it (same tensors) so that the difference of
#            the two llama.cpp runs is the cost of LAYERS/2 layers alone.
#            Needs numpy; 15-25 GB of disk; 10-30 min.
#   measure  ROUNDS rounds (default 3), each type in turn, the order of the
#            tools swapped every round: llama-bench -t THREADS -p 512 -n 64
#            on the LAYERS and LAYERS/2 files, kt-bench moe --gguf on the
#            LAYERS file at --tokens 1,512. About 3 min a round at 8 layers,
#            6 at 16 (session 16, 2 threads).
#            Then the summary: llama.cpp converted to kt-bench's units
#            (llama_cpp_h2h_model.py --summarize) and the ratios.
#            With LOCK set (a file), each type's three runs of a round hold
#            `flock -x LOCK` (machines shared with builds and other timings;
#            one hold is 1-4 min at 16 layers on 2 threads).
# Environment: AMX (1), LAYERS (8), TYPES ("Q4_0 Q4_K Q8_0"), ROUNDS (3), THREADS (2),
# LOCK (unset), LB_ARGS (extra llama-bench flags, e.g. "-mmp 0"), PYTHON
# (python3), LOGS (WORK/logs), DROP_CACHES (1: as root, drop the page cache
# before each tool's run: on the 24 GiB VM a kt-bench run right after
# llama-bench's read 16-layer Q8_0 at 0.08-0.10 TFLOP/s against 0.34 after a drop,
# its copies and the file's pages pushing each other out; session 18).
# Output: LOGS/h2h.txt (raw runs and summary).
set -e
SRC=$(cd "$1" && pwd) WORK=$2 KT=$(cd "$3" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
: "${STAGES:=build model measure}" "${LAYERS:=8}" "${TYPES:=Q4_0 Q4_K Q8_0}"
: "${ROUNDS:=3}" "${THREADS:=2}" "${PYTHON:=python3}" "${LOCK:=}" "${LB_ARGS:=}"
HALF=$((LAYERS / 2))
mkdir -p "$WORK/models" "$WORK/logs"
WORK=$(cd "$WORK" && pwd)
BIN=$WORK/build/bin
M=$WORK/models
GGUF_PY=$SRC/gguf-py
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }

if has build; then
    if [ -f "$SRC/.git" ]; then
        gitdir=$(sed -n 's/^gitdir: //p' "$SRC/.git")
        case $gitdir in /*) ;; *) gitdir=$SRC/$gitdir;; esac
        [ -d "$gitdir" ] || mv "$SRC/.git" "$SRC/.git.dangling"
    fi
    noamx=
    [ "${AMX:-1}" != 0 ] || noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    nice -n 19 cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" \
        -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
    nice -n 19 ninja -C "$WORK/build" -j2 llama-bench llama-quantize
fi

if has model; then
    [ -f "$M/h2h-${LAYERS}L-bf16.gguf" ] ||
        nice -n 19 $PYTHON "$HERE/llama_cpp_h2h_model.py" "$M/h2h-${LAYERS}L-bf16.gguf" \
            --layers "$LAYERS" --gguf-py "$GGUF_PY"
    for t in $TYPES; do
        [ -f "$M/h2h-${LAYERS}L-$t.gguf" ] ||
            nice -n 19 "$BIN/llama-quantize" --pure "$M/h2h-${LAYERS}L-bf16.gguf" \
                "$M/h2h-${LAYERS}L-$t.gguf" "$t" "$THREADS"
        [ -f "$M/h2h-${HALF}L-$t.gguf" ] ||
            nice -n 19 $PYTHON "$HERE/llama_cpp_h2h_model.py" --truncate --layers "$HALF" \
                "$M/h2h-${LAYERS}L-$t.gguf" "$M/h2h-${HALF}L-$t.gguf" --gguf-py "$GGUF_PY"
    done
fi

if has measure; then
    L=${LOGS:-$WORK/logs}
    mkdir -p "$L"
    OUT=$L/h2h.txt
    drop() { [ "${DROP_CACHES:-0}" != 1 ] || { sync; echo 1 > /proc/sys/vm/drop_caches; }; }
    lb() { # TYPE LAYERS ROUND
        drop
        echo "### llama-bench $1 $2L round $3 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
        # shellcheck disable=SC2086
        "$BIN/llama-bench" -m "$M/h2h-$2L-$1.gguf" -t "$THREADS" -p 512 -n 64 -r 3 -o json \
            $LB_ARGS > "$L/r$3-$1-$2L.json" || echo "### llama-bench failed (exit $?)"
        cat "$L/r$3-$1-$2L.json"
    }
    kb() { # TYPE ROUND
        drop
        echo "### kt-bench $1 ${LAYERS}L round $2 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
        "$KT/tools/kt-bench/kt-bench" moe --gguf "$M/h2h-${LAYERS}L-$1.gguf" --tokens 1,512 \
            --threads "$THREADS" --no-onednn | tee "$L/r$2-$1-kt.txt"
    }
    [ -z "$LOCK" ] || exec 9>>"$LOCK"
    {
        echo "# llama_cpp_h2h.sh: llama.cpp $SRC, libkt $(git -C "$KT" rev-parse --short HEAD)" \
             "($KT), $(date -u '+%F %H:%M') UTC, $(nproc) CPUs, threads $THREADS"
        grep -m1 'model name' /proc/cpuinfo
        for r in $(seq 1 "$ROUNDS"); do
            for t in $TYPES; do
                [ -z "$LOCK" ] || { flock -x 9; echo "### lock held $(date -u +%H:%M:%S)"; }
                if [ $((r % 2)) = 1 ]; then
                    kb "$t" "$r"; lb "$t" "$LAYERS" "$r"; lb "$t" "$HALF" "$r"
                else
                    lb "$t" "$HALF" "$r"; lb "$t" "$LAYERS" "$r"; kb "$t" "$r"
                fi
                [ -z "$LOCK" ] || { flock -u 9; echo "### lock released $(date -u +%H:%M:%S)"; sleep 20; }
            done
        done
        echo "### summary"
        $PYTHON "$HERE/llama_cpp_h2h_model.py" --summarize "$L" --layers "$LAYERS" \
            --gguf-py "$GGUF_PY" $(for t in $TYPES; do echo "$M/h2h-${LAYERS}L-$t.gguf"; done)
    } 2>&1 | tee "$OUT"
fi
