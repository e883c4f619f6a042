"""Drives `llmsim serve` with the official `openai` Python package.

Run by the Rust integration test `server::python` against a server it
started: python3 openai_client.py BASE_URL. The server's answers echo the
last user message (the test's responses file), so content is known. Exits
non-zero with a message on the first failed check.
"""

import json
import sys
import time
import urllib.request

from openai import DefaultHttpxClient, OpenAI

MESSAGE = "The quick brown fox jumps over the lazy dog"
TOLERANCE_MS = 5.0

# When the last request went on the wire: TTFT is measured from there, as
# the server measures it from when the request arrived (the client's own
# work before sending is not the server's latency).
SENT = {"at": 0.0}


def on_request(_request):
    SENT["at"] = time.perf_counter()


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def server_json(base, path, method="GET"):
    req = urllib.request.Request(base.removesuffix("/v1") + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req) as resp:
        return json.loads(resp.read())


def stream_chat(client, model, message, **kw):
    """Streams a chat; returns (token texts, usage, finish_reason, ttft_ms)."""
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": message}],
        stream=True,
        stream_options={"include_usage": True},
        **kw,
    )
    tokens, usage, finish, ttft = [], None, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        # As vLLM streams: the last token's chunk carries finish_reason (an
        # answer that ends with its end-of-sequence token ends with an empty one).
        if choice.delta.content:
            if ttft is None:
                ttft = (time.perf_counter() - SENT["at"]) * 1e3
            tokens.append(choice.delta.content)
        if choice.finish_reason is not None:
            finish = choice.finish_reason
    return tokens, usage, finish, ttft


def ttft_matches_engine(client, base, model, message):
    """TTFT seen by the client vs the engine's simulated TTFT, best of 5."""
    best = None
    for _ in range(5):
        server_json(base, "/metrics/summary/reset", "POST")
        _, _, _, observed = stream_chat(client, model, message, max_tokens=2)
        simulated = server_json(base, "/metrics/summary")["models"][model]["simulated"]["ttft_ms"]["max"]
        diff = observed - simulated
        if best is None or abs(diff) < abs(best[2]):
            best = (observed, simulated, diff)
    observed, simulated, diff = best
    check(
        -0.5 <= diff <= TOLERANCE_MS,
        f"{model}: client TTFT {observed:.2f} ms vs engine {simulated:.2f} ms (within {TOLERANCE_MS} ms)",
    )


def tool_calls(client):
    """A tool call as an agent meets it: whole, streamed, then the turn
    after the tool's result. The `agent` model has vLLM's tool flags; the
    test script calls get_weather for "weather in CITY"."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    ask = {"role": "user", "content": "What is the weather in Paris?"}
    whole = client.chat.completions.create(model="agent", messages=[ask], tools=tools)
    choice = whole.choices[0]
    call = choice.message.tool_calls[0]
    check(
        choice.finish_reason == "tool_calls" and call.function.name == "get_weather"
        and json.loads(call.function.arguments) == {"city": "Paris"} and call.id.startswith("chatcmpl-tool-"),
        f"tool call: {call.function.name}({call.function.arguments}), finish {choice.finish_reason}",
    )
    name, args, finish = None, "", None
    for chunk in client.chat.completions.create(model="agent", messages=[ask], tools=tools, stream=True):
        if not chunk.choices:
            continue
        for tc in chunk.choices[0].delta.tool_calls or []:
            name = tc.function.name or name
            args += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    check(
        name == "get_weather" and json.loads(args) == {"city": "Paris"} and finish == "tool_calls",
        f"streamed tool call deltas add up: {name}({args}), finish {finish}",
    )
    result = {"role": "tool", "tool_call_id": call.id, "content": "18 degrees"}
    follow = client.chat.completions.create(
        model="agent", messages=[ask, choice.message.model_dump(exclude_none=True), result], tools=tools
    )
    check(
        follow.choices[0].finish_reason == "stop" and follow.choices[0].message.content == ask["content"]
        and not follow.choices[0].message.tool_calls,
        "after the tool's result the model answers in text",
    )
    try:
        client.chat.completions.create(model="fixed", messages=[ask], tools=tools)
        check(False, "auto tool choice without the flags raises")
    except Exception as e:  # openai.BadRequestError
        check(type(e).__name__ == "BadRequestError" and "--enable-auto-tool-choice" in str(e), f"no tool flags: {type(e).__name__}")


def structured_output(client):
    """`.parse()` with a Pydantic model (a nested model, a list of them, an
    enum, an optional field): the SDK sends the model's JSON schema as
    `response_format` and validates the answer against the model."""
    import enum
    from typing import Optional

    import pydantic

    class Color(str, enum.Enum):
        red = "red"
        green = "green"
        blue = "blue"

    class Pet(pydantic.BaseModel):
        name: str
        age: int = pydantic.Field(ge=0, le=30)

    class Person(pydantic.BaseModel):
        name: str
        favourite: Color
        pets: list[Pet]
        nickname: Optional[str]

    parse = getattr(client.chat.completions, "parse", None) or client.beta.chat.completions.parse
    people = []
    for seed in range(5):
        done = parse(model="fixed", messages=[{"role": "user", "content": "Describe a person"}],
                     response_format=Person, seed=seed)
        person = done.choices[0].message.parsed
        check(isinstance(person, Person) and all(isinstance(p, Pet) for p in person.pets),
              f".parse() gives a Person: {person!r}")
        check(done.usage.completion_tokens > 1 and done.choices[0].finish_reason == "stop",
              "structured output is priced as its tokens")
        people.append(person)
    check(len({p.model_dump_json() for p in people}) > 1, "other seeds, other people")
    done = client.chat.completions.create(
        model="fixed", messages=[{"role": "user", "content": "Pick"}],
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    check(done.choices[0].message.content in ("yes", "no"), f"choice: {done.choices[0].message.content}")


def main():
    base = sys.argv[1]
    http = DefaultHttpxClient(event_hooks={"request": [on_request]})
    client = OpenAI(base_url=base, api_key="not-needed", max_retries=0, http_client=http)
    models = [m.id for m in client.models.list().data]
    check(models == ["sched", "tiny-kv", "fixed", "flaky", "cutter", "agent"], f"models listed: {models}")

    # Warm up the connection pool so TTFT measures the server, not setup.
    client.chat.completions.create(model="fixed", messages=[{"role": "user", "content": "warm up"}])

    for model in ["sched", "fixed"]:
        tokens, usage, finish, _ = stream_chat(client, model, MESSAGE)
        check("".join(tokens) == MESSAGE, f"{model}: streamed chat content is the echoed message")
        check(
            usage is not None and usage.completion_tokens == len(tokens) + 1,
            f"{model}: usage counts {len(tokens)} tokens and the end-of-sequence token, as vLLM does",
        )
        check(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, f"{model}: usage adds up")
        check(finish == "stop", f"{model}: finish_reason stop")

    tokens, usage, finish, _ = stream_chat(client, "sched", MESSAGE, max_tokens=3)
    check(len(tokens) == 3 and finish == "length", "max_tokens=3 truncates with finish_reason length")

    whole = client.chat.completions.create(model="sched", messages=[{"role": "user", "content": MESSAGE}])
    check(whole.choices[0].message.content == MESSAGE, "non-streaming chat content")
    check(whole.usage.completion_tokens > 0, "non-streaming usage")

    text, chunks = "", 0
    for chunk in client.completions.create(model="fixed", prompt="hello there world", max_tokens=50, stream=True):
        if chunk.choices and chunk.choices[0].text:
            text += chunk.choices[0].text
            chunks += 1
    check(text == "hello there world" and chunks > 0, f"streamed completion text ({chunks} chunks)")
    done = client.completions.create(model="fixed", prompt="hello there world", max_tokens=50)
    check(done.choices[0].text == "hello there world", "non-streaming completion text")
    check(done.usage.completion_tokens == chunks + 1, "completion usage is the streamed chunks plus EOS")

    # ignore_eos (what `vllm bench serve --ignore-eos` and guidellm send):
    # exactly max_tokens tokens, finish_reason length.
    tokens, usage, finish, _ = stream_chat(client, "sched", "hi", max_tokens=32, extra_body={"ignore_eos": True})
    check(
        usage.completion_tokens == 32 and len(tokens) == 32 and finish == "length",
        f"ignore_eos: 32 tokens, finish length ({usage.completion_tokens}, {len(tokens)}, {finish})",
    )
    done = client.completions.create(model="fixed", prompt="hi", max_tokens=20, extra_body={"ignore_eos": True})
    check(done.usage.completion_tokens == 20 and done.choices[0].finish_reason == "length", "completions ignore_eos")

    # logprobs: the SDK parses vLLM's shapes.
    whole = client.chat.completions.create(
        model="fixed", messages=[{"role": "user", "content": MESSAGE}], logprobs=True, top_logprobs=3, seed=1
    )
    content = whole.choices[0].logprobs.content
    check(
        len(content) == whole.usage.completion_tokens and all(len(t.top_logprobs) == 3 for t in content),
        f"chat logprobs: one entry per token with 3 alternatives ({len(content)})",
    )
    check(content[0].token == "The" and content[0].top_logprobs[0].token == "The", "the sampled token leads its list")
    done = client.completions.create(model="fixed", prompt="a b c", logprobs=2)
    lp = done.choices[0].logprobs
    check(lp.tokens[:3] == ["a", " b", " c"] and len(lp.top_logprobs[0]) == 2, f"completions logprobs: {lp.tokens}")
    try:
        client.chat.completions.create(model="fixed", messages=[{"role": "user", "content": "x"}], logprobs=True, top_logprobs=21)
        check(False, "top_logprobs over 20 raises")
    except Exception as e:  # openai.BadRequestError
        check(type(e).__name__ == "BadRequestError" and "max allowed: 20" in str(e), f"top_logprobs 21: {type(e).__name__}")

    # n: several choices in one response, usage summed.
    many = client.chat.completions.create(
        model="sched", messages=[{"role": "user", "content": "hi"}], n=3, max_tokens=5, extra_body={"ignore_eos": True}
    )
    check(
        [c.index for c in many.choices] == [0, 1, 2] and many.usage.completion_tokens == 15,
        f"n=3: three choices, 15 completion tokens ({many.usage.completion_tokens})",
    )

    tool_calls(client)
    structured_output(client)

    long_prompt = " ".join(["word"] * 1500)
    ttft_matches_engine(client, base, "sched", long_prompt)
    ttft_matches_engine(client, base, "fixed", long_prompt)

    try:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
        check(False, "an unknown model raises")
    except Exception as e:  # openai.NotFoundError
        check(type(e).__name__ == "NotFoundError", f"an unknown model raises NotFoundError ({type(e).__name__})")
    # Injected faults, as the SDK meets them: a 429 with retry-after before
    # the first byte, and a stream whose connection is cut after two tokens.
    try:
        client.chat.completions.create(model="flaky", messages=[{"role": "user", "content": "hi"}])
        check(False, "an injected 429 raises")
    except Exception as e:  # openai.RateLimitError
        retry = getattr(getattr(e, "response", None), "headers", {}).get("retry-after")
        check(type(e).__name__ == "RateLimitError" and retry == "1", f"injected 429: {type(e).__name__}, retry-after {retry}")
    got = []
    try:
        for chunk in client.chat.completions.create(
            model="cutter", messages=[{"role": "user", "content": MESSAGE}], stream=True
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
        check(False, "a cut stream raises")
    except Exception as e:  # httpx.RemoteProtocolError or openai.APIError
        check(got == ["The", " quick"], f"a stream cut after 2 tokens raises {type(e).__name__} after {got}")
    print("openai client: all checks passed")


if __name__ == "__main__":
    main()
