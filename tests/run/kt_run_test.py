#!/usr/bin/env python3
"""kt-run one-shot generation (the default command) end to end.

Groups (argv[1]):
  kimi    greedy `kt-run -p PROMPT` with no model argument (the bundled
          models/kimi-k2-demo) prints reference.json's greedy_text (what
          transformers predicted), in fast and f32 precision; stdin prompt.
  qwen3   the same for qwen3_moe_demo (weights only in /work/shared/models or
          $KT_QWEN3_DEMO: exit 77 when absent; the expected text comes from
          tests/data/models/qwen3_moe_demo/reference.json).
  sample  same seed, same output (temperature, top-k, top-p, min-p, penalties);
          another seed differs; greedy ignores the seed.
  chat    --chat/--system render the model's own template exactly as
          `kt-run template` does, and that prompt is what gets evaluated;
          a template whose generation prompt opens <think> sends the output
          to the reasoning stream (stderr, between [thinking] lines).
  errors  bad flags and paths: exit 2 (usage) or 1 (runtime) with a clear message.
Usage: kt_run_test.py GROUP KT_RUN SOURCE_ROOT"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

group, kt_run, root = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
data = os.path.join(root, "tests", "data", "models")
kimi_dir = os.path.join(root, "models", "kimi-k2-demo")
failures = []


def run(*args, stdin=None, env_extra=None, cwd=None):
    env = dict(os.environ)
    env.pop("KT_DEFAULT_MODEL", None)
    env.update(env_extra or {})
    p = subprocess.run([kt_run, *args], capture_output=True, timeout=300,
                       input=stdin.encode() if stdin is not None else None, env=env,
                       cwd=cwd or tempfile.gettempdir())
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8",
                                                                              "replace")


def check(cond, what, detail=""):
    if not cond:
        failures.append(what)
        print("FAIL: %s\n%s" % (what, detail), file=sys.stderr)
    else:
        print("ok: %s" % what)


def reference(name):
    with open(os.path.join(data, name, "reference.json")) as f:
        return json.load(f)


def greedy_case(label, ref, model_args, extra=()):
    n = str(len(ref["greedy_ids"]))
    rc, out, err = run(*model_args, "-p", ref["prompt"], "-n", n, *extra)
    check(rc == 0 and out == ref["greedy_text"] + "\n",
          "%s: greedy text is reference.json's greedy_text" % label,
          "rc=%d\nstdout=%r\nwant  =%r\nstderr=%s" % (rc, out, ref["greedy_text"] + "\n", err))
    stats = re.search(r"prompt (\d+) tokens?, prefill [\d.]+ tok/s, first token [\d.]+ s, "
                      r"decode [\d.]+ tok/s \((\d+) tokens\)", err)
    check(stats is not None and stats.group(2) == n,
          "%s: stats line on stderr" % label, err)
    return stats


if group == "kimi":
    ref = reference("kimi_k2_demo")
    stats = greedy_case("kimi default model", ref, [])
    rc, ids, _ = run("tokenize", kimi_dir, ref["prompt"])
    check(stats is not None and rc == 0 and int(stats.group(1)) == len(json.loads(ids)),
          "kimi: prompt token count in the stats line")
    greedy_case("kimi --model f32", ref, ["--model", kimi_dir], ["--precision", "f32"])
    greedy_case("kimi positional model", ref, [kimi_dir])
    # -p - reads stdin (one final newline, as echo adds, is dropped)
    n = str(len(ref["greedy_ids"]))
    rc, out, err = run("-p", "-", "-n", n, stdin=ref["prompt"] + "\n")
    check(rc == 0 and out == ref["greedy_text"] + "\n", "kimi: -p - reads the prompt from stdin",
          "rc=%d out=%r err=%s" % (rc, out, err))
    # $KT_DEFAULT_MODEL picks the default model
    rc, out, err = run("-p", ref["prompt"], "-n", n,
                       env_extra={"KT_DEFAULT_MODEL": kimi_dir})
    check(rc == 0 and out == ref["greedy_text"] + "\n", "kimi: $KT_DEFAULT_MODEL", err)
elif group == "qwen3":
    model = os.environ.get("KT_QWEN3_DEMO", "/work/shared/models/qwen3_moe_demo")
    if not os.path.isfile(os.path.join(model, "config.json")):
        print("qwen3_moe_demo weights not found at %s: skipped" % model)
        sys.exit(77)
    ref = reference("qwen3_moe_demo")
    greedy_case("qwen3", ref, [model])
    greedy_case("qwen3 f32", ref, ["--model", model], ["--precision", "f32"])
elif group == "sample":
    base = ["-p", "The json module can be used to", "-n", "24", "--no-stats"]
    for flags in (["--temp", "0.9"], ["--temp", "1.2", "--top-k", "40"],
                  ["--temp", "0.8", "--top-p", "0.9"], ["--temp", "1.0", "--min-p", "0.05"],
                  ["--temp", "0.7", "--repeat-penalty", "1.3", "--presence-penalty", "0.5",
                   "--frequency-penalty", "0.2"]):
        a = run(*base, *flags, "--seed", "1234")
        b = run(*base, *flags, "--seed", "1234")
        check(a[0] == 0 and a == b and a[1].strip(), "same seed, same output: %s" % flags,
              "%r\n%r" % (a, b))
    outs = {run(*base, "--temp", "1.0", "--seed", str(s))[1] for s in range(1, 6)}
    check(len(outs) > 1, "different seeds give different samples", repr(outs))
    g1, g2 = run(*base, "--seed", "1"), run(*base, "--seed", "99")
    check(g1[0] == 0 and g1 == g2, "greedy (--temp 0) does not depend on the seed")
    rc, _, err = run(*base[:-1], "--temp", "0.9", "--seed", "77")
    check(rc == 0 and "seed 77" in err, "the stats line names the seed when sampling", err)
    # streamed Chinese text stays valid UTF-8 (whole characters only)
    p = subprocess.run([kt_run, "-p", "KTransformers 是一个", "-n", "64", "--temp", "1.0",
                        "--seed", "5", "--no-stats"], capture_output=True, timeout=300)
    try:
        text = p.stdout.decode("utf-8", "strict")
    except UnicodeDecodeError as exc:
        text = None
        print(exc, file=sys.stderr)
    check(p.returncode == 0 and text and "\ufffd" not in text,
          "sampled Chinese output is whole UTF-8 characters", repr(p.stdout[:200]))
    # Ctrl-C ends the generation: the text so far, the stats line, exit 130
    import signal
    proc = subprocess.Popen([kt_run, "-p", "The json module", "-n", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.read(1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = err.decode()
    check(first and proc.returncode == 130 and "(interrupted)" in err and "prompt " in err,
          "SIGINT stops the generation with its stats (exit 130)",
          "rc=%s err=%r" % (proc.returncode, err))
elif group == "chat":
    with tempfile.TemporaryDirectory() as tmp:
        msgs = os.path.join(tmp, "messages.json")
        for system in (None, "You are terse."):
            conv = ([{"role": "system", "content": system}] if system else []) + \
                [{"role": "user", "content": "What does json.dumps do?"}]
            with open(msgs, "w") as f:
                json.dump(conv, f)
            rc1, want, e1 = run("template", kimi_dir, "--messages", msgs)
            extra = ["--system", system] if system else ["--chat"]
            rc2, got, e2 = run("--print-prompt", *extra, "-p", "What does json.dumps do?")
            check(rc1 == 0 and rc2 == 0 and want and got == want,
                  "--chat%s renders the model's template as kt-run template" %
                  (" --system" if system else ""), "%r\n%r\n%s%s" % (want, got, e1, e2))
            # the evaluated prompt is that text: same token count as tokenize gives
            rc3, ids, _ = run("tokenize", kimi_dir, want)
            rc4, out, err = run(*extra, "-p", "What does json.dumps do?", "-n", "4")
            m = re.search(r"prompt (\d+) tokens", err)
            check(rc3 == 0 and rc4 == 0 and m and int(m.group(1)) == len(json.loads(ids)),
                  "--chat evaluates the rendered prompt", err)
        # a template whose generation prompt opens a reasoning block
        think = os.path.join(tmp, "think-model")
        os.mkdir(think)
        for name in os.listdir(kimi_dir):
            if name != "chat_template.jinja":
                # a copy (hard link where possible): the model loader refuses
                # shards that resolve outside the model directory
                try:
                    os.link(os.path.join(kimi_dir, name), os.path.join(think, name))
                except OSError:
                    shutil.copy(os.path.join(kimi_dir, name), os.path.join(think, name))
        with open(os.path.join(kimi_dir, "chat_template.jinja")) as f:
            src = f.read()
        with open(os.path.join(think, "chat_template.jinja"), "w") as f:
            f.write(src + "{% if add_generation_prompt %}<think>\n{% endif %}")
        rc, out, err = run(think, "--chat", "-p", "Think first.", "-n", "12", "--no-stats")
        check(rc == 0 and out == "\n" and err.startswith("[thinking]\n")
              and err.endswith("\n[/thinking]\n") and len(err) > len("[thinking]\n\n[/thinking]\n"),
              "reasoning after an opening <think> goes to stderr between [thinking] lines",
              "out=%r err=%r" % (out, err))
elif group == "errors":
    cases = [
        (["-p", "x", "--bogus"], 2, "unknown option '--bogus'"),
        (["-p", "x", "-n", "-3"], 2, "-n"),
        (["-p", "x", "--temp", "abc"], 2, "--temp"),
        (["-p", "x", "--top-p", "0"], 2, "--top-p"),
        (["-p", "x", "--min-p", "2"], 2, "--min-p"),
        (["-p", "x", "--seed", "-1"], 2, "--seed"),
        (["-p", "x", "--prompt-ids", "1,2"], 2, "exactly one of"),
        (["-n", "3"], 2, "exactly one of"),
        (["-p"], 2, "-p needs a value"),
        (["--prompt-ids", "1,2", "--chat"], 2, "--chat"),
        (["-p", "x", "stray"], 2, "unexpected argument 'stray'"),
        (["/no/such/model", "-p", "x"], 2, "/no/such/model: no such model directory"),
        (["--model", "/no/such/model", "-p", "x"], 1, "/no/such/model"),
    ]
    for args, code, msg in cases:
        rc, out, err = run(*args)
        check(rc == code and msg in err and "Segmentation" not in err,
              "%s -> exit %d, '%s'" % (" ".join(args), code, msg), "rc=%d err=%r" % (rc, err))
    rc, _, err = run("-p", "x", env_extra={"KT_DEFAULT_MODEL": "/no/such/dir"})
    check(rc == 1 and "KT_DEFAULT_MODEL" in err, "a bad $KT_DEFAULT_MODEL is named", err)
else:
    sys.exit("unknown group " + group)

if failures:
    print("%d failed" % len(failures), file=sys.stderr)
    sys.exit(1)
