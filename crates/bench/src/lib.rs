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
    /// `--turns N [--think-time S]`: multi-turn conversations.
    pub turns: Option<Turns>,
}

/// `llmsim bench --turns N --think-time S` (docs/prefix-caching.md):
/// requests are the turns of conversations on the chat endpoint. A
/// conversation's first turn has `--prompt-tokens`; each next one, sent
/// `think_s` after the last token of the one before, resends every
/// message so far (the answers as the assistant's messages, as the server
/// sent them) plus a new user message, so its prompt is the previous
/// prompt and answer plus `--prompt-tokens` (the planner's
/// `workload.sessions`). `--rate` starts conversations, `--concurrency`
/// users each run one conversation after another; `--requests` counts
/// turns. A failed turn ends its conversation: its later turns are not sent.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Turns {
    pub turns: u32,
    pub think_s: f64,
}

impl Turns {
    /// Conversations that make `requests` turns (the last may be short).
    pub fn conversations(&self, requests: u64) -> u64 {
        requests.div_ceil(u64::from(self.turns.max(1)))
    }
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
    /// With `--turns`: the conversation it is a turn of (turn
    /// `index mod turns`).
    pub session: Option<u64>,
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

/// Why a bench sent nothing: its prompts cannot be built, or the server
/// cannot be reached. (Failed requests are measured, not errors.)
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// `--prompt-tokens` below what the chat template alone costs.
    #[error(
        "--prompt-tokens {prompt_tokens} is too small for the chat endpoint: its template costs {} \
         tokens per message and {} per prompt, so give at least {}",
        llmsim_content::tokenizer::PER_MESSAGE_OVERHEAD,
        llmsim_content::tokenizer::PER_PROMPT_OVERHEAD,
        llmsim_content::tokenizer::PER_MESSAGE_OVERHEAD + llmsim_content::tokenizer::PER_PROMPT_OVERHEAD + 1
    )]
    PromptTooShort { prompt_tokens: u32 },
    /// The HTTP client could not be built (reqwest's reason).
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// `GET /health` got no answer.
    #[error("cannot reach {base_url}: {reason}; no request was sent")]
    Unreachable { base_url: String, reason: String },
}

/// Runs the bench on `rt`, a multi-threaded runtime the caller built
/// (`cli::runtime::bench_runtime`).
pub fn run(cfg: &BenchConfig, rt: &tokio::runtime::Runtime) -> Result<BenchRun, BenchError> {
    rt.block_on(run_async(cfg))
}

async fn run_async(cfg: &BenchConfig) -> Result<BenchRun, BenchError> {
    let words = content_words(cfg)?;
    let client = Arc::new(Client::new(&cfg.base_url, &cfg.model, cfg.endpoint, cfg.timeout)?);
    client.reachable().await.map_err(|reason| BenchError::Unreachable { base_url: cfg.base_url.clone(), reason })?;
    let nonce = run_nonce();
    if cfg.warmup > 0 {
        warm_up(&client, cfg, &format!("w{nonce}"), words).await;
    }
    let reset = reset_summary(&client).await;
    let prompts = Arc::new(Prompts { run: format!("m{nonce}"), words, seed: cfg.seed, prefix: cfg.shared_prefix });
    let ticker = Ticker::start();
    let base = Instant::now();
    let (schedule_ns, exchanges) = match (cfg.load, cfg.turns) {
        (load, Some(turns)) => (Vec::new(), conversations(&client, &prompts, cfg, load, turns, base).await),
        (Load::Open { rate, burstiness }, None) => {
            let at: Vec<u64> = schedule::open_schedule(rate, burstiness, cfg.requests, cfg.seed)
                .into_iter()
                .map(|t| t.as_nanos())
                .collect();
            let ex = open_loop(&client, &prompts, &at, base, cfg.output_tokens).await;
            (at, ex)
        }
        (Load::Closed { concurrency }, None) => {
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
    if let Some(t) = cfg.turns {
        for r in &mut records {
            r.session = Some(r.index / u64::from(t.turns));
        }
    }
    let schedule_ns = if schedule_ns.is_empty() {
        // A closed loop's schedule is when it sent, in time order (users
        // race for the next index, so index order can be a hair off); so
        // is a multi-turn bench's (a later turn is due when it is sent).
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
    /// The new user message of turn `turn` of a multi-turn bench (request
    /// `index`): `words` one-token words for the first turn; a later turn
    /// spends 10 of its tokens on the template (the answer's closing
    /// `<|im_end|>\n`, the message's 5, the assistant's priming 3).
    fn turn(&self, index: u64, turn: u64) -> String {
        let words = if turn == 0 { self.words } else { self.words.saturating_sub(TURN_TEMPLATE - FIRST_TEMPLATE) };
        schedule::prompt(&self.run, index, words.max(1), self.seed)
    }

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

/// Template tokens of a chat's first turn (one user message and the
/// assistant's priming) and of each later turn (also the closing of the
/// answer before it).
pub const FIRST_TEMPLATE: u32 = 8;
pub const TURN_TEMPLATE: u32 = 10;

/// Words of prompt text per request (see [`schedule::content_tokens`]).
pub fn content_words(cfg: &BenchConfig) -> Result<u32, BenchError> {
    schedule::content_tokens(cfg.prompt_tokens, cfg.endpoint == Endpoint::Chat)
        .ok_or(BenchError::PromptTooShort { prompt_tokens: cfg.prompt_tokens })
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

/// The turns of a multi-turn bench ([`Turns`]): conversation `c`'s turn
/// `t` is request `c x turns + t`. An open loop starts conversation `c` at
/// the schedule's `c`-th arrival; a closed loop's users each take the
/// next conversation when theirs is over.
async fn conversations(
    client: &Arc<Client>,
    prompts: &Arc<Prompts>,
    cfg: &BenchConfig,
    load: Load,
    turns: Turns,
    base: Instant,
) -> Vec<Sent> {
    let n = turns.conversations(cfg.requests);
    let (requests, out) = (cfg.requests, cfg.output_tokens);
    let run = move |c: Arc<Client>, p: Arc<Prompts>, conv: u64, due: Instant| async move {
        conversation(&c, &p, conv, turns, requests, out, due).await
    };
    let mut tasks = Vec::new();
    match load {
        Load::Open { rate, burstiness } => {
            for (conv, at) in schedule::open_schedule(rate, burstiness, n, cfg.seed).into_iter().enumerate() {
                let due = base + Duration::from_nanos(at.as_nanos());
                tokio::time::sleep_until(due).await;
                tasks.push(tokio::spawn(run(Arc::clone(client), Arc::clone(prompts), conv as u64, due)));
            }
        }
        Load::Closed { concurrency } => {
            let next = Arc::new(AtomicU64::new(0));
            for _ in 0..concurrency {
                let (c, p, next) = (Arc::clone(client), Arc::clone(prompts), Arc::clone(&next));
                tasks.push(tokio::spawn(async move {
                    let mut mine = Vec::new();
                    loop {
                        let conv = next.fetch_add(1, Ordering::Relaxed);
                        if conv >= n {
                            break mine;
                        }
                        mine.extend(run(Arc::clone(&c), Arc::clone(&p), conv, Instant::now()).await);
                    }
                }));
            }
        }
    }
    let mut done = Vec::new();
    for t in tasks {
        done.extend(t.await.unwrap_or_default());
    }
    done
}

/// One conversation: its turns in order, each resending the messages so
/// far; ends early at a failed turn.
async fn conversation(
    client: &Client,
    prompts: &Prompts,
    conv: u64,
    turns: Turns,
    requests: u64,
    out: u32,
    first_due: Instant,
) -> Vec<Sent> {
    let mut messages: Vec<(&str, String)> = Vec::new();
    let mut sent = Vec::new();
    for t in 0..u64::from(turns.turns) {
        let index = conv * u64::from(turns.turns) + t;
        if index >= requests {
            break;
        }
        let due = if t == 0 {
            first_due
        } else {
            tokio::time::sleep(Duration::from_secs_f64(turns.think_s)).await;
            Instant::now()
        };
        messages.push(("user", prompts.turn(index, t)));
        let view: Vec<(&str, &str)> = messages.iter().map(|(r, c)| (*r, c.as_str())).collect();
        let ex = client.converse(&view, out).await;
        let answer = ex.result.as_ref().ok().map(|r| r.text.clone().unwrap_or_default());
        sent.push((index, due, ex));
        match answer {
            Some(text) => messages.push(("assistant", text)),
            None => break,
        }
    }
    sent
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
    let sent_prompt = ex.counted.unwrap_or(cfg.sent_prompt_tokens());
    let (chunks_ns, prompt, output, cached_tokens, failure) = match ex.result {
        Ok(reply) => {
            let chunks: Vec<u64> = reply.chunks.iter().map(|&t| ns(t)).collect();
            let output = reply.completion_tokens.unwrap_or(chunks.len() as u32);
            (chunks, reply.prompt_tokens.unwrap_or(sent_prompt), output, reply.cached_tokens, None)
        }
        Err(f) => (Vec::new(), sent_prompt, 0, None, Some(f)),
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
        session: None,
    }
}

impl BenchConfig {
    /// Prompt tokens a request sends: its own and its shared prefix's.
    pub fn sent_prompt_tokens(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.shared_prefix.map_or(0, |(_, t)| t))
    }
}
