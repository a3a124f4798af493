#!/bin/sh
# The hybrid decode (CPU experts + GPU) on the device machine (H200 + AMX
# Xeon), from release binaries built here (sm_90) and carried in $BIN
# (git-ignored, packed by scripts/device-pack.sh; default .gpu10), so nothing
# compiles there:   BIN=.gpu10 sh scripts/device-pack.sh B; then on the device,
# with .devdeps and $BIN carried:   sh scripts/device-hybrid.sh
# Stages ($STAGES, in order; default "base phases profile extra"), all on the
# Qwen3-30B-A3B shape at $LAYERS layers (default 12) and $HB % (default 50) of
# the experts on the GPU, checkpoints kept between runs:
#   base     KT_GPU_TRACE=1 rows (CPU experts per layer: wake, run, notify,
#            the GPU's gap) with the short warm-up (--gen 16) and the long one
#            (--gen 32 --warmup 2048), alternating
#   ab       the long row once for each value of $AB_VAR (default
#            KT_GPU_HYBRID) in $AB_VALS (default "gated hostfn gated hostfn"),
#            then with --threads $AB_THREADS (default 16: every core a worker)
#            for each value in $AB_THREADS_VALS (default "gated hostfn")
#   bf16     the long row with the CPU experts on BF16 activations (--moe-bf16)
#   phases   a KT_GPU_TRACE=2 phase profile (device time per phase)
#   profile  a KT_MOE_PROFILE=1 row of mostly decode calls
#   test     the whole test_gpu (every fixture family against transformers)
#   race     compute-sanitizer racecheck over test_gpu one test at a time, only
#            libkt's kernels instrumented (SAN_ARGS, default --kernel-name
#            kns=k_), each cut at $RACE_LIMIT s (default 40), for at most
#            $RACE_TIME s (default 80)
#   isolate  racecheck of test_qwen3_moe (as race) once with each environment
#            in $ISOLATE (default "KT_GPU_HYBRID=hostfn KT_GPU_GEMV=0"): which
#            of the flag kernels and the 04:37 GEMV kernels the sanitizer's
#            06:30 internal error in the 0 % case follows ($OUT/isolate.log)
#   deep     the long row at 48 layers for each value of KT_GPU_HYBRID in
#            $DEEP_VALS (default "gated hostfn")
#   prefill  48 layers, KT_GPU_TRACE=1: hybrid prefill 2048 at 50 and 0 %, then
#            layerwise at 50 and 0 % for 2048 and 8192 tokens, every CPU-resident
#            expert copied (--layerwise 64) and auto (after the hybrid warm-up),
#            pageable copies (KT_GPU_LW_COPY=pageable) at 50 %, one 8192-token
#            chunk (--batch 8192) at 50 %
#   lwab     48 layers, KT_GPU_TRACE=1: layerwise prefill (--layerwise 64) with
#            the staged copies (the default) at 50 and 0 % for 2048 and 8192
#            tokens, then with the driver's pageable copies at 50 % (2048)
#   lwtest   test_gpu's test_layerwise and test_grouped_device
#   isopar   test_qwen3_moe under racecheck, the variants in $ISOPAR (each
#            "label:ENV=V,...:sanitizer args", at most ~6) as processes at once,
#            each cut at $ISO_LIMIT s (default 75); $OUT/isopar-LABEL.log
#   extra    kt-bench e2e with $EXTRA (default: DeepSeek-V3 INT4 rows)
#   table    #10's evidence table in one kt-bench e2e process (one set of
#            yardsticks): 48-layer Qwen3-30B-A3B, then the 3-layer DeepSeek-V3
#            shape with FP8 and with INT4 experts, GPU experts 100 / 50 / 25 / 0 %,
#            prompts 2048 and 8192 (--warmup 2048, --gen 32, layerwise auto),
#            no trace; checkpoints written and removed one model at a time;
#            $OUT/table.json
#   decab    48-layer Qwen3-30B-A3B at $HB % (default 50), decode after a
#            512-token prompt (--gen 48), KT_GPU_TRACE=1: the CPU experts of
#            one-token steps on BF16X2 and on BF16 activations alternating
#            (KT_GPU_DECODE_ACT in $DEC_VALS, default "bf16x2 bf16 bf16x2 bf16"),
#            then with every core a worker (--threads 16) for each value in
#            $DEC16_VALS (default "bf16 bf16x2")
#   demo     the trained demo models: the qwen3_moe one's weights unpacked
#            from $BIN/qwen3demo (xz; not in the repository) into
#            tests/data/models/qwen3_moe_demo, test_gpu's test_demo_model,
#            kt-run's greedy text with --device cpu and 0 / 50 / 100 % of the
#            experts on the GPU, and 256 tokens at 50 % with --gpu-rebalance
#            0 and 8 alternating; $OUT/demo.log
#   bf16test the whole test_gpu with KT_GPU_DECODE_ACT=bf16 (the decode's CPU
#            experts on BF16 activations), started in the background so that
#            it runs beside racepar; waited for at the end
#            ($OUT/test_gpu_bf16.log)
#   racepar  racecheck over every test of test_gpu at once, $RACE_PAR processes
#            (default 12) at a time, each cut at what is left of $LIMIT, with
#            $RACE_ENV (default KT_GPU_GEMM_MIN_TOKENS=100000: no cuBLAS
#            product, whose calls the sanitizer's internal error follows) and
#            SAN_ARGS (default --kernel-name kns=k_); $OUT/racepar.log
# Each stage starts only while $LIMIT seconds (default 170) are not spent.
# Logs in $OUT (hybrid.log, test_gpu.log, racecheck.log).
. scripts/device-env.sh
OUT=${OUT:-$PWD/device-out}; BIN=${BIN:-.gpu10}; LIMIT=${LIMIT:-170}
T0=$(date +%s)
left() { echo $((LIMIT - ($(date +%s) - T0))); }
mkdir -p "$OUT" && kt_device_tmpfs 100G && kt_device_bin "$BIN" || exit 1
K="$BIN/tools/kt-bench/kt-bench"
log=$OUT/hybrid.log
{ date -u +%T; uptime; lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node)'; } \
    >"$log"
E="$K e2e --dir /mnt/kt --keep --model qwen3-30b-a3b --layers ${LAYERS:-12} --prompts 2048
  --no-cpu-row --budgets ${HB:-50}"
L="--gen 32 --warmup 2048"
# row LABEL ENV... -- ARGS...: one kt-bench e2e process, its output in the log
row() {
    [ "$(left)" -gt 25 ] || { echo "# $1: no time left" >>"$log"; return 1; }
    lab=$1; shift; echo "# $lab ($(date -u +%T)): $*" >>"$log"
    env "$@" 2>&1 | grep -v "^# CPU\|^# ISA" >>"$log"
}
for stage in ${STAGES:-base phases profile extra}; do
    case $stage in
    base)
        row short KT_GPU_TRACE=1 timeout 90 $E --gen 16
        row long KT_GPU_TRACE=1 timeout 40 $E $L
        row short KT_GPU_TRACE=1 timeout 40 $E --gen 16
        row long KT_GPU_TRACE=1 timeout 40 $E $L ;;
    ab)
        for v in ${AB_VALS:-gated hostfn gated hostfn}; do
            row "${AB_VAR:-KT_GPU_HYBRID}=$v" KT_GPU_TRACE=1 "${AB_VAR:-KT_GPU_HYBRID}=$v" \
                timeout 45 $E $L
        done
        for v in ${AB_THREADS_VALS:-gated hostfn}; do
            row "threads ${AB_THREADS:-16} ${AB_VAR:-KT_GPU_HYBRID}=$v" KT_GPU_TRACE=1 \
                "${AB_VAR:-KT_GPU_HYBRID}=$v" timeout 40 $E $L --threads "${AB_THREADS:-16}"
        done ;;
    bf16) row bf16 KT_GPU_TRACE=1 timeout 40 $E $L --moe-bf16 ;;
    phases) row phases KT_GPU_TRACE=2 timeout 40 $E --gen 16 ;;
    profile) row profile KT_MOE_PROFILE=1 timeout 40 $E --gen 64 --prompts 32 ;;
    test)
        [ "$(left)" -gt 60 ] || continue
        timeout $(($(left) - 20)) "$BIN/tests/unit/test_gpu" >"$OUT/test_gpu.log" 2>&1
        echo "# test_gpu rc=$? ($(date -u +%T))" >>"$log"
        grep -E "^\[  (PASSED|FAILED)|^\[  +FAILED|Failure|DIFFERENT" "$OUT/test_gpu.log" \
            >>"$log" ;;
    race)
        SAN_ARGS=${SAN_ARGS:---kernel-name kns=k_} kt_device_sanitize racecheck \
            "$BIN/tests/unit/test_gpu" "${RACE_LIMIT:-40}" \
            $(($(date +%s) + ${RACE_TIME:-80})) ;;
    isolate)
        for e in ${ISOLATE:-KT_GPU_HYBRID=hostfn KT_GPU_GEMV=0}; do
            [ "$(left)" -gt 45 ] || break
            echo "== $e ($(date -u +%T))" >>"$OUT/isolate.log"
            env "$e" KT_TEST_FILTER=test_qwen3_moe timeout 60 compute-sanitizer --tool racecheck \
                ${SAN_ARGS:---kernel-name kns=k_} "$BIN/tests/unit/test_gpu" \
                >"$OUT/san.tmp" 2>&1
            echo "rc=$?" >>"$OUT/isolate.log"
            kt_summary "$OUT/san.tmp" >>"$OUT/isolate.log"
            grep -m3 -A3 "Internal\|hazard\|Error" "$OUT/san.tmp" >>"$OUT/isolate.log"
        done
        rm -f "$OUT/san.tmp" ;;
    deep)
        rm -rf /mnt/kt/kt-e2e-qwen3-30b-a3b-${LAYERS:-12}
        for v in ${DEEP_VALS:-gated hostfn}; do
            row "48 layers KT_GPU_HYBRID=$v" KT_GPU_TRACE=1 KT_GPU_HYBRID=$v \
                timeout $(($(left) - 5)) $K e2e --dir /mnt/kt --keep --model qwen3-30b-a3b \
                --prompts 2048 --no-cpu-row --budgets ${HB:-50} $L
        done ;;
    prefill)
        D="$K e2e --dir /mnt/kt --keep --model qwen3-30b-a3b --no-cpu-row --gen 8"
        row "hybrid 48" KT_GPU_TRACE=1 timeout 90 $D --budgets 50,0 --prompts 2048 \
            --warmup 2048
        row "layerwise 48" KT_GPU_TRACE=1 timeout 60 $D --budgets 50,0 --prompts 2048,8192 \
            --warmup 2048 --layerwise 64
        row "layerwise auto 48" KT_GPU_TRACE=1 timeout 60 $D --budgets 50,0 \
            --prompts 2048,8192 --warmup 2048 --layerwise auto
        row "layerwise pageable" KT_GPU_TRACE=1 KT_GPU_LW_COPY=pageable timeout 30 $D --budgets 50 \
            --prompts 2048 --layerwise 64
        row "layerwise batch 8192" KT_GPU_TRACE=1 timeout 30 $D --budgets 50 \
            --prompts 8192 --batch 8192 --layerwise 64 ;;
    lwab)
        D="$K e2e --dir /mnt/kt --keep --model qwen3-30b-a3b --no-cpu-row --gen 8"
        row "layerwise staged 48" KT_GPU_TRACE=1 timeout 70 $D --budgets 50,0 \
            --prompts 2048,8192 --warmup 2048 --layerwise 64
        row "layerwise pageable 48" KT_GPU_TRACE=1 KT_GPU_LW_COPY=pageable timeout 30 $D \
            --budgets 50 --prompts 2048 --layerwise 64 ;;
    lwtest)
        for t in test_layerwise test_grouped_device; do
            KT_TEST_FILTER=$t timeout 60 "$BIN/tests/unit/test_gpu" >>"$OUT/lwtest.log" 2>&1
            echo "# $t rc=$? ($(date -u +%T))" >>"$log"
        done
        grep -E "^\[  (PASSED|FAILED)|experts on the GPU|Failure|ERROR" "$OUT/lwtest.log" \
            >>"$log" ;;
    isopar)
        [ "$(left)" -gt 40 ] || continue
        pids=
        for v in $ISOPAR; do
            lab=${v%%:*}; rest=${v#*:}; envs=$(echo "${rest%%:*}" | tr , ' ')
            san=$(echo "${rest#*:}" | tr , ' ')
            (env $envs KT_TEST_FILTER=test_qwen3_moe timeout "${ISO_LIMIT:-75}" \
                compute-sanitizer --tool racecheck $san "$BIN/tests/unit/test_gpu" \
                >"$OUT/isopar-$lab.log" 2>&1; echo "rc=$?" >>"$OUT/isopar-$lab.log") &
            pids="$pids $!"
        done
        wait $pids
        for v in $ISOPAR; do
            lab=${v%%:*}
            echo "== $v" >>"$OUT/isolate.log"
            grep -E "experts on the GPU|Internal|hazard|SUMMARY|^rc=|PASSED|FAILED" \
                "$OUT/isopar-$lab.log" | head -12 >>"$OUT/isolate.log"
        done ;;
    table)
        lim=$(($(left) - 40))
        [ "$lim" -gt 60 ] && row table timeout $((lim + 40)) $K e2e --dir /mnt/kt --no-cpu-row \
            --layerwise auto --warmup 2048 --gen 32 --budgets 100,50,25,0 --prompts 2048,8192 \
            --model qwen3-30b-a3b --model deepseek-v3 --model deepseek-v3-int4 \
            --time-limit "$lim" --json "$OUT/table.json" ;;
    decab)
        D="$K e2e --dir /mnt/kt --keep --model qwen3-30b-a3b --no-cpu-row --budgets ${HB:-50}
          --prompts 512 --warmup 16 --gen 48"
        for v in ${DEC_VALS:-bf16x2 bf16 bf16x2 bf16}; do
            row "KT_GPU_DECODE_ACT=$v" KT_GPU_TRACE=1 KT_GPU_DECODE_ACT=$v timeout 70 $D
        done
        for v in ${DEC16_VALS:-bf16 bf16x2}; do
            row "threads 16 KT_GPU_DECODE_ACT=$v" KT_GPU_TRACE=1 KT_GPU_DECODE_ACT=$v \
                timeout 40 $D --threads 16
        done
        rm -rf /mnt/kt/kt-e2e-qwen3-30b-a3b-48 ;;
    demo)
        q=tests/data/models/qwen3_moe_demo
        if [ -d "$BIN/qwen3demo" ]; then
            cp "$BIN"/qwen3demo/*.json "$q"/ &&
                for f in "$BIN"/qwen3demo/*.xz; do xz -dc "$f" >"$q/$(basename "$f" .xz)"; done
        fi
        KT_TEST_FILTER=test_demo_model timeout 90 "$BIN/tests/unit/test_gpu" >"$OUT/demo.log" 2>&1
        echo "# test_demo_model rc=$? ($(date -u +%T))" >>"$log"
        R="$BIN/tools/kt-run/kt-run generate -p \"The json module can be used to\" --print-ids"
        for m in models/kimi-k2-demo $q; do
            [ -f "$m/model-00001-of-00002.safetensors" ] || continue
            for d in "--device cpu" "--gpu-experts 0" "--gpu-experts 0.5" "--gpu-experts 1" \
                     "--gpu-experts 0.5 --gpu-rebalance 8 -n 256" "--gpu-experts 0.5 -n 256" \
                     "--gpu-experts 0.5 --gpu-rebalance 8 -n 256" "--gpu-experts 0.5 -n 256"; do
                echo "## $m $d" >>"$OUT/demo.log"
                eval timeout 30 $R --model "$m" -n 48 $d >>"$OUT/demo.log" 2>&1
            done
        done
        grep -E "^##|^  |tok/s|moved|PASSED|FAILED" "$OUT/demo.log" >>"$log" ;;
    bf16test)
        [ "$(left)" -gt 40 ] || continue
        (KT_GPU_DECODE_ACT=bf16 timeout $(($(left) - 10)) "$BIN/tests/unit/test_gpu" \
            >"$OUT/test_gpu_bf16.log" 2>&1; echo "# rc=$?" >>"$OUT/test_gpu_bf16.log") &
        bgpid=$! ;;
    racepar)
        [ "$(left)" -gt 40 ] || continue
        : >"$OUT/racepar.log"
        tests=$(grep -o 'cmocka_unit_test(test_[a-z0-9_]*)' tests/unit/test_gpu.c |
            sed 's/.*(\(.*\))/\1/')
        # every process cut at the same deadline, however late it started
        export RACE_END=$(($(date +%s) + $(left) - 15)) RACE_BIN=$BIN RACE_OUT=$OUT
        export RACE_ENVS="${RACE_ENV:-KT_GPU_GEMM_MIN_TOKENS=100000}"
        export RACE_SAN="${SAN_ARGS:---kernel-name kns=k_}"
        echo "$tests" | xargs -P "${RACE_PAR:-12}" -I{} sh -c 't=$((RACE_END - $(date +%s)));
            if [ $t -gt 5 ]; then env $RACE_ENVS KT_TEST_FILTER={} timeout $t \
                compute-sanitizer --tool racecheck $RACE_SAN $RACE_BIN/tests/unit/test_gpu \
                >$RACE_OUT/race-{}.tmp 2>&1; echo "== {}: rc=$?, $t s left at its start" \
                >$RACE_OUT/race-{}.sum; else echo "== {}: not started" >$RACE_OUT/race-{}.sum; fi'
        for t in $tests; do
            cat "$OUT/race-$t.sum" >>"$OUT/racepar.log"
            [ -f "$OUT/race-$t.tmp" ] && grep -E \
                "experts on the GPU|Internal|hazard|SUMMARY|PASSED|FAILED|ERROR|Error" \
                "$OUT/race-$t.tmp" | head -60 >>"$OUT/racepar.log"
        done
        rm -f "$OUT"/race-*.tmp "$OUT"/race-*.sum ;;
    extra)
        lim=$(($(left) - 30))
        [ "$lim" -gt 20 ] && row extra timeout $((lim + 20)) $K e2e --dir /mnt/kt \
            --no-cpu-row --time-limit "$lim" \
            ${EXTRA:---model deepseek-v3-int4 --gen 16 --budgets 100,50,25,0} ;;
    esac
done
if [ -n "${bgpid:-}" ]; then
    wait "$bgpid"
    grep -E "^\[  (PASSED|FAILED)|^\[  +FAILED|Failure|DIFFERENT|^# rc" "$OUT/test_gpu_bf16.log" \
        | sed 's/^/bf16test: /' >>"$log"
fi
date -u +%T >>"$log"
grep -E "^# [a-zA-Z_=0-9 ]+ \(|^qwen3|^deepseek|trace|phases|moe prof|test_|PASSED|FAIL|^##|^bf16" \
    "$log" | cut -c1-420
[ -f "$OUT/racecheck.log" ] && grep "^==" "$OUT/racecheck.log"
[ -f "$OUT/isolate.log" ] && cat "$OUT/isolate.log"
[ -f "$OUT/racepar.log" ] && grep -E "^==|SUMMARY|Internal" "$OUT/racepar.log"
