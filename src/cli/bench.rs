//! `llmsim bench`: load-test an OpenAI-compatible server.
//!
//! Exit codes: 0 the bench ran (failed requests are counted in the result,
//! not an exit code); 1 no request succeeded, or an output could not be
//! written; 2 bad usage.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, ValueEnum};

use super::{CliError, csv_failure, print, write_output};
use crate::bench::client::Endpoint;
use crate::bench::{self, BenchConfig, Load};
use crate::time::SimTime;
use crate::workload::trace::{self, TraceRow};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("load").required(true).args(["rate", "concurrency"])))]
#[command(after_help = "Exit codes: 0 the bench ran (failed requests are counted in the result); 1 no request \
succeeded or an output could not be written; 2 bad usage.")]
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
    /// above 1 smoother (vLLM's --burstiness).
    #[arg(long, default_value_t = 1.0, requires = "rate", value_name = "B")]
    pub burstiness: f64,
    /// Closed loop: this many users, each sending its next request when its
    /// previous one finished.
    #[arg(long, value_name = "USERS")]
    pub concurrency: Option<u32>,
    /// Measured requests.
    #[arg(long, value_name = "N")]
    pub requests: u64,
    /// Prompt tokens of every request (by llmsim's built-in tokenizer).
    #[arg(long, value_name = "P")]
    pub prompt_tokens: u32,
    /// Output tokens of every request (max_tokens, with ignore_eos).
    #[arg(long, value_name = "O")]
    pub output_tokens: u32,
    /// Requests sent and awaited before measuring (not in the results).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub warmup: u64,
    /// Seed of the arrival schedule.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Per-request timeout in seconds; a request over it counts as failed.
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
    let load = match (a.rate, a.concurrency) {
        (Some(r), _) if !(r.is_finite() && r > 0.0) => return usage(format!("--rate {r} is not allowed: must be > 0")),
        (Some(_), _) if !(a.burstiness.is_finite() && a.burstiness > 0.0) => {
            return usage(format!("--burstiness {} is not allowed: must be > 0", a.burstiness));
        }
        (Some(rate), _) => Load::Open { rate, burstiness: a.burstiness },
        (None, Some(0)) => return usage("--concurrency 0 is not allowed: must be >= 1".into()),
        (None, Some(c)) => Load::Closed { concurrency: c },
        (None, None) => return usage("give --rate R (open loop) or --concurrency C (closed loop)".into()),
    };
    for (flag, v) in [
        ("--requests", a.requests),
        ("--prompt-tokens", a.prompt_tokens.into()),
        ("--output-tokens", a.output_tokens.into()),
    ] {
        if v == 0 {
            return usage(format!("{flag} 0 is not allowed: must be >= 1"));
        }
    }
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        return usage(format!("--timeout {} is not allowed: must be a number of seconds > 0", a.timeout));
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
    };
    bench::content_words(&cfg).map_err(CliError::Usage)?;
    Ok(cfg)
}

pub fn execute(a: BenchArgs) -> Result<(), CliError> {
    let cfg = config(&a)?;
    let run = bench::run(&cfg).map_err(CliError::Failure)?;
    let json = bench::report::to_json(&run, utc_date());
    if let Some(path) = &a.json {
        write_output(path, crate::report::to_json(&json).as_bytes())?;
    }
    if let Some(path) = &a.trace {
        let rows: Vec<TraceRow> = run
            .schedule_ns
            .iter()
            .map(|&ns| TraceRow {
                arrival: SimTime::from_nanos(ns),
                prompt: cfg.prompt_tokens,
                output: cfg.output_tokens,
            })
            .collect();
        let mut bytes = Vec::new();
        trace::write(&mut bytes, &rows).map_err(|e| csv_failure(path, e))?;
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
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
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
