. scripts/device-env.sh; mkdir -p /mnt/kt && mount -t tmpfs -o size=120G tmpfs /mnt/kt; df -h /mnt/kt | tail -1
meson setup build-device --buildtype=release -Dcuda=enabled -Dgpu_sm=90 >/dev/null && ninja -C build-device -j16 tests/unit/test_gpu tools/kt-bench/kt-bench >$OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
cd build-device; export KT_TEST_DATA=$PWD/../tests/data KT_SOURCE_ROOT=$PWD/.. KT_BUILD_ROOT=$PWD LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH
timeout 150 ./tests/unit/test_gpu >$OUT/test_gpu.log 2>&1; echo "test_gpu rc=$?"; grep -E "^\[  (FAILED|PASSED|  OK|ERROR)|device 0|DIFFERENT|Failure|error" $OUT/test_gpu.log | head -40
timeout 240 ./tools/kt-bench/kt-bench e2e --dir /mnt/kt --model qwen3-30b-a3b --json $OUT/e2e.json >$OUT/e2e-qwen3.log 2>&1; echo "qwen3 rc=$?"; cat $OUT/e2e-qwen3.log
timeout 100 ./tools/kt-bench/kt-bench e2e --dir /mnt/kt --model deepseek-v3 --json $OUT/e2e.json >$OUT/e2e-dsv3.log 2>&1; echo "dsv3 rc=$?"; grep -v "^# CPU\|^# ISA" $OUT/e2e-dsv3.log
