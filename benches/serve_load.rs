//! A closed-loop load generator for `llmsim serve`, used for docs/serve.md's
//! speed figures: `concurrency` clients each stream one chat completion
//! after another (a new connection per stream) for `warmup + duration`
//! seconds. After the warm-up it resets `/metrics/summary`; at the end it
//! prints the server's summary for the model: completed streams, output
//! tokens per second and the lag percentiles the server measured.
//!
//! cargo bench --bench serve_load -- ADDR MODEL CONCURRENCY [DURATION_S] [WARMUP_S]
//! e.g. cargo bench --bench serve_load -- 127.0.0.1:8080 bench-fixed 500 10 3

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

struct Args {
    addr: String,
    model: String,
    concurrency: usize,
    duration: Duration,
    warmup: Duration,
}

fn args() -> Result<Args, String> {
    // `cargo bench` passes `--bench` to harness-less benchmarks: not ours.
    let a: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let usage = "usage: serve_load ADDR MODEL CONCURRENCY [DURATION_S] [WARMUP_S]";
    if a.len() < 3 {
        return Err(usage.into());
    }
    let secs = |i: usize, default: f64| -> Result<Duration, String> {
        a.get(i)
            .map_or(Ok(default), |s| s.parse::<f64>().map_err(|e| format!("{s}: {e}; {usage}")))
            .map(Duration::from_secs_f64)
    };
    Ok(Args {
        addr: a[0].clone(),
        model: a[1].clone(),
        concurrency: a[2].parse().map_err(|e| format!("{}: {e}; {usage}", a[2]))?,
        duration: secs(3, 10.0)?,
        warmup: secs(4, 3.0)?,
    })
}

/// One request with `Connection: close`; returns the bytes of the answer.
async fn exchange(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    Ok(out)
}

async fn client(addr: String, body: String, until: Instant) -> (u64, u64) {
    let (mut ok, mut failed) = (0, 0);
    while Instant::now() < until {
        match exchange(&addr, "POST", "/v1/chat/completions", &body).await {
            Ok(bytes) if bytes.windows(12).any(|w| w == b"data: [DONE]") => ok += 1,
            _ => failed += 1,
        }
    }
    (ok, failed)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let body = format!(
        r#"{{"model":"{}","stream":true,"messages":[{{"role":"user","content":"Tell me about load testing."}}]}}"#,
        a.model
    );
    let until = Instant::now() + a.warmup + a.duration;
    let clients: Vec<_> =
        (0..a.concurrency).map(|_| tokio::spawn(client(a.addr.clone(), body.clone(), until))).collect();
    tokio::time::sleep(a.warmup).await;
    let _ = exchange(&a.addr, "POST", "/metrics/summary/reset", "").await;
    tokio::time::sleep(a.duration).await;
    let summary = exchange(&a.addr, "GET", "/metrics/summary", "").await.unwrap_or_default();
    let (mut ok, mut failed) = (0, 0);
    for c in clients {
        let (o, f) = c.await.unwrap_or((0, 0));
        ok += o;
        failed += f;
    }
    let text = String::from_utf8_lossy(&summary);
    let json = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let m = &v["models"][&a.model];
    let window = v["window_s"].as_f64().unwrap_or(0.0);
    println!(
        "model={} concurrency={} window_s={window:.1} streams_per_s={:.1} output_tok_per_s={:.0} \
         lag_p50_ms={:.3} lag_p99_ms={:.3} delivery_lag_p99_ms={:.3} observed_itl_p99_ms={:.3} client_ok={ok} client_failed={failed}",
        a.model,
        a.concurrency,
        m["throughput"]["requests_per_s"].as_f64().unwrap_or(0.0),
        m["throughput"]["output_tokens_per_s"].as_f64().unwrap_or(0.0),
        m["lag_ms"]["p50"].as_f64().unwrap_or(f64::NAN),
        m["lag_ms"]["p99"].as_f64().unwrap_or(f64::NAN),
        m["delivery_lag_ms"]["p99"].as_f64().unwrap_or(f64::NAN),
        m["observed"]["itl_ms"]["p99"].as_f64().unwrap_or(f64::NAN),
    );
}
