//! `llmsim bench`: load-test an OpenAI-compatible server.
//!
//! Exit codes: 0 the bench ran (failed requests are counted in the result,
//! not an exit code); 1 the server could not be reached, no request
//! succeeded, or an output could not be written; 2 bad usage, including a
//! flag over its limit ([`limits`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, ValueEnum};

use super::{CliError, csv_failure, print, write_output};
use llmsim_bench::client::Endpoint;
use llmsim_bench::{self as bench, BenchConfig, Load};
use llmsim_core::time::SimTime;
use llmsim_scenario::trace::{self, TraceRow};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("load").required(true).args(["rate", "concurrency"])))]
#[command(after_help = "Exit codes: 0 the bench ran (failed requests are counted in the result); 1 the server \
could not be reached, no request succeeded or an output could not be written; 2 bad usage.")]
pub struct BenchArgs {
    /// The server, e.g. http://127.0.0.1:8080 (plain HTTP).
    #[arg(long, value_name = "URL")]
    pub base_url: String,
    /// Model name sent in every request.
    #[arg(long, value_name = "NAME")]
    pub model: String,
    /// Open loop: requests per second, sent on schedule whether or not
    /// earlier ones finished.
    #[arg(long, value_name = "REQ_PER_S")]
    pub rate: Option<f64>,
    /// Gamma shape of the gaps with --rate: 1 is Poisson, below 1 burstier,
    /// above 1 smoother (vLLM's --burstiness); 0.01 to 1000.
    #[arg(long, default_value_t = 1.0, requires = "rate", value_name = "B")]
    pub burstiness: f64,
    /// Closed loop: this many users (at most 10000), each sending its next
    /// request when its previous one finished.
    #[arg(long, value_name = "USERS")]
    pub concurrency: Option<u32>,
    /// Measured requests (at most 1000000; times --output-tokens at most
    /// 100000000).
    #[arg(long, value_name = "N")]
    pub requests: u64,
    /// Prompt tokens of every request (by llmsim's built-in tokenizer; at
    /// most 1000000).
    #[arg(long, value_name = "P")]
    pub prompt_tokens: u32,
    /// Output tokens of every request (max_tokens, with ignore_eos; at most
    /// 1000000).
    #[arg(long, value_name = "O")]
    pub output_tokens: u32,
    /// Requests sent at once and awaited before measuring (not in the
    /// results; at most 10000).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub warmup: u64,
    /// Seed of the arrival schedule.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Per-request timeout in seconds (at most 86400); a request over it
    /// counts as failed.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub timeout: f64,
    /// Which endpoint to load.
    #[arg(long, value_enum, default_value_t = EndpointArg::Completions)]
    pub endpoint: EndpointArg,
    /// Label stored in the result (vLLM's `label`).
    #[arg(long)]
    pub label: Option<String>,
    /// Write the schedule used (arrival, prompt and output tokens) as a
    /// trace CSV; a closed loop writes its actual send times.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Start every prompt with one of GROUPS shared prefixes of TOKENS
    /// tokens (request i takes prefix i mod GROUPS), before its
    /// --prompt-tokens of its own: a server with prefix caching finds them.
    #[arg(long, value_name = "GROUPS:TOKENS")]
    pub shared_prefix: Option<String>,
    /// Multi-turn conversations of N turns (on the chat endpoint): each
    /// turn resends the conversation so far, answers included, plus
    /// --prompt-tokens new ones; --rate starts conversations, --requests
    /// counts turns (at most 10000).
    #[arg(long, value_name = "N")]
    pub turns: Option<u32>,
    /// Seconds between a turn's last token and the next turn (with --turns;
    /// at most 86400).
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS", requires = "turns")]
    pub think_time: f64,
    /// Write the result JSON (vllm bench serve's schema + llmsim_* keys).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Do not print the report.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum EndpointArg {
    /// POST /v1/completions with a text prompt.
    Completions,
    /// POST /v1/chat/completions with one user message.
    Chat,
}

/// What each flag may ask (docs/bench-diff.md, "Limits"): enough for any bench
/// a machine running it can hold, refused above that before anything is
/// allocated or sent.
pub mod limits {
    /// `--requests`.
    pub const REQUESTS: u64 = 1_000_000;
    /// `--prompt-tokens` (about 7 MB of prompt text, built per request as
    /// it is sent).
    pub const PROMPT_TOKENS: u32 = 1_000_000;
    /// `--output-tokens`.
    pub const OUTPUT_TOKENS: u32 = 1_000_000;
    /// `--shared-prefix` groups (each prefix text is built per request, so
    /// the count costs nothing; a bound keeps typos clear).
    pub const PREFIX_GROUPS: u32 = 1_000_000;
    /// `--requests` x `--output-tokens`: every token's arrival time is kept
    /// for the ITL arrays (8 bytes each in memory, about 20 in the JSON).
    pub const TOTAL_OUTPUT_TOKENS: u64 = 100_000_000;
    /// `--concurrency` and `--warmup` (warm-up requests are sent at once):
    /// each is an open connection.
    pub const CONNECTIONS: u64 = 10_000;
    /// `--requests` / `--rate`: the schedule's expected length, in seconds
    /// (11.6 days).
    pub const SCHEDULE_S: f64 = 1_000_000.0;
    /// `--burstiness`: gamma shapes outside it put gaps at 0 or at the
    /// limits of the clock.
    pub const BURSTINESS: (f64, f64) = (0.01, 1000.0);
    /// `--timeout`, seconds (one day).
    pub const TIMEOUT_S: f64 = 86_400.0;
    /// `--turns`: a conversation's prompt grows with every turn.
    pub const TURNS: u32 = 10_000;
    /// `--think-time`, seconds (one day).
    pub const THINK_S: f64 = 86_400.0;
}

/// A number for a message: plain when it is of ordinary size, else in
/// exponent form (`1e300`, not three hundred digits).
pub(crate) fn short(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e9).contains(&v.abs()) { format!("{v:e}") } else { format!("{v}") }
}

/// Checks the arguments and builds the bench.
pub fn config(a: &BenchArgs) -> Result<BenchConfig, CliError> {
    let usage = |m: String| Err(CliError::Usage(m));
    let url = a.base_url.trim_end_matches('/');
    if url.starts_with("https://") {
        return usage(format!(
            "--base-url {url}: https is not supported (llmsim bench speaks plain HTTP to local servers)"
        ));
    }
    if !url.starts_with("http://") || url.len() <= "http://".len() {
        return usage(format!("--base-url `{}` is not allowed: give http://HOST:PORT", a.base_url));
    }
    for (flag, v, max) in [
        ("--requests", a.requests, limits::REQUESTS),
        ("--prompt-tokens", a.prompt_tokens.into(), limits::PROMPT_TOKENS.into()),
        ("--output-tokens", a.output_tokens.into(), limits::OUTPUT_TOKENS.into()),
    ] {
        if v == 0 || v > max {
            return usage(format!("{flag} {v} is not allowed: must be in [1, {max}]"));
        }
    }
    let total = a.requests * u64::from(a.output_tokens);
    if total > limits::TOTAL_OUTPUT_TOKENS {
        return usage(format!(
            "--requests {} x --output-tokens {} = {total} output tokens is not allowed: at most {} (every token's \
             arrival time is kept for the result)",
            a.requests,
            a.output_tokens,
            limits::TOTAL_OUTPUT_TOKENS
        ));
    }
    if a.warmup > limits::CONNECTIONS {
        return usage(format!("--warmup {} is not allowed: at most {} (sent at once)", a.warmup, limits::CONNECTIONS));
    }
    let (lo, hi) = limits::BURSTINESS;
    let load = match (a.rate, a.concurrency) {
        (Some(r), _) if !(r.is_finite() && r > 0.0) => {
            return usage(format!("--rate {} is not allowed: must be > 0", short(r)));
        }
        (Some(r), _) if a.requests as f64 / r > limits::SCHEDULE_S => {
            return usage(format!(
                "--rate {} is not allowed with --requests {}: the schedule would last about {} s, more than {} s",
                short(r),
                a.requests,
                short((a.requests as f64 / r).round()),
                limits::SCHEDULE_S
            ));
        }
        (Some(_), _) if !(a.burstiness.is_finite() && (lo..=hi).contains(&a.burstiness)) => {
            return usage(format!("--burstiness {} is not allowed: must be in [{lo}, {hi}]", short(a.burstiness)));
        }
        (Some(rate), _) => Load::Open { rate, burstiness: a.burstiness },
        (None, Some(c)) if c == 0 || u64::from(c) > limits::CONNECTIONS => {
            return usage(format!("--concurrency {c} is not allowed: must be in [1, {}]", limits::CONNECTIONS));
        }
        (None, Some(c)) => Load::Closed { concurrency: c },
        (None, None) => return usage("give --rate R (open loop) or --concurrency C (closed loop)".into()),
    };
    if !(a.timeout.is_finite() && a.timeout > 0.0 && a.timeout <= limits::TIMEOUT_S) {
        return usage(format!(
            "--timeout {} is not allowed: must be a number of seconds in (0, {}]",
            short(a.timeout),
            limits::TIMEOUT_S
        ));
    }
    let cfg = BenchConfig {
        base_url: url.to_string(),
        model: a.model.clone(),
        load,
        requests: a.requests,
        prompt_tokens: a.prompt_tokens,
        output_tokens: a.output_tokens,
        warmup: a.warmup,
        seed: a.seed,
        timeout: Duration::from_secs_f64(a.timeout),
        endpoint: match a.endpoint {
            EndpointArg::Completions => Endpoint::Completions,
            EndpointArg::Chat => Endpoint::Chat,
        },
        label: a.label.clone(),
        shared_prefix: a.shared_prefix.as_deref().map(shared_prefix).transpose().map_err(CliError::Usage)?,
        turns: turns(a)?,
    };
    bench::content_words(&cfg).map_err(|e| CliError::Usage(e.to_string()))?;
    Ok(cfg)
}

/// `--turns N --think-time S`: on the chat endpoint, without
/// `--shared-prefix`, with room for a later turn's template.
fn turns(a: &BenchArgs) -> Result<Option<bench::Turns>, CliError> {
    let usage = |m: String| Err(CliError::Usage(m));
    let Some(n) = a.turns else { return Ok(None) };
    if n == 0 || n > limits::TURNS {
        return usage(format!("--turns {n} is not allowed: must be in [1, {}]", limits::TURNS));
    }
    if !(a.think_time.is_finite() && (0.0..=limits::THINK_S).contains(&a.think_time)) {
        return usage(format!(
            "--think-time {} is not allowed: must be a number of seconds in [0, {}]",
            short(a.think_time),
            limits::THINK_S
        ));
    }
    if a.endpoint != EndpointArg::Chat {
        return usage(format!(
            "--turns {n} needs --endpoint chat: a conversation resends its answers as the assistant's messages \
             (on the completions endpoint a resent answer's text need not split into the same tokens where it \
             meets the prompt, so the server's prefix cache would not see the history the planner predicts)"
        ));
    }
    if a.shared_prefix.is_some() {
        return usage(format!(
            "--turns {n} with --shared-prefix is not supported: give one or the other (a scenario may combine \
             workload.sessions and workload.shared_prefix)"
        ));
    }
    let least = bench::TURN_TEMPLATE + 1;
    if a.prompt_tokens < least {
        return usage(format!(
            "--prompt-tokens {} is too small with --turns: a later turn spends {} of its tokens on the chat \
             template (the answer's closing, the new user message's framing, the assistant's priming), so give at \
             least {least}",
            a.prompt_tokens,
            bench::TURN_TEMPLATE
        ));
    }
    Ok(Some(bench::Turns { turns: n, think_s: a.think_time }))
}

/// `--shared-prefix GROUPS:TOKENS`, each a whole number >= 1, the prompt
/// (prefix and own tokens) within `--prompt-tokens`' limit.
fn shared_prefix(text: &str) -> Result<(u32, u32), String> {
    let bad = |why: &str| format!("--shared-prefix `{text}` is not allowed: {why}");
    let (g, t) = text.split_once(':').ok_or_else(|| bad("give GROUPS:TOKENS, e.g. 4:1000"))?;
    let num = |v: &str, max: u32| v.trim().parse::<u32>().ok().filter(|n| (1..=max).contains(n));
    let groups = num(g, limits::PREFIX_GROUPS)
        .ok_or_else(|| bad(&format!("GROUPS must be a whole number in [1, {}]", limits::PREFIX_GROUPS)))?;
    let tokens = num(t, limits::PROMPT_TOKENS)
        .ok_or_else(|| bad(&format!("TOKENS must be a whole number in [1, {}]", limits::PROMPT_TOKENS)))?;
    Ok((groups, tokens))
}

/// The `prefix_id,prefix_tokens` of each trace row of a `--shared-prefix`
/// bench, in the order of its rows (the schedule; a closed loop's rows are
/// its send times in order): `sys:<group>` and the prefix's tokens, plus
/// the chat template's `<|im_start|>user\n` (3 tokens) that comes before
/// it on the chat endpoint, so `llmsim run` on the trace predicts the hits.
fn prefix_content(run: &bench::BenchRun, (groups, tokens): (u32, u32)) -> Vec<trace::RowContent> {
    let chat = run.config.endpoint == Endpoint::Chat;
    let framing = if chat { 3 } else { 0 };
    let indices: Vec<u64> = match run.config.load {
        Load::Open { .. } => (0..run.schedule_ns.len() as u64).collect(),
        Load::Closed { .. } => {
            let mut sent: Vec<(u64, u64)> = run.records.iter().map(|r| (r.sent_ns, r.index)).collect();
            sent.sort_unstable();
            sent.into_iter().map(|(_, i)| i).collect()
        }
    };
    indices
        .into_iter()
        .map(|i| {
            let group = bench::schedule::prefix_group(i, groups);
            let prefix = trace::Prefix {
                id: llmsim_planner::workload::content::group_name(group as u32),
                tokens: tokens.saturating_add(framing),
            };
            trace::RowContent { prefix: Some(prefix), ..trace::RowContent::default() }
        })
        .collect()
}

/// The trace rows of a multi-turn bench, in the order the turns were
/// sent: each at its send time, with the prompt and output tokens the
/// server reported (a failed turn: the tokens it asked for) and its
/// conversation as `session_id` (`c<conversation>`), so `llmsim run`
/// replays each turn as continuing the one before.
fn session_rows(run: &bench::BenchRun) -> (Vec<TraceRow>, Vec<trace::RowContent>) {
    let mut sent: Vec<&bench::Measurement> = run.records.iter().collect();
    sent.sort_by_key(|r| (r.sent_ns, r.index));
    sent.into_iter()
        .map(|r| {
            let output = if r.ok() { r.output_tokens.max(1) } else { run.config.output_tokens };
            let row = TraceRow { arrival: SimTime::from_nanos(r.sent_ns), prompt: r.prompt_tokens, output };
            let content =
                trace::RowContent { session: r.session.map(|s| format!("c{s}")), ..trace::RowContent::default() };
            (row, content)
        })
        .unzip()
}

pub fn execute(a: BenchArgs) -> Result<(), CliError> {
    let cfg = config(&a)?;
    let run = bench::run(&cfg, &super::runtime::bench_runtime()?).map_err(|e| CliError::Failure(e.to_string()))?;
    let json = bench::result::to_json(&run, utc_date());
    if let Some(path) = &a.json {
        write_output(path, llmsim_core::util::to_json(&json).as_bytes())?;
    }
    if let (Some(path), Some(_)) = (&a.trace, cfg.turns) {
        let (rows, content) = session_rows(&run);
        let mut bytes = Vec::new();
        trace::write_with_content(&mut bytes, &rows, Some(&content)).map_err(|e| csv_failure(path, e))?;
        write_output(path, &bytes)?;
    } else if let Some(path) = &a.trace {
        let rows: Vec<TraceRow> = run
            .schedule_ns
            .iter()
            .map(|&ns| TraceRow {
                arrival: SimTime::from_nanos(ns),
                prompt: cfg.sent_prompt_tokens(),
                output: cfg.output_tokens,
            })
            .collect();
        let content = cfg.shared_prefix.map(|sp| prefix_content(&run, sp));
        let mut bytes = Vec::new();
        trace::write_with_content(&mut bytes, &rows, content.as_deref()).map_err(|e| csv_failure(path, e))?;
        write_output(path, &bytes)?;
    }
    let to_stdout = [&a.json, &a.trace].iter().any(|p| p.as_deref() == Some(std::path::Path::new("-")));
    if !a.quiet && !to_stdout {
        print(&bench::table::render(&run, &json))?;
    }
    if json.completed == 0 {
        return Err(CliError::Failure(format!(
            "no request succeeded ({} failed; first error: {})",
            json.failed,
            json.errors.iter().find(|e| !e.is_empty()).map_or("none", String::as_str)
        )));
    }
    Ok(())
}

/// Now as `YYYYMMDD-HHMMSS` in UTC (vLLM writes local time; a fixed zone
/// keeps files comparable across machines).
fn utc_date() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Seconds since 1970 as `YYYYMMDD-HHMMSS` (proleptic Gregorian, UTC).
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = llmsim_core::util::civil_date(days);
    format!("{year:04}{month:02}{day:02}-{:02}{:02}{:02}", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(super::format_utc(0), "19700101-000000");
        assert_eq!(super::format_utc(951_782_400 + 3661), "20000229-010101");
        assert_eq!(super::format_utc(1_776_000_000), "20260412-132000");
    }
}
