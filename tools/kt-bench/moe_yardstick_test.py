#!/usr/bin/env python3
"""kt-bench moe's oneDNN yardsticks on a tiny shape: the AMXINT8 / AMXINT4 prefill
rows carry a oneDNN INT8 (u8 x s8 -> s32) figure in the summary and the JSON, the
BF16 row none; a BF16 figure, or the reason there is none, on every prefill row;
the rows and the JSON name the oneDNN implementations the figures came from;
bad --onednn-types / --onednn-pack-m values fail with status 2.
Usage: moe_yardstick_test.py KT_BENCH DIR"""
import json
import os
import subprocess
import sys

kt_bench, out_dir = sys.argv[1], sys.argv[2]
json_path = os.path.join(out_dir, "moe-yardstick-test.json")


def run(*args):
    return subprocess.run([kt_bench, "moe", *args], capture_output=True, text=True, timeout=240)


res = run("--shape", "256,128,16,4", "--method", "BF16,AMXINT8,AMXINT4", "--tokens", "3,40",
          "--layers", "2", "--min-time", "0.01", "--stream-size", "64", "--json", json_path)
assert res.returncode == 0, res.stdout + res.stderr
out = res.stdout
assert "oneDNN INT8 matmul per expert (u8 x s8 -> s32" in out, out
summary = out[out.index("\nsummary"):]
for method in ("AMXINT8", "AMXINT4"):
    line = next(l for l in summary.splitlines() if l.startswith(f"prefill T=40 {method}:"))
    assert " x oneDNN INT8 (" in line, line
    # the row names every implementation oneDNN picked over the timed m's
    impl = line.split(" x oneDNN INT8 (", 1)[1].split(")", 1)[0].split(", ", 1)[1]
    assert impl and impl != "?" and ":" in impl, line
    assert f"  implementations: {impl}" in out, out
    assert " x oneDNN BF16 (" in line or "(no oneDNN BF16: " in line, line
bf16 = next(l for l in summary.splitlines() if l.startswith("prefill T=40 BF16:"))
assert "INT8" not in bf16, bf16
assert " x oneDNN BF16 (" in bf16 or "(no oneDNN BF16: " in bf16, bf16

with open(json_path) as f:
    rows = json.load(f)["rows"]
assert len(rows) == 6, rows
for r in rows:
    assert "onednn_int8_tops" in r, r
    amx_prefill = r["method"] in ("AMXINT8", "AMXINT4") and r["phase"] == "prefill"
    if amx_prefill:
        assert r["onednn_int8_tops"] > 0, r
        assert ":" in r["onednn_int8_impl"], r
    else:
        assert r["onednn_int8_tops"] == 0, r
        assert r["onednn_int8_impl"] == "", r
    assert (r["onednn_bf16_impl"] != "") == (r["onednn_tflops"] > 0), r

# the packed layout chosen for another m, and plain weights: the INT8 yardstick runs
for opt in (("--onednn-pack-m", "8"), ("--onednn-weights", "plain")):
    res = run("--shape", "256,128,16,4", "--method", "AMXINT8", "--tokens", "40", "--layers",
              "2", "--min-time", "0.01", "--onednn-types", "int8", *opt)
    assert res.returncode == 0, res.stdout + res.stderr
    want = "weights packed for m 8" if opt[1] == "8" else "weights plain"
    assert want in res.stdout, res.stdout
    assert " x oneDNN INT8 (" in res.stdout, res.stdout

# BF16 alone: the INT8 yardstick serves no row, so it does not run
res = run("--shape", "256,128,16,4", "--method", "BF16", "--tokens", "40", "--layers", "2",
          "--min-time", "0.01", "--onednn-types", "int8")
assert res.returncode == 0, res.stdout + res.stderr
assert "oneDNN INT8 matmul" not in res.stdout, res.stdout
assert "(no oneDNN BF16: not in --onednn-types)" in res.stdout, res.stdout

for flag, bad in (("--onednn-types", "fp8"), ("--onednn-types", ""),
                  ("--onednn-types", "int8,q4"), ("--onednn-pack-m", "0")):
    res = run(flag, bad)
    assert res.returncode == 2, (flag, bad, res.returncode, res.stderr)
    assert flag in res.stderr, res.stderr
print("ok")
