#!/usr/bin/env python3
"""More conversations for the real chat templates, rendered by Python Jinja2 in
transformers' apply_chat_template environment (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, its tojson/raise_exception/
strftime_now, tools/documents=None by default, bos <s>, eos </s>). Extends
cases.json (made by transformers itself) with its 'holdout' conversations and
template kwargs (enable_thinking, reasoning_effort, builtin_tools).
    python3 make_template_cases.py > template_cases.json
Output: {conversations: {name: context as JSON text}, templates: {file: {name:
{rendered | error [, rendered_unsandboxed]}}}}."""
import datetime
import glob
import json
import os
import sys

from hf_jinja import make_env
from template_convs import WEATHER_TOOL, holdout_convs

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0)

env = make_env()
env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
# Where the sandbox refuses list.append/pop (Kimi's templates), libkt renders
# anyway; the same environment without the sandbox gives the expected text.
plain = make_env(sandboxed=False)
plain.globals["strftime_now"] = env.globals["strftime_now"]

tools = [WEATHER_TOOL,
         {"type": "function", "function": {"name": "search", "description": "Search the web",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                                                           "n": {"type": "integer", "default": 5},
                                                           "tags": {"type": "array", "items": {"type": "string"}}},
                         "required": ["q"]}}}]
convs = {
    **holdout_convs(tools),
    "think_in_content": dict(messages=[{"role": "user", "content": "q"},
                                       {"role": "assistant", "content": "<think>\nhidden\n</think>\n\nvisible"},
                                       {"role": "user", "content": "q2"}]),
    "no_thinking": dict(messages=[{"role": "user", "content": "Hi"}], enable_thinking=False),
    "thinking_on": dict(messages=[{"role": "user", "content": "Hi"}], enable_thinking=True, thinking=True),
    "effort_high": dict(messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "Hi"}],
                        reasoning_effort="high", model_identity="You are X."),
    "builtin_tools": dict(messages=[{"role": "user", "content": "Hi"}], builtin_tools=["browser", "python"]),
    "tool_string_args": dict(messages=[
        {"role": "user", "content": "Search"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": {"q": "moe", "n": 3, "tags": ["a", "b"]}}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "search", "content": "[\"r1\", \"r2\"]"},
        {"role": "assistant", "content": "Found two.", "reasoning_content": "ok"}], tools=tools, add_generation_prompt=False),
    "content_parts": dict(messages=[{"role": "user", "content": [{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}]}]),
    "long_unicode": dict(messages=[{"role": "system", "content": "Système: réponds en français. 日本語も。"},
                                   {"role": "user", "content": "Emoji 😀👍🏽 and math ∑∫ and \t tabs \\ \" '"},
                                   {"role": "assistant", "content": "D'accord — «ok»."},
                                   {"role": "user", "content": "Ещё раз?"}]),
}

tdir = os.path.dirname(os.path.abspath(__file__))
out = {"date": NOW.isoformat(), "conversations": {}, "templates": {}}
for path in sorted(glob.glob(os.path.join(tdir, "*.jinja"))):
    name = os.path.basename(path)
    if name == "bad_syntax.jinja":
        continue
    text = open(path).read()
    tpl = env.from_string(text)
    cases = {}
    for cname, kw in convs.items():
        kw = dict(kw)
        ctx = {"messages": kw.pop("messages"), "tools": kw.pop("tools", None), "documents": None,
               "add_generation_prompt": kw.pop("add_generation_prompt", True),
               "bos_token": "<s>", "eos_token": "</s>", **kw}
        out["conversations"][cname] = json.dumps(ctx, ensure_ascii=False)
        case = {}
        try:
            case["rendered"] = tpl.render(**ctx)
        except Exception as ex:  # noqa: BLE001 - Jinja's refusal is the expected outcome
            case["error"] = type(ex).__name__ + ": " + str(ex)[:200]
            if type(ex).__name__ == "SecurityError":
                case["rendered_unsandboxed"] = plain.from_string(text).render(**ctx)
        cases[cname] = case
    out["templates"][name] = cases
json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
sys.stdout.write("\n")
