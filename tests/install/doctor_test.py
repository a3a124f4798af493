#!/usr/bin/env python3
"""kt-run doctor: text and JSON agree with each other and with the kernel's
view of this process (affinity), the recommendations follow their rule, and
bad options fail with exit status 2. Usage: doctor_test.py KT_RUN"""
import json
import os
import subprocess
import sys

kt_run = sys.argv[1]


def run(*args):
    return subprocess.run([kt_run, *args], capture_output=True, text=True, timeout=60)


text = run("doctor")
assert text.returncode == 0, text.stderr
for word in ("CPU", "ISA", "NUMA", "GPUs", "--kt-cpuinfer", "--kt-threadpool-count"):
    assert word in text.stdout, f"'{word}' missing from kt-run doctor:\n{text.stdout}"

res = run("doctor", "--json")
assert res.returncode == 0, res.stderr
doc = json.loads(res.stdout)
cpu = doc["cpu"]
assert cpu["logical_cpus"] == len(os.sched_getaffinity(0)), cpu
assert 1 <= cpu["physical_cores"] <= cpu["logical_cpus"], cpu
assert set(cpu["isa"]) <= set(cpu["isa_cpuid"]), cpu
nodes = doc["numa_nodes"]
assert len(nodes) >= 1
assert sum(n["physical_cores"] for n in nodes) == cpu["physical_cores"]
assert sorted(c for n in nodes for c in n["cpus"]) == sorted(os.sched_getaffinity(0))
assert doc["memory"]["total_bytes"] > 0
gpus = doc["gpus"]
if not gpus:
    assert doc["gpu_note"], "0 GPUs must come with a reason"
if "cuda" not in doc["libkt"]["features"]:
    assert doc["gpu_note"] == "built without CUDA" and not gpus
rec = doc["recommended"]
assert rec["kt_cpuinfer"] == max(1, cpu["physical_cores"] - len(gpus)), rec
assert rec["kt_threadpool_count"] == max(1, sum(1 for n in nodes if n["physical_cores"] > 0))
assert set(doc["methods"]) == {"BF16", "FP8", "RAWINT4", "AMXINT8", "AMXINT4", "LLAMAFILE"}
for name, m in doc["methods"].items():
    assert m["variant"] in (None, "scalar", "avx2", "avx512", "amx"), (name, m)

# KT_ISA_MAX=scalar: no instruction set, every built method runs its scalar kernels.
env = dict(os.environ, KT_ISA_MAX="scalar")
capped = json.loads(subprocess.run([kt_run, "doctor", "--json"], capture_output=True,
                                   text=True, env=env, timeout=60, check=True).stdout)
assert capped["cpu"]["isa"] == [] and capped["cpu"]["isa_max"] == "scalar"
for name, m in capped["methods"].items():
    assert m["variant"] in (None, "scalar"), (name, m)

assert run("doctor", "--help").returncode == 0
assert run("doctor", "--no-such-option").returncode == 2
print("kt-run doctor ok:", cpu["model"], cpu["physical_cores"], "cores,", len(gpus), "GPUs")
