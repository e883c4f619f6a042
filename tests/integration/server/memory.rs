//! Memory under the documented bounds: a request may ask for 1,024
//! sequences and 2,097,152 planned tokens (docs/serve.md). Each plan used
//! to hold every token's text from admission: 30 streams at n = 1,024 and
//! max_tokens = 2,048 took the server from 19 MB to 2.3 GB before a byte
//! was sent (docs/performance.md). Now a choice keeps what its tokens come
//! from and makes each when it is sent, so the server's memory follows
//! what is in flight, not what is planned.
//!
//! The load here is smaller, to fit a debug build on a 2-core CI machine:
//! 30 concurrent streams at the `max_tokens` bound (2,048, `ignore_eos`, so
//! every choice plans all of them) with n = 256: 15.7 M planned tokens in
//! all. The old plans held about 37 bytes a planned token (measured on the
//! release build: 2,317 MB for 63 M tokens), some 580 MB for this load,
//! all of it before the first byte; the bound checked is [`PEAK_MB`] over
//! the server's baseline for its peak resident memory (VmHWM, the kernel's
//! high-water mark), a quarter of that. `/health`, polled every 50 ms
//! throughout (by a thread of its own, not behind the clients), answers each
//! time within [`HEALTH_MS`].

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::harness::*;

/// Peak resident memory the load may add to the idle server (MB): a
/// quarter of what the old plans alone held for this load (15.7 M planned
/// tokens at about 37 bytes each: some 580 MB), so holding whole answers
/// again fails by a wide margin, while what is in flight (a debug build
/// measured 50 MB over an idle 41 MB, 2026-12-03) fits with room for a
/// shared machine.
const PEAK_MB: u64 = 145;

/// The slowest `/health` answer allowed during the load (ms). The goal is
/// 100 ms, measured by `benches/serve_memory.py` (docs/performance.md: met
/// in most runs, 116 ms at worst on a shared machine); this test runs next
/// to the rest of the suite on 2 cores, where a compile or another test's
/// server can take the CPU for longer (164 ms seen), so it holds the answer
/// to 250 ms: the up-front plans of old kept it waiting up to 1,372 ms.
const HEALTH_MS: u128 = 250;

const STREAMS: usize = 30;
const N: u32 = 256;
const MAX_TOKENS: u32 = 2048;

/// `VmHWM` and `VmRSS` of process `pid`, in MB.
fn memory_mb(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

// Alone, after the rest (.ci/run runs it by name): 30 streams of 256
// choices take both cores for seconds, enough to make a real-time test
// running beside it (the bench's lag check) flag its own client.
#[test]
#[ignore = "run by name in .ci/run, alone: it takes both cores"]
fn thirty_streams_at_the_documented_bounds_keep_memory_flat_and_health_fast() {
    if !std::path::Path::new("/proc/self/status").exists() {
        return; // VmHWM is Linux's
    }
    let server = Server::start();
    let pid = server.pid();
    let (base_hwm, _) = memory_mb(pid);
    let done = Arc::new(AtomicBool::new(false));
    let port = server.port;
    let poller = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut worst = 0u128;
            let mut polls = 0;
            while !done.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = http(port, "GET", "/health", "");
                assert_eq!(r.status, 200);
                worst = worst.max(t.elapsed().as_millis());
                polls += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            (worst, polls)
        })
    };
    let body =
        chat_body("sched", "hello", &format!(r#""stream":true,"n":{N},"max_tokens":{MAX_TOKENS},"ignore_eos":true"#));
    let clients: Vec<_> = (0..STREAMS)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut s = connect(port);
                let head = format!(
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n",
                    body.len()
                );
                s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes())).expect("send");
                s.set_read_timeout(Some(Duration::from_millis(500))).expect("timeout");
                // Read for 12 s, then hang up: every choice is planned and
                // in the engine by then (plans queue, one core's worth at a
                // time); most are still waiting.
                let until = Instant::now() + Duration::from_secs(12);
                let mut got = 0usize;
                let mut buf = vec![0u8; 1 << 16];
                while Instant::now() < until {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(k) => got += k,
                        Err(_) => continue,
                    }
                }
                got
            })
        })
        .collect();
    let bytes: usize = clients.into_iter().map(|c| c.join().expect("client")).sum();
    std::thread::sleep(Duration::from_secs(1));
    done.store(true, Ordering::Relaxed);
    let (worst, polls) = poller.join().expect("poller");
    let (hwm, rss) = memory_mb(pid);
    eprintln!("memory: idle {base_hwm} MB, peak {hwm} MB, after {rss} MB; /health worst {worst} ms of {polls}");
    assert!(bytes > 1_000_000, "the streams sent tokens ({bytes} bytes)");
    assert!(polls >= 100, "health was polled throughout ({polls} polls)");
    assert!(hwm <= base_hwm + PEAK_MB, "peak {hwm} MB over idle {base_hwm} MB + {PEAK_MB} MB");
    assert!(worst <= HEALTH_MS, "/health took {worst} ms");
}
