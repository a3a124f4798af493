#!/usr/bin/env python3
"""kt-run tokenize: the demo models' prompt gives transformers' ids
(reference.safetensors), --decode prints their greedy text exactly, --pieces
is JSON, '-' reads stdin, and errors exit 1 (bad model) or 2 (bad usage).
Usage: tokenize_test.py KT_RUN TEST_DATA"""
import json
import os
import struct
import subprocess
import sys

kt_run, data = sys.argv[1], sys.argv[2]


def run(*args, stdin=None):
    return subprocess.run([kt_run, "tokenize", *args], capture_output=True, timeout=60,
                          input=stdin)


def tensor_i32(path, name):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    t = json.loads(blob[8:8 + n])[name]
    a, b = t["data_offsets"]
    raw = blob[8 + n + a:8 + n + b]
    return list(struct.unpack("<%di" % (len(raw) // 4), raw))


for name in ("kimi_k2_demo", "qwen3_moe_demo"):
    model = os.path.join(data, "models", name)
    ref = json.load(open(os.path.join(model, "reference.json"), encoding="utf-8"))
    want = tensor_i32(os.path.join(model, "reference.safetensors"), "prompt_ids")
    res = run(model, ref["prompt"])
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == want, (res.stdout, want)
    res = run(model, "-", stdin=ref["prompt"].encode())
    assert json.loads(res.stdout) == want, res.stdout
    ids = ",".join(str(i) for i in ref["greedy_ids"])
    res = run(model, "--decode", ids)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode("utf-8") == ref["greedy_text"], res.stdout
    res = run(model, ref["prompt"], "--pieces")
    pieces = json.loads(res.stdout)
    assert [p["id"] for p in pieces] == want and all("piece" in p for p in pieces), pieces

res = run(os.path.join(data, "no-such-model"), "x")
assert res.returncode == 1 and b"no-such-model" in res.stderr, res
res = run()
assert res.returncode == 2, res
res = run(os.path.join(data, "models", "kimi_k2_demo"), "--bogus")
assert res.returncode == 2, res
print("ok")
