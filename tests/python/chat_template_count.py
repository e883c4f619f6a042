"""The prompt tokens of a chat, counted as vLLM counts them, against llmsim serve.

Usage: chat_template_count.py BASE_URL MODEL FIXTURE_DIR

FIXTURE_DIR holds a tokenizer.json and a tokenizer_config.json with a
chat_template. This script renders each chat with the `jinja2` package the
way transformers' apply_chat_template does (sandboxed environment,
trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception,
strftime_now, the config's special tokens), after shaping the messages and
tools the way vLLM's parse_chat_messages and ChatCompletionToolsParam do,
then tokenizes the text with the `tokenizers` package without special tokens
(vLLM's default for chat). The server must give the same ids on /tokenize,
the same count in a chat completion's usage.prompt_tokens (what
`vllm bench serve` records as the prompt length), vocabulary strings as
token_strs, and the text with its special tokens on /detokenize.

Needs: pip install tokenizers jinja2 (.ci/run installs them).
"""

import datetime
import json
import sys
import urllib.error
import urllib.request

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

BASE, MODEL, FIXTURE = sys.argv[1], sys.argv[2], sys.argv[3]
TOK = Tokenizer.from_file(f"{FIXTURE}/tokenizer.json")
CONFIG = json.load(open(f"{FIXTURE}/tokenizer_config.json", encoding="utf-8"))


def special(v):
    return v["content"] if isinstance(v, dict) else v


SPECIALS = {
    k: special(CONFIG[k])
    for k in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]
    if CONFIG.get(k) is not None
}


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
ENV.globals["strftime_now"] = strftime_now
TEMPLATE = ENV.from_string(CONFIG["chat_template"])


def vllm_message(m):
    """vLLM's parse_chat_messages with the "string" content format."""
    content = m.get("content")
    if content is None:
        parts = []
    elif isinstance(content, str):
        parts = [content]
    else:
        parts = [p if isinstance(p, str) else p["text"] for p in content if isinstance(p, str) or p.get("type") == "text"]
    out = {"role": m["role"], "content": "\n".join(parts)}
    if m["role"] == "assistant" and m.get("tool_calls"):
        calls = json.loads(json.dumps(m["tool_calls"]))
        for c in calls:
            try:
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
            except (json.JSONDecodeError, TypeError):
                c["function"]["arguments"] = {}
        out["tool_calls"] = calls
    if m["role"] == "tool" and "tool_call_id" in m:
        out["tool_call_id"] = m["tool_call_id"]
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    return out


def vllm_tool(t):
    """ChatCompletionToolsParam.model_dump(): declared fields first (None when absent), then extras."""
    f = t["function"]
    func = {"name": f["name"], "description": f.get("description"), "parameters": f.get("parameters")}
    func.update({k: v for k, v in f.items() if k not in func})
    out = {"type": t.get("type", "function"), "function": func}
    out.update({k: v for k, v in t.items() if k not in out})
    return out


def render(req):
    messages = [vllm_message(m) for m in req["messages"]]
    tools = [vllm_tool(t) for t in req["tools"]] if req.get("tools") is not None else None
    kwargs = {**SPECIALS, **req.get("chat_template_kwargs", {})}
    text = TEMPLATE.render(
        messages=messages,
        tools=tools,
        documents=None,
        add_generation_prompt=req.get("add_generation_prompt", True),
        **kwargs,
    )
    if req.get("continue_final_message"):
        # transformers: cut after the final message's content.
        final = messages[-1]["content"]
        loc = text.rindex(final.strip())
        if text[loc : loc + len(final.lstrip())] == final:
            text = text[: loc + len(final.lstrip())]
        else:
            text = text[: loc + len(final.strip())]
    return text


def post(path, body):
    data = json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

CASES = {
    "system and user": {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant.  "},
            {"role": "user", "content": "What is the weather in Paris today?"},
        ]
    },
    "content parts and unicode": {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Ünïcödé: café, 東京 🙂"}, {"type": "text", "text": "Hello, world!"}]},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "And\ttomorrow?\n\n"},
        ]
    },
    "tools, a call and its result": {
        "tool_choice": "none",
        "tools": [WEATHER, {"type": "function", "function": {"name": "noop", "description": "Does nothing.", "strict": True}}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"unit": "celsius", "city": "Paris"}'}},
                    {"id": "call_2", "type": "function", "function": {"name": "noop", "arguments": "not json"}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "  21 degrees, sunny  "},
        ],
    },
    "continue the final message": {
        "add_generation_prompt": False,
        "continue_final_message": True,
        "messages": [
            {"role": "user", "content": "Count to three."},
            {"role": "assistant", "content": "One, two, "},
        ],
    },
    "template kwargs": {
        "chat_template_kwargs": {"date_string": "01 Jan 2025"},
        "messages": [{"role": "user", "content": "Hello"}],
    },
}

failures = []
for name, case in CASES.items():
    ids = TOK.encode(render(case), add_special_tokens=False).ids
    status, tok = post("/tokenize", {"model": MODEL, "return_token_strs": True, **case})
    if status != 200 or tok["tokens"] != ids:
        failures.append(f"{name}: /tokenize gave {status} {tok}, the model's ids are {ids}")
        continue
    if tok["count"] != len(ids) or tok["token_strs"] != [TOK.id_to_token(i) for i in ids]:
        failures.append(f"{name}: /tokenize count or token_strs differ: {tok}")
    status, chat = post("/v1/chat/completions", {"model": MODEL, "max_tokens": 3, **case})
    if status != 200 or chat["usage"]["prompt_tokens"] != len(ids):
        failures.append(f"{name}: usage {chat.get('usage', chat)} != {len(ids)} prompt tokens")
    status, text = post("/detokenize", {"model": MODEL, "tokens": ids})
    if status != 200 or text["prompt"] != TOK.decode(ids, skip_special_tokens=False):
        failures.append(f"{name}: /detokenize gave {text}")
    print(f"{name}: {len(ids)} prompt tokens, as the model counts them")

# The template's own refusal: a 400 with its message, on both routes.
bad = {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}
try:
    render(bad)
    failures.append("the reference render accepted a developer message")
except jinja2.exceptions.TemplateError as e:
    expected = str(e)
for path in ["/tokenize", "/v1/chat/completions"]:
    status, err = post(path, {"model": MODEL, **bad})
    if status != 400 or err.get("error", {}).get("message") != expected:
        failures.append(f"{path}: a raise_exception gave {status} {err}, expected 400 {expected!r}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("chat template: all checks passed")
