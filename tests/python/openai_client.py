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
        if choice.finish_reason is not None:
            finish = choice.finish_reason
        elif choice.delta.role is None and choice.delta.content is not None:
            if ttft is None:
                ttft = (time.perf_counter() - SENT["at"]) * 1e3
            tokens.append(choice.delta.content)
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


def main():
    base = sys.argv[1]
    http = DefaultHttpxClient(event_hooks={"request": [on_request]})
    client = OpenAI(base_url=base, api_key="not-needed", max_retries=0, http_client=http)
    models = [m.id for m in client.models.list().data]
    check(models == ["sched", "tiny-kv", "fixed"], f"models listed: {models}")

    # Warm up the connection pool so TTFT measures the server, not setup.
    client.chat.completions.create(model="fixed", messages=[{"role": "user", "content": "warm up"}])

    for model in ["sched", "fixed"]:
        tokens, usage, finish, _ = stream_chat(client, model, MESSAGE)
        check("".join(tokens) == MESSAGE, f"{model}: streamed chat content is the echoed message")
        check(usage is not None and usage.completion_tokens == len(tokens), f"{model}: usage counts {len(tokens)} tokens")
        check(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, f"{model}: usage adds up")
        check(finish == "stop", f"{model}: finish_reason stop")

    tokens, usage, finish, _ = stream_chat(client, "sched", MESSAGE, max_tokens=3)
    check(len(tokens) == 3 and finish == "length", "max_tokens=3 truncates with finish_reason length")

    whole = client.chat.completions.create(model="sched", messages=[{"role": "user", "content": MESSAGE}])
    check(whole.choices[0].message.content == MESSAGE, "non-streaming chat content")
    check(whole.usage.completion_tokens > 0, "non-streaming usage")

    text, chunks = "", 0
    for chunk in client.completions.create(model="fixed", prompt="hello there world", max_tokens=50, stream=True):
        if chunk.choices and chunk.choices[0].finish_reason is None:
            text += chunk.choices[0].text
            chunks += 1
    check(text == "hello there world" and chunks > 0, f"streamed completion text ({chunks} chunks)")
    done = client.completions.create(model="fixed", prompt="hello there world", max_tokens=50)
    check(done.choices[0].text == "hello there world", "non-streaming completion text")
    check(done.usage.completion_tokens == chunks, "completion usage equals streamed chunks")

    long_prompt = " ".join(["word"] * 1500)
    ttft_matches_engine(client, base, "sched", long_prompt)
    ttft_matches_engine(client, base, "fixed", long_prompt)

    try:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
        check(False, "an unknown model raises")
    except Exception as e:  # openai.NotFoundError
        check(type(e).__name__ == "NotFoundError", f"an unknown model raises NotFoundError ({type(e).__name__})")
    print("openai client: all checks passed")


if __name__ == "__main__":
    main()
