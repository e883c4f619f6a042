//! What the cluster and disaggregation tests share: a scenario from YAML
//! text, and the random small engines their seeded invariants run on.

use std::path::Path;

use llmsim_scenario::config::{self, Scenario};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// A validated scenario from YAML text (panics with the text if it is bad).
pub fn scenario(text: &str) -> Scenario {
    let file = Path::new("cluster-test.yml");
    let raw = config::parse_str(text, file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    config::validate::scenario(raw, file).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Where the generators of the two test files differ.
pub struct Shape {
    /// The `num_blocks` to draw from.
    pub blocks: [u32; 3],
    /// Whether gamma arrivals are among the draws.
    pub gamma: bool,
    /// Shared prefixes are drawn from 1 to this many tokens.
    pub max_prefix: u32,
}

/// A random small scenario without `cluster:`, ending in a newline so a
/// cluster can be appended: open and closed loops, shared prefixes or
/// sessions, small caches and overload; `caching` sets prefix caching.
pub fn random_engine(rng: &mut ChaCha8Rng, shape: &Shape, caching: bool) -> String {
    let blocks = shape.blocks[rng.random_range(0..3)];
    let arrivals = match rng.random_range(0..if shape.gamma { 4 } else { 3 }) {
        0 => format!("poisson: {{rate: {}}}", [5, 50, 400][rng.random_range(0..3)]),
        1 => format!("constant: {{rate: {}}}", [10, 200][rng.random_range(0..2)]),
        2 if shape.gamma => format!("gamma: {{rate: 100, burstiness: {}}}", [0.2, 3.0][rng.random_range(0..2)]),
        _ => format!(
            "closed: {{concurrency: {}, think_time_s: {}}}",
            rng.random_range(1..40),
            [0.0, 0.01][rng.random_range(0..2)]
        ),
    };
    let content = match rng.random_range(0..3) {
        0 => String::new(),
        1 => format!(
            "  shared_prefix: {{groups: {}, tokens: {}}}\n",
            rng.random_range(1..5),
            rng.random_range(1..shape.max_prefix)
        ),
        _ => "  sessions: {turns: {uniform: [1, 4]}, think_s: 0.02}\n".to_string(),
    };
    format!(
        "hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: {ctx}
  weights: {{parameters_billions: 6.74}}
  kv_cache: {{bytes_per_token: 524288, block_size: {bs}, num_blocks: {blocks}, prefix_caching: {caching}}}
scheduler: {{max_batch_tokens: {mbt}, max_num_sequences: {seqs}}}
latency: {{request_overhead_ms: {overhead}}}
workload:
  seed: {seed}
  arrivals: {{{arrivals}}}
  requests: {n}
  prompt_tokens: {{uniform: [1, 700]}}
  output_tokens: {{uniform: [1, 80]}}
{content}",
        ctx = [600, 4096][rng.random_range(0..2)],
        bs = [1, 16, 32][rng.random_range(0..3)],
        mbt = [64, 512, 8192][rng.random_range(0..3)],
        seqs = [2, 16, 256][rng.random_range(0..3)],
        overhead = [0.0, 3.0][rng.random_range(0..2)],
        seed = rng.random::<u32>(),
        n = rng.random_range(1..150),
    )
}
