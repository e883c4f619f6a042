//! `llmsim bench`: a load generator for any OpenAI-compatible server.
//!
//! Why our own: the prediction is only useful if checked, and checking
//! needs measurements that mean what the prediction means. This bench
//! (1) sends an open-loop schedule on time whether or not earlier requests
//! finished, and measures latency from the *scheduled* arrival as well as
//! from the send, so a saturated client cannot hide queueing (coordinated
//! omission); (2) watches its own lateness and CPU and says when it, not the
//! server, is the bottleneck; (3) resets and reads the server's
//! `/metrics/summary` (ours has one) so client, server and simulated
//! figures cover the same requests; (4) writes `vllm bench serve`'s JSON
//! schema, so existing tooling and `llmsim diff` read it.
//!
//! Every wall-clock read of the crate outside the server lives here and in
//! the submodules: a load test measures real time by definition.

pub mod client;
pub mod health;
pub mod result;
pub mod schedule;
pub mod table;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use client::{Client, Endpoint, Exchange, Failure};
use health::{Health, Ticker};
pub use schedule::Load;

/// A validated bench.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchConfig {
    /// `http://host:port`, no trailing slash.
    pub base_url: String,
    pub model: String,
    pub load: Load,
    pub requests: u64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub warmup: u64,
    pub seed: u64,
    pub timeout: Duration,
    pub endpoint: Endpoint,
    pub label: Option<String>,
    /// `--shared-prefix GROUPS:TOKENS`: each prompt starts with one of
    /// `GROUPS` prefixes of `TOKENS` tokens (request `i` takes prefix
    /// `i mod GROUPS`), before its `prompt_tokens` of its own.
    pub shared_prefix: Option<(u32, u32)>,
}

/// One measured request; times in nanoseconds since the measured run began.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub index: u64,
    /// When the schedule said to send it (closed loop: when it was sent).
    pub scheduled_ns: u64,
    pub sent_ns: u64,
    /// Arrival of every token chunk.
    pub chunks_ns: Vec<u64>,
    /// Server's `usage.prompt_tokens`, else the requested count.
    pub prompt_tokens: u32,
    /// Server's `usage.completion_tokens`, else the chunk count.
    pub output_tokens: u32,
    /// Server's `usage.prompt_tokens_details.cached_tokens`, if it sent one.
    pub cached_tokens: Option<u32>,
    pub failure: Option<Failure>,
}

impl Measurement {
    pub fn ok(&self) -> bool {
        self.failure.is_none()
    }
}

/// What the server's `/metrics/summary` did.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerSummary {
    /// Reset after warm-up and read at the end.
    Read(Value),
    /// The server has no `/metrics/summary` (not an llmsim server).
    Absent,
    Failed(String),
}

/// A finished bench.
#[derive(Clone, Debug)]
pub struct BenchRun {
    pub config: BenchConfig,
    pub schedule_ns: Vec<u64>,
    pub records: Vec<Measurement>,
    pub duration_s: f64,
    pub health: Health,
    pub server: ServerSummary,
}

/// Runs the bench on `rt`, a multi-threaded runtime the caller built
/// (`cli::runtime::bench_runtime`).
pub fn run(cfg: &BenchConfig, rt: &tokio::runtime::Runtime) -> Result<BenchRun, String> {
    rt.block_on(run_async(cfg))
}

async fn run_async(cfg: &BenchConfig) -> Result<BenchRun, String> {
    let words = content_words(cfg)?;
    let client = Arc::new(Client::new(&cfg.base_url, &cfg.model, cfg.endpoint, cfg.timeout)?);
    client.reachable().await.map_err(|e| format!("cannot reach {}: {e}; no request was sent", cfg.base_url))?;
    let nonce = run_nonce();
    if cfg.warmup > 0 {
        warm_up(&client, cfg, &format!("w{nonce}"), words).await;
    }
    let reset = reset_summary(&client).await;
    let prompts = Arc::new(Prompts { run: format!("m{nonce}"), words, seed: cfg.seed, prefix: cfg.shared_prefix });
    let ticker = Ticker::start();
    let base = Instant::now();
    let (schedule_ns, exchanges) = match cfg.load {
        Load::Open { rate, burstiness } => {
            let at: Vec<u64> = schedule::open_schedule(rate, burstiness, cfg.requests, cfg.seed)
                .into_iter()
                .map(|t| t.as_nanos())
                .collect();
            let ex = open_loop(&client, &prompts, &at, base, cfg.output_tokens).await;
            (at, ex)
        }
        Load::Closed { concurrency } => {
            (Vec::new(), closed_loop(&client, &prompts, cfg.requests, concurrency, cfg.output_tokens).await)
        }
    };
    let duration_s = base.elapsed().as_secs_f64();
    let health = ticker.stop().await;
    let server = match reset {
        Ok(true) => match client.get_json("/metrics/summary").await {
            Ok(Some(v)) => ServerSummary::Read(v),
            Ok(None) => ServerSummary::Absent,
            Err(e) => ServerSummary::Failed(format!("cannot read /metrics/summary: {e}")),
        },
        Ok(false) => ServerSummary::Absent,
        Err(e) => ServerSummary::Failed(e),
    };
    let mut records: Vec<Measurement> =
        exchanges.into_iter().map(|(i, due, ex)| measurement(i, due, ex, base, cfg)).collect();
    records.sort_by_key(|r| r.index);
    let schedule_ns = if schedule_ns.is_empty() {
        // A closed loop's schedule is when it sent, in time order (users
        // race for the next index, so index order can be a hair off).
        let mut sent: Vec<u64> = records.iter().map(|r| r.sent_ns).collect();
        sent.sort_unstable();
        sent
    } else {
        schedule_ns
    };
    Ok(BenchRun { config: cfg.clone(), schedule_ns, records, duration_s, health, server })
}

/// The measured requests' prompts, each built when it is about to be sent
/// (a prompt can be megabytes: building them all up front would hold
/// requests x prompt bytes before the first request left).
struct Prompts {
    run: String,
    words: u32,
    seed: u64,
    prefix: Option<(u32, u32)>,
}

impl Prompts {
    fn get(&self, index: u64) -> String {
        let own = schedule::prompt(&self.run, index, self.words, self.seed);
        match self.prefix {
            // The prefix's first word names the run and the group, so the
            // groups share nothing and no earlier run's cache serves them.
            Some((groups, tokens)) => {
                let group = schedule::prefix_group(index, groups);
                schedule::prompt(&format!("{}p", self.run), group, tokens, self.seed) + &own
            }
            None => own,
        }
    }
}

/// Words of prompt text per request (see [`schedule::content_tokens`]).
pub fn content_words(cfg: &BenchConfig) -> Result<u32, String> {
    use crate::content::tokenizer::{PER_MESSAGE_OVERHEAD, PER_PROMPT_OVERHEAD};
    schedule::content_tokens(cfg.prompt_tokens, cfg.endpoint == Endpoint::Chat).ok_or_else(|| {
        format!(
            "--prompt-tokens {} is too small for the chat endpoint: its template costs {PER_MESSAGE_OVERHEAD} \
             tokens per message and {PER_PROMPT_OVERHEAD} per prompt, so give at least {}",
            cfg.prompt_tokens,
            PER_MESSAGE_OVERHEAD + PER_PROMPT_OVERHEAD + 1
        )
    })
}

/// Four letters that differ between runs, so a server's prefix cache
/// cannot serve this run's prompts from an earlier run's. The prompt text
/// reaches no output, so reading the clock here costs no determinism.
fn run_nonce() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let n = (nanos % (26u128.pow(4))) as u64 + 26u64.pow(3);
    schedule::letters(n)
}

/// K requests at once, waited for; not measured.
async fn warm_up(client: &Arc<Client>, cfg: &BenchConfig, tag: &str, words: u32) {
    let tasks: Vec<_> = (0..cfg.warmup)
        .map(|i| {
            let c = Arc::clone(client);
            let prompt = schedule::prompt(tag, i, words, cfg.seed);
            let out = cfg.output_tokens;
            tokio::spawn(async move { c.complete(&prompt, out).await })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

/// `Ok(true)`: reset; `Ok(false)`: the server has no summary.
async fn reset_summary(client: &Client) -> Result<bool, String> {
    match client.post("/metrics/summary/reset").await {
        Ok(s) if (200..300).contains(&s) => Ok(true),
        Ok(404 | 405) => Ok(false),
        Ok(s) => Err(format!("POST /metrics/summary/reset answered HTTP {s}")),
        Err(e) => Err(format!("POST /metrics/summary/reset failed: {e}")),
    }
}

type Sent = (u64, Instant, Exchange);

/// Sends request `i` at `base + at[i]`, on time whatever earlier ones do.
///
/// The schedule is kept by a plain thread sleeping until each due time and
/// handing the request to the runtime: tokio's timer rounds deadlines up to
/// the next millisecond, which would make every send up to a millisecond
/// late; a thread's sleep overshoots by tens of microseconds.
async fn open_loop(client: &Arc<Client>, prompts: &Arc<Prompts>, at: &[u64], base: Instant, out: u32) -> Vec<Sent> {
    let runtime = tokio::runtime::Handle::current();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (client, prompts, at, base) = (Arc::clone(client), Arc::clone(prompts), at.to_vec(), base.into_std());
    std::thread::spawn(move || {
        for (i, ns) in at.into_iter().enumerate() {
            // Built while waiting for its due time, so building is off the clock.
            let prompt = prompts.get(i as u64);
            let due = base + Duration::from_nanos(ns);
            let now = std::time::Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let c = Arc::clone(&client);
            let due = Instant::from_std(due);
            let task = runtime.spawn(async move { (i as u64, due, c.complete(&prompt, out).await) });
            if tx.send(task).is_err() {
                break;
            }
        }
    });
    let mut done = Vec::new();
    while let Some(task) = rx.recv().await {
        if let Ok(x) = task.await {
            done.push(x);
        }
    }
    done
}

/// `users` loops, each sending its next request when the last is done.
async fn closed_loop(client: &Arc<Client>, prompts: &Arc<Prompts>, requests: u64, users: u32, out: u32) -> Vec<Sent> {
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..users)
        .map(|_| {
            let (c, p, next) = (Arc::clone(client), Arc::clone(prompts), Arc::clone(&next));
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        break;
                    }
                    let prompt = p.get(i);
                    let now = Instant::now();
                    mine.push((i, now, c.complete(&prompt, out).await));
                }
                mine
            })
        })
        .collect();
    let mut done = Vec::new();
    for w in workers {
        done.extend(w.await.unwrap_or_default());
    }
    done
}

fn measurement(index: u64, due: Instant, ex: Exchange, base: Instant, cfg: &BenchConfig) -> Measurement {
    let ns = |t: Instant| t.saturating_duration_since(base).as_nanos() as u64;
    let (chunks_ns, prompt, output, cached_tokens, failure) = match ex.result {
        Ok(reply) => {
            let chunks: Vec<u64> = reply.chunks.iter().map(|&t| ns(t)).collect();
            let output = reply.completion_tokens.unwrap_or(chunks.len() as u32);
            (chunks, reply.prompt_tokens.unwrap_or(cfg.sent_prompt_tokens()), output, reply.cached_tokens, None)
        }
        Err(f) => (Vec::new(), cfg.sent_prompt_tokens(), 0, None, Some(f)),
    };
    Measurement {
        index,
        scheduled_ns: ns(due),
        sent_ns: ns(ex.sent),
        chunks_ns,
        prompt_tokens: prompt,
        output_tokens: output,
        cached_tokens,
        failure,
    }
}

impl BenchConfig {
    /// Prompt tokens a request sends: its own and its shared prefix's.
    pub fn sent_prompt_tokens(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.shared_prefix.map_or(0, |(_, t)| t))
    }
}
