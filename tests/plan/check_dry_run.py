#!/usr/bin/env python3
"""kt-run --dry-run against golden files (tests/data/golden/dry_run_*), with
the hardware assumed by flags so that the output is the same on any machine.

usage: check_dry_run.py KT_RUN SOURCE_ROOT [--update]
"""
import os
import subprocess
import sys

HW = ["--hw-ram", "1024G", "--hw-cores", "32", "--hw-numa", "2", "--hw-gpus", "1",
      "--hw-vram", "80G", "--models-dir", "/nonexistent-models"]

# name, arguments, expected exit status, text expected on stderr
CASES = [
    # registry defaults over the assumed hardware: RAWINT4, 100000 tokens, rule 2/3 capped
    ("kimi_k2_thinking", ["--dry-run", "kimi-k2-thinking"] + HW, 0, ""),
    ("kimi_k2_thinking_json", ["--dry-run", "k2-thinking", "--json"] + HW, 0, ""),
    # flags beat the registry and the hardware
    ("kimi_k2_thinking_flags",
     ["--dry-run", "kimi-k2-thinking", "--kt-method", "AMXINT4", "--kt-cpuinfer", "24",
      "--kt-threadpool-count", "1", "--kt-num-gpu-experts", "8",
      "--kt-expert-placement-strategy", "front-loading", "--max-total-tokens", "32768",
      "--chunked-prefill-size", "2048"] + HW, 0, ""),
    # ratio budget, no GPU rule: bytes budget from free VRAM
    ("qwen3_30b_a3b", ["plan", "qwen3-30b-a3b"] + HW, 0, ""),
    # a model directory (no registry entry): method from the checkpoint, frequency placement
    # from a statistics file (kt-bench placement --stats-out over the demo's held-out text)
    ("kimi_k2_demo_dir",
     ["--dry-run", "models/kimi-k2-demo", "--kt-gpu-experts-ratio", "0.25",
      "--kt-expert-stats", "tests/data/golden/kimi_k2_demo_stats.json"] + HW, 0, ""),
    # too little RAM: the plan, then a clear error and exit 1
    ("kimi_k2_small_ram",
     ["--dry-run", "kimi-k2-thinking", "--hw-ram", "125G", "--hw-cores", "16", "--hw-gpus",
      "0", "--models-dir", "/nonexistent-models"], 1,
     "needs 609 GB of RAM, this machine has 125 GB"),
    ("unknown_alias", ["--dry-run", "kimi-k3"] + HW, 1, "unknown model 'kimi-k3' (known: "),
    ("too_many_gpu_experts", ["plan", "qwen3-30b-a3b", "--kt-num-gpu-experts", "200"] + HW, 2,
     "the model has 128 experts per layer"),
    ("two_budgets", ["plan", "m2.1", "--kt-num-gpu-experts", "2", "--kt-gpu-experts-ratio",
                     "0.5"] + HW, 2, "at most one of"),
]


def main():
    kt_run, root = sys.argv[1], sys.argv[2]
    update = "--update" in sys.argv
    gold = os.path.join(root, "tests", "data", "golden")
    failed = 0
    for name, args, want_rc, want_err in CASES:
        p = subprocess.run([os.path.abspath(kt_run)] + args, capture_output=True, text=True,
                           timeout=60, cwd=root)
        path = os.path.join(gold, "dry_run_%s.%s" % (name, "json" if "--json" in args else "txt"))
        if update:
            with open(path, "w") as f:
                f.write(p.stdout)
        with open(path) as f:
            want = f.read()
        ok = p.returncode == want_rc and p.stdout == want and want_err in p.stderr
        if not ok:
            failed += 1
            print("FAIL %s: rc %d (want %d), stderr %r" % (name, p.returncode, want_rc, p.stderr))
            if p.stdout != want:
                import difflib
                sys.stdout.writelines(difflib.unified_diff(
                    want.splitlines(True), p.stdout.splitlines(True), path, "kt-run"))
        else:
            print("ok   %s" % name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
