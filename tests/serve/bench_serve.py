#!/usr/bin/env python3
"""Throughput of kt-serve with 1, 8 and 32 concurrent streaming clients.

    bench_serve.py KT_SERVE MODEL_DIR [--tokens N] [--clients 1,8,32] [-- SERVER ARGS...]

Starts kt-serve on a free loopback port; for each concurrency C, C clients
each stream one chat completion of N tokens (greedy; the EOS token is not
suppressed, so usage counts what was really generated). Prints a Markdown
table: aggregate decode throughput, per-client rate and time to first token.
"""
import http.client
import json
import re
import signal
import statistics
import subprocess
import sys
import threading
import time


def stream_one(port, prompt, tokens, out):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": prompt}],
                       "temperature": 0, "max_tokens": tokens, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first, n = None, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            n = ev["usage"]["completion_tokens"]
        for c in ev.get("choices", []):
            if c["delta"].get("content") and first is None:
                first = time.perf_counter() - t0
    out.append((first or 0.0, n, time.perf_counter() - t0))
    conn.close()


def main():
    args = sys.argv[1:]
    server_args = []
    if "--" in args:
        server_args = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    kt_serve, model = args[0], args[1]
    tokens, clients = 128, [1, 8, 32]
    if "--tokens" in args:
        tokens = int(args[args.index("--tokens") + 1])
    if "--clients" in args:
        clients = [int(x) for x in args[args.index("--clients") + 1].split(",")]
    proc = subprocess.Popen([kt_serve, "--model", model, "--port", "0",
                             "--max-running-requests", str(max(clients)), *server_args],
                            stdout=subprocess.PIPE, text=True)
    port = int(re.match(r"listening on port (\d+)", proc.stdout.readline()).group(1))
    try:
        # warm-up: every context the largest run needs exists before timing
        warm = [threading.Thread(target=stream_one, args=(port, "warm up", 4, []))
                for _ in range(max(clients))]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        print("| clients | tokens | wall s | aggregate tok/s | per-client tok/s | TTFT mean ms |")
        print("|---:|---:|---:|---:|---:|---:|")
        for c in clients:
            out = []
            threads = [threading.Thread(target=stream_one,
                                        args=(port, f"Client {i}: explain module {i}.", tokens,
                                              out)) for i in range(c)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            total = sum(n for _, n, _ in out)
            per = statistics.mean(n / max(d - f, 1e-9) for f, n, d in out)
            ttft = statistics.mean(f for f, _, _ in out) * 1e3
            print(f"| {c} | {total} | {wall:.2f} | {total / wall:.1f} | {per:.1f} | "
                  f"{ttft:.0f} |")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
