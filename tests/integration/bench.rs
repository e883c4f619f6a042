//! Integration tests: `llmsim bench` against a tiny mock OpenAI server
//! written here (std threads and sockets, loopback only), so the bench is
//! tested without any real server. The mock streams one SSE chunk per
//! token with a 1 ms gap and logs what it was sent. No test asserts a
//! wall-clock duration.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// How the mock behaves.
#[derive(Clone, Copy, Default)]
struct Behaviour {
    /// Serve /metrics/summary and its reset.
    summary: bool,
    /// Answer every n-th completion (1-based) with HTTP 500.
    fail_every: Option<usize>,
    /// Never answer the n-th completion (1-based).
    hang: Option<usize>,
}

/// One thing the mock was asked.
#[derive(Clone, Debug)]
enum Logged {
    Completion(Value),
    Reset,
    Summary,
}

struct Mock {
    port: u16,
    log: Arc<Mutex<Vec<Logged>>>,
    max_active: Arc<AtomicUsize>,
}

impl Mock {
    fn start(b: Behaviour) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let active = Arc::new(AtomicUsize::new(0));
        let max_active = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(0));
        let (l, a, m) = (Arc::clone(&log), Arc::clone(&active), Arc::clone(&max_active));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (l, a, m, s) = (Arc::clone(&l), Arc::clone(&a), Arc::clone(&m), Arc::clone(&seen));
                std::thread::spawn(move || serve(stream, b, &l, &a, &m, &s));
            }
        });
        Mock { port, log, max_active }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }

    fn completions(&self) -> Vec<Value> {
        self.log().into_iter().filter_map(|l| if let Logged::Completion(v) = l { Some(v) } else { None }).collect()
    }
}

/// Reads one HTTP request: method, path, body.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut length = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        if h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).ok()?;
    Some((method, path, body))
}

fn reply(s: &mut TcpStream, status: &str, body: &str) {
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn serve(
    stream: TcpStream,
    b: Behaviour,
    log: &Mutex<Vec<Logged>>,
    active: &AtomicUsize,
    max_active: &AtomicUsize,
    seen: &AtomicUsize,
) {
    let mut out = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let Some((method, path, body)) = read_request(&mut reader) else { return };
    match (method.as_str(), path.as_str(), b.summary) {
        ("POST", "/metrics/summary/reset", true) => {
            log.lock().unwrap().push(Logged::Reset);
            reply(&mut out, "200 OK", "{}");
        }
        ("GET", "/metrics/summary", true) => {
            log.lock().unwrap().push(Logged::Summary);
            let s = r#"{"schema_version": 1, "models": {"m": {"observed": {"ttft_ms": {"p50": 3.5}},
                "simulated": {"ttft_ms": {"p50": 2.25}}, "lag_ms": {"p99": 0.5}}}}"#;
            reply(&mut out, "200 OK", s);
        }
        ("POST", "/v1/completions" | "/v1/chat/completions", _) => {
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            log.lock().unwrap().push(Logged::Completion(req.clone()));
            if b.fail_every.is_some_and(|k| n.is_multiple_of(k)) {
                return reply(&mut out, "500 Internal Server Error", r#"{"error": {"message": "boom"}}"#);
            }
            if b.hang == Some(n) {
                std::thread::sleep(Duration::from_secs(30));
                return;
            }
            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
            max_active.fetch_max(now, Ordering::SeqCst);
            // The request stops counting before its last chunks go out: a
            // closed-loop user sends its next request as soon as it reads
            // them, which may be before this thread runs again.
            stream_tokens(&mut out, &req, path == "/v1/chat/completions", || {
                active.fetch_sub(1, Ordering::SeqCst);
            });
        }
        _ => reply(&mut out, "404 Not Found", r#"{"error": {"message": "no such route"}}"#),
    }
}

/// Streams `max_tokens` one-token chunks, the finish chunk, usage, [DONE];
/// `before_finish` runs just before the finish chunk is sent.
fn stream_tokens(out: &mut TcpStream, req: &Value, chat: bool, before_finish: impl FnOnce()) {
    let n = req["max_tokens"].as_u64().unwrap_or(1);
    let prompt = if chat { req["messages"][0]["content"].as_str() } else { req["prompt"].as_str() };
    let prompt_tokens = prompt.unwrap_or("").split_whitespace().count();
    let _ = write!(out, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
    let mut send = |data: String| {
        let _ = write!(out, "data: {data}\n\n");
        let _ = out.flush();
    };
    if chat {
        send(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#.into());
    }
    for i in 0..n {
        std::thread::sleep(Duration::from_millis(1));
        send(if chat {
            format!(r#"{{"choices":[{{"index":0,"delta":{{"content":" w{i}"}}}}]}}"#)
        } else {
            format!(r#"{{"choices":[{{"index":0,"text":" w{i}","finish_reason":null}}]}}"#)
        });
    }
    before_finish();
    send(r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#.into());
    send(format!(r#"{{"choices":[],"usage":{{"prompt_tokens":{prompt_tokens},"completion_tokens":{n}}}}}"#));
    send("[DONE]".into());
}

fn bench(mock: &Mock, extra: &[&str]) -> TestCommand {
    TestCommand::new(&["bench", "--base-url"]).arg(mock.url()).arg("--model").arg("m").args(extra)
}

trait Args {
    fn args(self, a: &[&str]) -> Self;
}
impl Args for TestCommand {
    fn args(mut self, a: &[&str]) -> Self {
        for x in a {
            self = self.arg(x);
        }
        self
    }
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn an_open_loop_bench_writes_vllms_schema_with_every_request() {
    let mock = Mock::start(Behaviour { summary: true, ..Behaviour::default() });
    let dir = tempdir();
    let out_json = dir.path().join("b.json");
    let out = bench(&mock, &["--rate", "50", "--requests", "20", "--prompt-tokens", "16", "--output-tokens", "4"])
        .args(&["--warmup", "2", "--seed", "3", "--json"])
        .arg(&out_json)
        .ok();
    let j = read_json(&out_json);
    assert_eq!((j["completed"].as_u64(), j["failed"].as_u64()), (Some(20), Some(0)));
    assert_eq!((j["num_prompts"].as_u64(), j["request_rate"].as_f64()), (Some(20), Some(50.0)));
    assert_eq!(j["input_lens"].as_array().unwrap().iter().filter(|x| x.as_u64() == Some(16)).count(), 20);
    assert_eq!(j["output_lens"].as_array().unwrap().iter().filter(|x| x.as_u64() == Some(4)).count(), 20);
    assert!(j["itls"].as_array().unwrap().iter().all(|r| r.as_array().unwrap().len() == 3), "one gap per chunk");
    for key in ["ttfts", "latencies", "start_times", "queue_times", "llmsim_scheduled_times"] {
        assert_eq!(j[key].as_array().map(Vec::len), Some(20), "{key}");
    }
    let (ttfts, lat) = (floats(&j["ttfts"]), floats(&j["latencies"]));
    // Chunks that reach the client in one read share its time stamp (as
    // they arrived together), so on a loaded machine all of a reply's
    // chunks can come at once: E2E is then its TTFT, never below it.
    assert!(ttfts.iter().zip(&lat).all(|(t, l)| *t > 0.0 && l >= t), "TTFT by E2E");
    for stat in ["mean", "median", "std", "p50", "p90", "p99"] {
        for metric in ["ttft", "tpot", "itl", "e2el"] {
            assert!(j[format!("{stat}_{metric}_ms")].is_f64(), "{stat}_{metric}_ms");
        }
    }
    assert!(j["llmsim_from_scheduled"]["p99_ttft_ms"].as_f64().unwrap() >= j["p99_ttft_ms"].as_f64().unwrap() - 1e-9);
    assert_eq!(j["llmsim_server_summary"]["models"]["m"]["simulated"]["ttft_ms"]["p50"].as_f64(), Some(2.25));
    assert_eq!(j["errors"].as_array().unwrap().iter().filter(|e| *e == "").count(), 20);
    let table = out.stdout();
    for col in ["client:sched", "client:send", "server:observed", "server:simulated", "TTFT p50", "20 completed"] {
        assert!(table.contains(col), "{col} missing:\n{table}");
    }
    let ttft = table.lines().find(|l| l.starts_with("  TTFT p50")).unwrap();
    assert!(ttft.ends_with("3.50           2.25"), "server columns: {ttft}");
}

#[test]
fn requests_pin_the_output_and_every_prompt_is_distinct_with_the_requested_tokens() {
    let mock = Mock::start(Behaviour { summary: true, ..Behaviour::default() });
    bench(&mock, &["--rate", "100", "--requests", "12", "--prompt-tokens", "32", "--output-tokens", "3"])
        .args(&["--warmup", "3", "-q"])
        .ok();
    let reqs = mock.completions();
    assert_eq!(reqs.len(), 15);
    let mut firsts = std::collections::BTreeSet::new();
    for r in &reqs {
        assert_eq!(r["model"], "m");
        assert_eq!(r["max_tokens"], 3);
        assert_eq!(r["ignore_eos"], true);
        assert_eq!(r["stream"], true);
        assert_eq!(r["stream_options"]["include_usage"], true);
        let prompt = r["prompt"].as_str().unwrap();
        let words: Vec<&str> = prompt.split(' ').skip(1).collect();
        assert!(prompt.starts_with(' '), "every word has its leading space");
        assert_eq!(words.len(), 32, "{prompt}");
        assert!(words.iter().all(|w| !w.is_empty() && w.bytes().all(|c| c.is_ascii_lowercase())), "{prompt}");
        firsts.insert(words[0].to_string());
    }
    assert_eq!(firsts.len(), 15, "no two prompts share even their first token");
    // Warm-up first, then the reset, then the measured requests, then the read.
    let kinds: Vec<&str> = mock
        .log()
        .iter()
        .map(|l| match l {
            Logged::Completion(_) => "c",
            Logged::Reset => "reset",
            Logged::Summary => "summary",
        })
        .collect();
    assert_eq!(kinds[..4], ["c", "c", "c", "reset"]);
    assert_eq!(kinds.last(), Some(&"summary"));
    assert_eq!(kinds.iter().filter(|k| **k == "c").count(), 15);
}

#[test]
fn the_bench_schedule_is_the_one_llmsim_trace_predicts() {
    let mock = Mock::start(Behaviour::default());
    let dir = tempdir();
    let bench_trace = dir.path().join("bench.csv");
    bench(&mock, &["--rate", "80", "--burstiness", "0.5", "--requests", "15", "--prompt-tokens", "8"])
        .args(&["--output-tokens", "2", "--seed", "11", "-q", "--trace"])
        .arg(&bench_trace)
        .ok();
    let scenario = std::fs::read_to_string(repo("scenarios/base.yml")).unwrap().replace(
        "  seed: 42\n  arrivals:\n    poisson: { rate: 20 }\n  requests: 2000\n  prompt_tokens: 512\n  output_tokens: 64",
        "  seed: 11\n  arrivals:\n    gamma: { rate: 80, burstiness: 0.5 }\n  requests: 15\n  prompt_tokens: 8\n  output_tokens: 2",
    );
    assert!(scenario.contains("burstiness: 0.5"), "the base scenario changed shape");
    let file = write(dir.path(), "s.yml", &scenario);
    let sim_trace = dir.path().join("sim.csv");
    TestCommand::new(&["trace"]).arg(&file).arg("-o").arg(&sim_trace).ok();
    assert_eq!(std::fs::read_to_string(&bench_trace).unwrap(), std::fs::read_to_string(&sim_trace).unwrap());
}

#[test]
fn a_bench_result_is_read_by_diff_and_replayed_by_run() {
    let mock = Mock::start(Behaviour::default());
    let dir = tempdir();
    let b = dir.path().join("b.json");
    bench(
        &mock,
        &["--rate", "40", "--requests", "10", "--prompt-tokens", "20", "--output-tokens", "5", "-q", "--json"],
    )
    .arg(&b)
    .ok();
    let m = llmsim_analysis::measured::load(&b).unwrap();
    assert_eq!(m.tool, llmsim_analysis::measured::Tool::Llmsim);
    let j = read_json(&b);
    assert_eq!(m.levels[0].metrics[&llmsim_analysis::measured::MetricKind::Ttft].mean, j["mean_ttft_ms"].as_f64());
    let pred = dir.path().join("p.json");
    let csv = dir.path().join("r.csv");
    TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"])
        .arg(&b)
        .arg("--json")
        .arg(&pred)
        .arg("--requests-csv")
        .arg(&csv)
        .ok()
        .stderr_has(&["replaying 10 requests", "llmsim bench"]);
    let rows: Vec<csv::StringRecord> = csv::Reader::from_path(&csv).unwrap().records().map(Result::unwrap).collect();
    // Replayed in send order (tasks may send a few microseconds out of index order).
    let mut starts = floats(&j["start_times"]);
    starts.sort_by(f64::total_cmp);
    for (row, start) in rows.iter().zip(&starts) {
        let arrival: f64 = row[1].parse().unwrap();
        assert!((arrival - (start - starts[0])).abs() < 1e-6);
        assert_eq!((&row[2], &row[3]), ("20", "5"));
    }
    let out = TestCommand::new(&["diff", "--tolerance", "1000000%"]).arg(&pred).arg(&b).output();
    let text = out.stdout();
    assert!(text.contains("llmsim bench"), "{text}");
    // Every figure is inside the tolerance; on a loaded machine the bench
    // may flag its own lag, which fails the comparison by design (diff's
    // rule), and only that may.
    match out.code() {
        0 => assert!(text.contains("result: PASSED: 0 of "), "{text}"),
        1 => assert!(text.contains("result: FAILED: 0 of ") && text.contains("reported lag"), "{text}"),
        code => panic!("diff exited {code}\n{text}"),
    }
}

#[test]
fn http_errors_are_counted_and_reported_not_dropped() {
    let mock = Mock::start(Behaviour { fail_every: Some(3), ..Behaviour::default() });
    let dir = tempdir();
    let b = dir.path().join("b.json");
    let out =
        bench(&mock, &["--rate", "100", "--requests", "9", "--prompt-tokens", "4", "--output-tokens", "2", "--json"])
            .arg(&b)
            .ok();
    let j = read_json(&b);
    assert_eq!((j["completed"].as_u64(), j["failed"].as_u64()), (Some(6), Some(3)));
    assert_eq!(j["llmsim_failures"]["http"].as_u64(), Some(3));
    let errors: Vec<&str> = j["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert_eq!(errors.iter().filter(|e| e.starts_with("HTTP 500: ") && e.contains("boom")).count(), 3);
    assert!(
        out.stdout().contains("6 completed, 3 failed (connect 0, http 3, timeout 0, stream 0)"),
        "{}",
        out.stdout()
    );
    // Failed requests stay in the arrays with zeros, as vLLM writes them.
    let failed = errors.iter().position(|e| !e.is_empty()).unwrap();
    assert_eq!((j["output_lens"][failed].as_u64(), j["ttfts"][failed].as_f64()), (Some(0), Some(0.0)));
}

#[test]
fn a_request_over_its_timeout_fails_and_the_bench_still_ends() {
    let mock = Mock::start(Behaviour { hang: Some(2), ..Behaviour::default() });
    let dir = tempdir();
    let b = dir.path().join("b.json");
    bench(&mock, &["--rate", "100", "--requests", "4", "--prompt-tokens", "4", "--output-tokens", "2"])
        .args(&["--timeout", "0.5", "-q", "--json"])
        .arg(&b)
        .ok();
    let j = read_json(&b);
    assert_eq!((j["completed"].as_u64(), j["llmsim_failures"]["timeout"].as_u64()), (Some(3), Some(1)));
    assert!(j["errors"].as_array().unwrap().iter().any(|e| e == "timed out"));
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_server_that_refuses_connections_stops_the_bench_before_anything_is_sent() {
    let port = dead_port();
    let dir = tempdir();
    let b = dir.path().join("b.json");
    TestCommand::new(&["bench", "--base-url"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(&["--model", "m", "--rate", "200", "--requests", "5", "--prompt-tokens", "4", "--output-tokens", "2"])
        .args(&["-q", "--timeout", "5", "--json"])
        .arg(&b)
        .fails_with(1)
        .stderr_has(&[&format!("cannot reach http://127.0.0.1:{port}: connection failed"), "no request was sent"]);
    assert!(!b.exists(), "no result for a bench that never ran");
}

#[test]
fn a_million_requests_of_a_million_token_prompts_allocate_nothing_up_front() {
    // An earlier build built every prompt before the first request: about
    // 7 TB here, an abort before it ever connected. Prompts are now built
    // one by one as they are sent, so this ends at once with the
    // connection error.
    TestCommand::new(&["bench", "--base-url"])
        .arg(format!("http://127.0.0.1:{}", dead_port()))
        .args(&["--model", "m", "--rate", "1000", "--requests", "1000000", "--prompt-tokens", "1000000"])
        .args(&["--output-tokens", "100", "-q"])
        .fails_with(1)
        .stderr_has(&["cannot reach", "no request was sent"]);
}

#[test]
fn bench_flags_over_their_documented_limits_are_usage_errors() {
    let base = ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m"];
    let tokens = ["--prompt-tokens", "8", "--output-tokens", "8"];
    // 3e9 requests tried to allocate 72 GB, 4e9 prompt tokens 28 GB.
    TestCommand::new(&base)
        .args(&["--rate", "1", "--requests", "3000000000"])
        .args(&tokens)
        .fails_with(2)
        .stderr_has(&["--requests 3000000000 is not allowed: must be in [1, 1000000]"]);
    TestCommand::new(&base)
        .args(&["--rate", "1", "--requests", "1", "--prompt-tokens", "4000000000", "--output-tokens", "1"])
        .fails_with(2)
        .stderr_has(&["--prompt-tokens 4000000000 is not allowed: must be in [1, 1000000]"]);
    TestCommand::new(&base)
        .args(&["--rate", "1", "--requests", "1", "--prompt-tokens", "1", "--output-tokens", "1000001"])
        .fails_with(2)
        .stderr_has(&["--output-tokens 1000001 is not allowed"]);
    TestCommand::new(&base)
        .args(&["--rate", "1", "--requests", "1000000", "--prompt-tokens", "1", "--output-tokens", "101"])
        .fails_with(2)
        .stderr_has(&["101000000 output tokens is not allowed: at most 100000000"]);
    let one = ["--requests", "1", "--prompt-tokens", "1", "--output-tokens", "1"];
    let refused = |extra: &[&str], msg: &str| {
        TestCommand::new(&base).args(&one).args(extra).fails_with(2).stderr_has(&[msg]);
    };
    refused(&["--concurrency", "10001"], "--concurrency 10001 is not allowed: must be in [1, 10000]");
    refused(&["--rate", "1", "--warmup", "10001"], "--warmup 10001 is not allowed: at most 10000");
    refused(&["--rate", "1e-300"], "the schedule would last about");
    refused(&["--rate", "1", "--burstiness", "1e308"], "--burstiness 1e308 is not allowed: must be in [0.01, 1000]");
    // 1e300 s used to panic converting to a Duration.
    refused(&["--rate", "1", "--timeout", "1e300"], "--timeout 1e300 is not allowed");
}

#[test]
fn a_closed_loop_never_has_more_requests_in_flight_than_users() {
    let mock = Mock::start(Behaviour::default());
    let dir = tempdir();
    let b = dir.path().join("b.json");
    let out = bench(&mock, &["--concurrency", "3", "--requests", "12", "--prompt-tokens", "4", "--output-tokens", "3"])
        .arg("--json")
        .arg(&b)
        .ok();
    assert!(mock.max_active.load(Ordering::SeqCst) <= 3);
    assert_eq!(mock.completions().len(), 12);
    let j = read_json(&b);
    assert_eq!((j["request_rate"].as_str(), j["max_concurrency"].as_u64()), (Some("inf"), Some(3)));
    assert_eq!(j["llmsim_mode"], "closed");
    assert!(out.stdout().contains("closed loop, 3 users"), "{}", out.stdout());
    assert!(out.stdout().contains("no /metrics/summary"), "{}", out.stdout());
    assert!(j["llmsim_server_summary"].is_null());
}

#[test]
fn a_closed_loops_trace_is_its_send_times_and_replays() {
    let mock = Mock::start(Behaviour::default());
    let dir = tempdir();
    let trace = dir.path().join("t.csv");
    bench(&mock, &["--concurrency", "4", "--requests", "16", "--prompt-tokens", "6", "--output-tokens", "2", "-q"])
        .arg("--trace")
        .arg(&trace)
        .ok();
    TestCommand::new(&["run", "scenarios/base.yml", "-q", "--trace-from"])
        .arg(&trace)
        .ok()
        .stderr_has(&["replaying 16 requests of the trace"]);
}

#[test]
fn the_chat_endpoint_skips_the_role_chunk_and_leaves_room_for_the_template() {
    let mock = Mock::start(Behaviour::default());
    let dir = tempdir();
    let b = dir.path().join("b.json");
    bench(&mock, &["--rate", "100", "--requests", "3", "--prompt-tokens", "20", "--output-tokens", "5"])
        .args(&["--endpoint", "chat", "-q", "--json"])
        .arg(&b)
        .ok();
    let j = read_json(&b);
    assert_eq!(j["backend"], "openai-chat");
    assert!(j["itls"].as_array().unwrap().iter().all(|r| r.as_array().unwrap().len() == 4));
    let message = &mock.completions()[0]["messages"][0];
    assert_eq!(message["role"], "user");
    let words = message["content"].as_str().unwrap().split_whitespace().count();
    assert_eq!(words, 20 - 8, "5 tokens of message template and 3 of prompt template");
}

#[test]
fn bad_bench_arguments_are_usage_errors() {
    let base = ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--requests", "1"];
    let tokens = ["--prompt-tokens", "1", "--output-tokens", "1"];
    let run = |extra: &[&str]| TestCommand::new(&base).args(&tokens).args(extra).fails_with(2);
    run(&[]).stderr_has(&["--rate", "--concurrency"]);
    run(&["--rate", "1", "--concurrency", "2"]).stderr_has(&["cannot be used with"]);
    run(&["--rate", "0"]).stderr_has(&["--rate 0 is not allowed"]);
    run(&["--concurrency", "0"]).stderr_has(&["--concurrency 0 is not allowed"]);
    run(&["--rate", "1", "--burstiness=-1"]).stderr_has(&["--burstiness -1 is not allowed"]);
    run(&["--rate", "1", "--timeout", "0"]).stderr_has(&["--timeout 0 is not allowed"]);
    TestCommand::new(&base)
        .args(&["--prompt-tokens", "8", "--output-tokens", "1", "--rate", "1", "--endpoint", "chat"])
        .fails_with(2)
        .stderr_has(&["--prompt-tokens 8 is too small for the chat endpoint", "at least 9"]);
    TestCommand::new(&["bench", "--base-url", "https://x", "--model", "m", "--requests", "1", "--rate", "1"])
        .args(&tokens)
        .fails_with(2)
        .stderr_has(&["https is not supported"]);
    TestCommand::new(&["bench", "--base-url", "localhost:8080", "--model", "m", "--requests", "1", "--rate", "1"])
        .args(&tokens)
        .fails_with(2)
        .stderr_has(&["give http://HOST:PORT"]);
}
/// A running `llmsim serve` on a free port, stopped by SIGTERM.
struct Serve {
    child: std::process::Child,
    port: u16,
}

impl Serve {
    fn start(record: &Path) -> Serve {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_llmsim"))
            .args(["serve", "--port", "0", "--models", "scenarios/serve/models.yml", "--record"])
            .arg(record)
            .current_dir(root())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start llmsim serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
        Serve { child, port }
    }

    /// Stops the server so its record file is complete.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ratio of two figures, for messages.
fn rel(a: f64, b: f64) -> f64 {
    (a - b) / b
}

/// One load level of the loop: serve, bench, predict, diff. Returns the
/// measurement's warnings: when it flagged lag, the agreement was not
/// checked (only that `diff` fails and says why).
fn loop_level(rate: &str, ttft_tolerance: &str) -> Vec<String> {
    let dir = tempdir();
    let (record, bench_json) = (dir.path().join("served.csv"), dir.path().join("bench.json"));
    let server = Serve::start(&record);
    TestCommand::new(&["bench", "--base-url"])
        .arg(format!("http://127.0.0.1:{}", server.port))
        .args(&["--model", "base-6.7b", "--rate", rate, "--requests", "300", "--prompt-tokens", "512"])
        .args(&["--output-tokens", "64", "--seed", "1", "-q", "--json"])
        .arg(&bench_json)
        .ok();
    server.stop();
    let b = read_json(&bench_json);
    assert_eq!(b["completed"], 300, "rate {rate}");
    let simulated = &b["llmsim_server_summary"]["models"]["base-6.7b"]["simulated"];

    // The server's simulated timeline is `llmsim run` on the server's own
    // arrivals: every request's times to the nanosecond...
    let served = dir.path().join("served.base-6.7b.csv");
    let (exact, exact_csv) = (dir.path().join("exact.json"), dir.path().join("exact.csv"));
    TestCommand::new(&["run", "scenarios/base.yml", "-q", "--trace-from"])
        .arg(&served)
        .arg("--json")
        .arg(&exact)
        .arg("--requests-csv")
        .arg(&exact_csv)
        .ok();
    let table = |p: &Path| -> Vec<std::collections::BTreeMap<String, String>> {
        let mut r = csv::Reader::from_path(p).unwrap();
        let head = r.headers().unwrap().clone();
        r.records()
            .map(|row| head.iter().zip(row.unwrap().iter()).map(|(h, v)| (h.into(), v.into())).collect())
            .collect()
    };
    let (server_rows, offline_rows) = (table(&served), table(&exact_csv));
    assert_eq!(server_rows.len(), 300);
    for (s, o) in server_rows.iter().zip(&offline_rows) {
        for (col, v) in s {
            assert_eq!(Some(v), o.get(col), "rate {rate}: request {}: {col}", s["id"]);
        }
    }
    // ...and its summary within the server's histogram error (< 0.1%).
    let e = read_json(&exact);
    for metric in ["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms"] {
        assert_eq!(simulated[metric]["count"], e[metric]["count"], "rate {rate}: {metric} count");
        for stat in ["mean", "p50", "p90", "p99", "max"] {
            let (s, p) = (simulated[metric][stat].as_f64().unwrap(), e[metric][stat].as_f64().unwrap());
            assert!(rel(s, p).abs() < 1e-3, "rate {rate}: {metric}.{stat} {s} vs {p}");
        }
    }

    // What the client observed against a prediction on the client's own requests.
    let predicted = dir.path().join("predicted.json");
    TestCommand::new(&["run", "scenarios/base.yml", "-q", "--trace-from"])
        .arg(&bench_json)
        .arg("--json")
        .arg(&predicted)
        .ok();
    let warnings: Vec<String> =
        b["llmsim_warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap_or("").to_string()).collect();
    let flagged = !warnings.is_empty();
    for (metrics, tolerance) in [("itl.p50,throughput.output", ITL_AND_THROUGHPUT), ("ttft.p50", ttft_tolerance)] {
        let out = TestCommand::new(&["diff", "--metric", metrics, "--tolerance", tolerance])
            .arg(&predicted)
            .arg(&bench_json)
            .output();
        if flagged {
            // Past the point where the client or server lags, the report says so.
            assert_eq!(out.code(), 1, "rate {rate}: a flagged measurement must not pass\n{}", out.describe());
            assert!(out.stdout().contains("WARNING: the measurement flagged itself"), "{}", out.describe());
        } else {
            assert_eq!(out.code(), 0, "rate {rate}: {metrics} within {tolerance}\n{}", out.describe());
        }
    }
    warnings
}

/// Runs of a level before its agreement check counts as not run.
const ATTEMPTS: usize = 3;

/// TTFT p50 gates per load: the largest error measured plus a margin.
const TTFT_20: &str = "18%";
const TTFT_60: &str = "20%";
const TTFT_90: &str = "35%";
/// ITL p50 and output throughput gate at every load.
const ITL_AND_THROUGHPUT: &str = "5%";

/// Predict, serve, bench, diff at three loads on the base model, whose knee
/// is near 70 req/s, one after the other so they do not share the CPU.
///
/// The gates are what was measured plus a margin. Sixteen runs per load
/// (seed 1 eight times, seeds 2 to 5 twice each, in two batches), release
/// build, on this 2-core machine while other builds kept it busy (load
/// average about 7), relative error of the prediction against the client's
/// measurement (the test runs seed 1; past the knee other seeds err more):
///
/// | load | TTFT p50 | ITL p50 | output throughput |
/// |---|---|---|---|
/// | 20 req/s | -4.4% to -12.8% | -0.3% to +0.8% | -0.02% to +0.03% |
/// | 60 req/s | -4.1% to -15.1% | -2.9% to +2.9% | -0.16% to +0.19% |
/// | 90 req/s, seed 1 | -24.7% to +5.3% | -1.4% to +1.6% | -0.9% to +3.4% |
/// | 90 req/s, seeds 2-5 | -17.4% to +49.8% | -1.6% to +1.3% | -2.0% to +1.2% |
///
/// (On a quiet machine TTFT was -4% to -6.4% below and near the knee, and
/// one run past it -28.6%: past the knee TTFT depends on which step admits
/// each queued request, which sub-millisecond arrival shifts change.) The
/// worst TTFT errors came from runs that flagged client lag; they are kept
/// in the margin because a run's lag sits just around the 5 ms threshold.
///
/// A run whose client or server flagged lag cannot judge agreement; it is
/// retried, saying so on stderr, and a level flagged on every attempt fails
/// the test: an agreement check that never ran must not pass.
///
/// It runs in real time, so it is judged alone: on a machine also running
/// the other 250 integration tests (as `cargo test` does, and as CI did)
/// the server and the client share two cores with them and TTFT p50 at 60
/// req/s drifted past its gate without either side flagging lag. A plain
/// `cargo test` lists it as ignored, with the reason; CI runs it by name
/// after the rest, and fails if the name stops matching.
#[test]
#[ignore = "real time, judged alone on a quiet machine; CI runs it: cargo test --release --test integration -- \
            --ignored the_loop_agrees --test-threads 1"]
fn the_loop_agrees_below_near_and_past_the_knee_or_says_why_not() {
    for (rate, ttft_tolerance) in [("20", TTFT_20), ("60", TTFT_60), ("90", TTFT_90)] {
        let mut flags = Vec::new();
        for attempt in 1..=ATTEMPTS {
            let warnings = loop_level(rate, ttft_tolerance);
            if warnings.is_empty() {
                break;
            }
            eprintln!(
                "NOTICE: rate {rate}, attempt {attempt}/{ATTEMPTS}: agreement not checked, the run flagged lag: {warnings:?}"
            );
            flags.push(warnings);
        }
        assert!(
            flags.len() < ATTEMPTS,
            "rate {rate}: the agreement was never checked: all {ATTEMPTS} runs flagged lag: {flags:?}"
        );
    }
}
