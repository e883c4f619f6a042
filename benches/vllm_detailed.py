#!/usr/bin/env python3
"""Writes a `vllm bench serve --save-detailed` result of N requests, for
measuring how llmsim reads large measured files (docs/performance.md,
"Measured files up to 1 GiB").

The keys and their order are those of vLLM 0.33.0's file
(../shared/research/BENCH-FORMATS.md, section 3.1): summary figures, then
the per-request arrays (`input_lens`, `output_lens`, `ttfts`, `itls`,
`latencies`, `start_times`, `queue_times`, `generated_texts`, `errors`).
Each request has about 120 output tokens, so 2,000 requests take about
5.8 MB as in issue 34; the numbers are seeded, so a given N always gives
the same bytes.

    python3 benches/vllm_detailed.py --requests 69000 -o /tmp/vllm-200mb.json
"""

import argparse
import json
import random


def percentile(sorted_xs, q):
    """numpy's linear percentile of an ascending list."""
    if not sorted_xs:
        return 0.0
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def stats(prefix, xs_s, out):
    xs = sorted(x * 1e3 for x in xs_s)
    n = len(xs)
    mean = sum(xs) / n
    out[f"mean_{prefix}_ms"] = mean
    out[f"median_{prefix}_ms"] = percentile(xs, 50)
    out[f"std_{prefix}_ms"] = (sum((x - mean) ** 2 for x in xs) / n) ** 0.5
    out[f"p99_{prefix}_ms"] = percentile(xs, 99)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=4.0, help="requests a second (Poisson)")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    words = "the capital of France is Paris and it is known for its art food and history".split()
    input_lens, output_lens, ttfts, itls, latencies, starts, queues, texts = [], [], [], [], [], [], [], []
    t = 84211.54182604067
    for _ in range(a.requests):
        t += rng.expovariate(a.rate)
        p = rng.randint(400, 600)
        n = rng.randint(100, 140)
        ttft = 0.03 + rng.random() * 0.03
        gaps = [0.0065 + rng.random() * 0.003 for _ in range(n - 1)]
        input_lens.append(p)
        output_lens.append(n)
        ttfts.append(ttft)
        itls.append(gaps)
        latencies.append(ttft + sum(gaps))
        starts.append(t)
        queues.append(0.0002 + rng.random() * 0.0001)
        texts.append(" " + " ".join(rng.choice(words) for _ in range(40)))
    duration = starts[-1] - starts[0] + latencies[-1]
    out = {
        "date": "20260412-101530",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": a.requests,
        "request_rate": a.rate,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": duration,
        "completed": a.requests,
        "failed": 0,
        "total_input_tokens": sum(input_lens),
        "total_output_tokens": sum(output_lens),
        "request_throughput": a.requests / duration,
        "request_goodput": None,
        "output_throughput": sum(output_lens) / duration,
        "total_token_throughput": (sum(input_lens) + sum(output_lens)) / duration,
        "input_lens": input_lens,
        "output_lens": output_lens,
        "ttfts": ttfts,
        "itls": itls,
        "latencies": latencies,
        "start_times": starts,
        "queue_times": queues,
        "generated_texts": texts,
        "errors": [""] * a.requests,
        "max_output_tokens_per_s": 477.0,
        "max_concurrent_requests": 7,
        "rtfx": 0.0,
    }
    stats("ttft", ttfts, out)
    stats("tpot", [(lat - f) / (n - 1) for lat, f, n in zip(latencies, ttfts, output_lens)], out)
    stats("itl", [g for row in itls for g in row], out)
    with open(a.output, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
