//! Clients that try to stall or confuse the server: huge stop lists,
//! half-sent requests, connection floods, trailing garbage, absurd numbers,
//! and a hang-up signal. Each was reproduced against an earlier build (the
//! stop list stalled `/health` for 10 s, 1,100 half-sent requests exhausted
//! the file descriptors, garbage got 200, SIGHUP lost the record).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use super::harness::*;
use crate::support::*;

/// A fixed model with a context long enough for a megabyte-long prompt and
/// answer, releasing a token every 20 microseconds.
const LONG_CONTEXT: &str = "
models:
  - name: long
    engine: fixed
    fixed: {context_length: 1000000, ttft_overhead_ms: 1, prefill_tokens_per_s: 100000000, itl_ms: 0.02}
";

/// GET /health with its own short read timeout.
fn health_within(port: u16, secs: u64) -> Result<u16, String> {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(secs))).map_err(|e| e.to_string())?;
    send(&mut s, "GET", "/health", "");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("no answer within {secs} s: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    text.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| format!("not HTTP: {text:?}"))
}

#[test]
fn ten_thousand_stop_strings_on_a_megabyte_answer_neither_stall_health_nor_miss_a_spanning_stop() {
    let server = Server::start_with(LONG_CONTEXT, &["--workers", "2"]);
    // The default answer echoes the (trimmed) message: 150,000 "alpha"
    // words, "stop here", 20,000 "omega" words: about 1 MB.
    let message = format!("{}stop here {}", "alpha ".repeat(150_000), "omega ".repeat(20_000));
    // 10,000 stop strings that never occur, then one that spans the tokens
    // " stop" and " here".
    let mut stops: Vec<String> = (0..10_000).map(|i| format!("zq{i:05}x")).collect();
    stops.push("op he".into());
    let extra = format!(r#""stop":{}"#, serde_json::to_string(&stops).unwrap());
    let body = chat_body("long", &message, &extra);
    let port = server.port;
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || http(port, "POST", "/v1/chat/completions", &body))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // An earlier build searched each stop string over the whole answer on
    // the request threads: both of them busy for about 13 s.
    assert_eq!(health_within(port, 5), Ok(200), "/health must answer while the stop requests are in flight");
    for c in clients {
        let r = c.join().expect("client");
        assert_eq!(r.status, 200, "{}", &r.body[..r.body.len().min(500)]);
        let v = r.json();
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        // Cut where "op he" starts: after "...alpha st".
        assert_eq!(content.len(), "alpha ".len() * 150_000 + "st".len());
        assert!(content.ends_with("alpha alpha st"));
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["choices"][0]["stop_reason"], "op he");
        // Tokens up to and including " here", where the stop completed, as
        // vLLM counts them: "alpha", 149,999 x " alpha", " stop", " here".
        assert_eq!(v["usage"]["completion_tokens"], 1 + 149_999 + 2);
    }
}

#[test]
fn a_stop_list_over_the_limit_is_a_400_naming_stop() {
    let server = Server::start();
    let stops: Vec<String> = (0..100_001).map(|i| format!("{i}")).collect();
    let r = server.chat("fixed", "hi", &format!(r#""stop":{}"#, serde_json::to_string(&stops).unwrap()));
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["param"], "stop");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("at most 100000 strings"));
    assert_eq!(server.chat("fixed", "still here", "").status, 200);
}

#[test]
fn half_sent_requests_past_the_open_file_limit_leave_health_answering() {
    // 256 open files: at most 192 connections; 400 half-sent requests
    // exhausted the descriptors of an earlier build for as long as they
    // stayed open.
    let server = Server::start_with_file_limit(256, &["--header-timeout", "1"]);
    let half: Vec<std::net::TcpStream> = (0..400)
        .map(|_| {
            let mut s = connect(server.port);
            s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n").expect("half a head");
            s
        })
        .collect();
    assert_eq!(health_within(server.port, 20), Ok(200), "stderr:\n{}", server.stderr());
    drop(half);
    let log = server.stderr();
    assert!(log.contains("at most 192 connections at once: the open-file limit is 256"), "{log}");
    assert!(log.contains("192 connections open (--max-connections): new connections wait"), "{log}");
    assert!(log.contains("no complete request head within 1 s (--header-timeout)"), "{log}");
}

#[test]
fn a_half_sent_head_is_closed_and_a_half_sent_body_gets_408() {
    let server = Server::start_with(MODELS, &["--header-timeout", "1", "--body-timeout", "1"]);
    let mut s = connect(server.port);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n").unwrap();
    let start = Instant::now();
    let mut buf = Vec::new();
    let n = s.read_to_end(&mut buf).expect("the server closes the connection (an earlier build never did)");
    assert_eq!(n, 0, "closed without an answer: {:?}", String::from_utf8_lossy(&buf));
    assert!(start.elapsed() >= Duration::from_millis(900), "not before the timeout");

    let mut s = connect(server.port);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \
                100\r\n\r\n{\"model\":";
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let body = &text[text.find("\r\n\r\n").expect("head end") + 4..];
    let v: serde_json::Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(v["error"]["code"], 408);
    assert_eq!(v["error"]["type"], "Request Timeout");
    assert!(v["error"]["message"].as_str().unwrap().contains("within 1 s (see --body-timeout)"));
    assert_eq!(server.chat("fixed", "still serving", "").status, 200);
    assert!(server.stderr().contains("answered 408: a request body did not arrive within 1 s"));
}

#[test]
fn trailing_garbage_after_the_json_body_is_vllms_400() {
    let server = Server::start();
    let good = chat_body("fixed", "hi", "");
    for (tail, offset) in [(" trailing", good.chars().count() + 1), (r#"{"x":1}"#, good.chars().count())] {
        let r = server.post("/v1/chat/completions", &format!("{good}{tail}"));
        assert_eq!(r.status, 400, "{}", r.body);
        let e = &r.json()["error"];
        assert_eq!(e["type"], "Bad Request");
        assert_eq!(e["code"], 400);
        assert_eq!(e["param"], format!("body.{offset}"));
        let msg = e["message"].as_str().unwrap();
        assert_eq!(
            msg,
            format!(
                "1 validation error:\n  {{'type': 'json_invalid', 'loc': 'body.{offset}', 'msg': 'JSON decode \
                 error', 'input': '<dict of 0 items>', 'ctx': {{'error': 'Extra data'}}}}"
            )
        );
    }
    let r = server.post("/v1/completions", r#"{"model":"fixed","prompt":"hi"}   "#);
    assert_eq!(r.status, 200, "trailing whitespace is fine: {}", r.body);
}

#[test]
fn a_huge_max_tokens_is_reported_as_sent_not_clamped() {
    let server = Server::start();
    let r = server.chat("sched", "hi", r#""max_tokens":1000000000000"#);
    assert_eq!(r.status, 400);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert_eq!(
        msg,
        "max_tokens=1000000000000 cannot be greater than max_model_len=4096. Please request fewer output tokens. \
         (parameter=max_tokens, value=1000000000000)"
    );
    // Past i64 too: the number sent (in JSON's shortest form), not
    // 9223372036854775807.
    let cases = [
        ("1e300", "1e+300"),
        ("1e19", "1e+19"),
        ("10000000000000000000", "10000000000000000000"),
        ("\"1e300\"", "1e300"),
    ];
    for (sent, shown) in cases {
        let r = server.chat("sched", "hi", &format!(r#""max_tokens":{sent}"#));
        assert_eq!(r.status, 400);
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.starts_with(&format!("max_tokens={shown} cannot be greater than max_model_len=4096. ")), "{msg}");
        assert!(msg.ends_with(&format!("(parameter=max_tokens, value={shown})")), "{msg}");
    }
    let r = server.chat("sched", "hi", r#""max_completion_tokens":-1e300"#);
    assert_eq!(r.status, 400);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("at least 1, got -1e+300."), "{msg}");
}

#[test]
fn sighup_stops_the_server_gracefully_and_keeps_the_record() {
    let dir = tempdir();
    let record = dir.path().join("rec.csv");
    let server = Server::start_with(
        "models:\n  - name: fixed\n    engine: fixed\n    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, \
         itl_ms: 1}\n",
        &["--record", record.to_str().unwrap()],
    );
    assert_eq!(server.chat("fixed", "done before", "").status, 200);
    // A stream of 3,000 tokens at 1 ms each is still going when SIGHUP comes.
    let mut s = connect(server.port);
    send(&mut s, "POST", "/v1/chat/completions", &chat_body("fixed", "long one", r#""stream":true"#));
    let mut first = [0u8; 64];
    assert!(s.read(&mut first).expect("the stream starts") > 0);
    let stderr = server.stop_with("HUP");
    assert!(stderr.contains("SIGHUP: stopping"), "{stderr}");
    let rows: Vec<String> = read(&record).lines().map(str::to_string).collect();
    assert_eq!(rows.len(), 3, "header, the finished request and the one in flight:\n{rows:?}");
    assert!(rows[1].contains(",finished,"), "{}", rows[1]);
    assert!(rows[2].contains(",in_flight,"), "{}", rows[2]);
}

#[test]
fn limit_flags_out_of_range_are_usage_errors() {
    let dir = tempdir();
    let models = models_file(dir.path());
    let serve = |extra: &[&str]| {
        let mut c = TestCommand::new(&["serve", "--port", "0", "--models"]).arg(&models);
        for x in extra {
            c = c.arg(x);
        }
        c.fails_with(2)
    };
    serve(&["--header-timeout", "0"]).stderr_has(&["--header-timeout 0 is not allowed: give seconds in (0, 86400]"]);
    serve(&["--body-timeout", "1e300"]).stderr_has(&["--body-timeout 1e300 is not allowed"]);
    serve(&["--body-timeout", "NaN"]).stderr_has(&["--body-timeout NaN is not allowed"]);
    serve(&["--max-connections", "0"]).stderr_has(&["--max-connections 0 is not allowed: must be >= 1"]);
}

#[test]
fn a_malformed_chunked_body_gets_400_and_an_oversized_one_413_without_a_made_up_length() {
    let server = Server::start_with(MODELS, &["--max-body-bytes", "4096"]);
    let raw = |body: &str| {
        let mut s = connect(server.port);
        let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
                    Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes()));
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        parse(&out)
    };
    // A chunk size that is not hex: once a 413 claiming 4,097 bytes.
    let r = raw("zz\r\n{}\r\n0\r\n\r\n");
    assert_eq!(r.status, 400, "{}", r.body);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("The request body could not be read"), "{msg}");
    // 5,000 bytes in chunks, no Content-Length: over the limit, length unknown.
    let chunk = "x".repeat(1000);
    let r = raw(&format!("{}0\r\n\r\n", format!("3e8\r\n{chunk}\r\n").repeat(5)));
    assert_eq!(r.status, 413, "{}", r.body);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert_eq!(msg, "The request body is over 4096 bytes, the most this server accepts (see --max-body-bytes).");
    // Still serving.
    assert_eq!(server.chat("sched", "hi", "").status, 200);
}
