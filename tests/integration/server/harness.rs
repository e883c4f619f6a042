//! A running `llmsim serve`, a tiny blocking HTTP/1.1 client and SSE
//! parsing: just enough to see exactly what a client sees on the wire.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// Models for the tests: a base-model scheduler, a scheduler whose KV cache
/// holds only 8 blocks (long prompts never fit), and a fast fixed model.
pub const MODELS: &str = "
models:
  - name: sched
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 4096
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288}
    scheduler: {max_batch_tokens: 8192, max_num_sequences: 64}
  - name: tiny-kv
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 4096
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288, num_blocks: 8}
  - name: fixed
    engine: fixed
    fixed: {context_length: 4096, ttft_overhead_ms: 5, prefill_tokens_per_s: 100000, itl_ms: 1}
";

/// Answers: messages starting with `long` get 3,000 tokens, `pick` one of
/// eight words chosen by the seed; everything else is echoed (the default),
/// so tests know the content without a tokenizer. A request that offers the
/// tool `get_weather` may have "weather in CITY" answered with a call.
pub const RESPONSES: &str = "
responses:
  - id: weather
    regex: '(?i)weather in (?P<city>\\w+)'
    tool_call: {name: get_weather, arguments: {city: \"{city}\"}}
  - id: long
    starts_with: long
    synthetic: {tokens: [3000, 3000]}
  - id: pick
    starts_with: pick
    variants: [alpha, bravo, charlie, delta, echo, foxtrot, golf, hotel]
default:
  content: \"{last_user_message}\"
";

pub struct Server {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts a server on the test models and responses.
    pub fn start() -> Server {
        Server::start_with(MODELS, &[])
    }

    pub fn start_with(models: &str, extra: &[&str]) -> Server {
        let dir = tempdir();
        let models = write(dir.path(), "models.yml", models);
        let responses = write(dir.path(), "responses.yml", RESPONSES);
        let mut args: Vec<String> = vec!["serve".into(), "--port".into(), "0".into(), "--models".into()];
        args.push(models.display().to_string());
        args.extend(["--responses".to_string(), responses.display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Server::spawn(dir, &args)
    }

    /// Serves one model, `name`, from the scenario `scenario` (written to
    /// `dir/NAME.yml` with a models file naming it), with the test
    /// responses and `extra` flags. Returns the server and the scenario's
    /// path (for `llmsim run` replays).
    pub fn from_scenario(dir: &Path, name: &str, scenario: &str, extra: &[String]) -> (Server, PathBuf) {
        let path = write(dir, &format!("{name}.yml"), scenario);
        let models = write(dir, "models.yml", &format!("models:\n  - name: {name}\n    scenario: {name}.yml\n"));
        let responses = write(dir, "responses.yml", RESPONSES);
        let mut args: Vec<String> = ["serve", "--port", "0", "--models"].iter().map(|s| s.to_string()).collect();
        args.extend([models.display().to_string(), "--responses".into(), responses.display().to_string()]);
        args.extend(extra.iter().cloned());
        (Server::spawn(tempdir(), &args), path)
    }

    pub fn spawn(dir: tempfile::TempDir, args: &[String]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_llmsim"));
        cmd.args(args);
        Server::spawn_command(dir, cmd)
    }

    /// Starts `llmsim serve` with the test models and responses under an
    /// open-file limit of `files` (set by the shell's `ulimit -n`).
    pub fn start_with_file_limit(files: u32, extra: &[&str]) -> Server {
        let dir = tempdir();
        let models = write(dir.path(), "models.yml", MODELS);
        let responses = write(dir.path(), "responses.yml", RESPONSES);
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("ulimit -n {files} && exec \"$0\" \"$@\""));
        cmd.arg(env!("CARGO_BIN_EXE_llmsim")).args(["serve", "--port", "0", "--models"]);
        cmd.arg(models).arg("--responses").arg(responses).args(extra);
        Server::spawn_command(dir, cmd)
    }

    pub fn spawn_command(dir: tempfile::TempDir, mut cmd: Command) -> Server {
        let stderr = std::fs::File::create(dir.path().join("stderr.txt")).expect("stderr file");
        let mut child = cmd
            .current_dir(root())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("start llmsim serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read the address line");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}; stderr: {}", read(&dir.path().join("stderr.txt"))));
        Server { child, port, dir }
    }

    pub fn get(&self, path: &str) -> Resp {
        http(self.port, "GET", path, "")
    }

    pub fn post(&self, path: &str, body: &str) -> Resp {
        http(self.port, "POST", path, body)
    }

    pub fn chat(&self, model: &str, message: &str, extra: &str) -> Resp {
        self.post("/v1/chat/completions", &chat_body(model, message, extra))
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn stop(self) -> String {
        self.stop_with("TERM")
    }

    /// Sends `signal` (`TERM`, `INT`, `HUP`) and waits for a clean exit.
    pub fn stop_with(mut self, signal: &str) -> String {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("kill");
        assert!(status.success());
        let code = self.child.wait().expect("wait");
        let stderr = read(&self.dir.path().join("stderr.txt"));
        assert!(code.success(), "serve exited with {code}: {stderr}");
        stderr
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        read(&self.dir.path().join("stderr.txt"))
    }

    /// The value of a sample line in `/metrics` (`name{labels}`), if present.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let text = self.get("/metrics").body;
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
    }

    /// Polls until `f` holds, failing after `secs` seconds.
    pub fn wait_for(&self, secs: u64, what: &str, mut f: impl FnMut(&Server) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !f(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub fn chat_body(model: &str, message: &str, extra: &str) -> String {
    let msg = serde_json::to_string(message).expect("json string");
    let sep = if extra.is_empty() { "" } else { "," };
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":{msg}}}]{sep}{extra}}}"#)
}

/// A whole HTTP response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of an SSE body, in order.
    pub fn events(&self) -> Vec<String> {
        self.body.split("\n\n").filter_map(|f| f.strip_prefix("data: ")).map(str::to_string).collect()
    }
}

/// Sends one request with `Connection: close` and reads the whole answer.
pub fn http(port: u16, method: &str, path: &str, body: &str) -> Resp {
    let mut s = connect(port);
    send(&mut s, method, path, body);
    let mut raw = Vec::new();
    // A server refusing a body it did not read may reset the connection
    // after answering: keep what arrived.
    let result = s.read_to_end(&mut raw);
    assert!(!raw.is_empty(), "no response: {result:?}");
    parse(&raw)
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    s
}

pub fn send(s: &mut TcpStream, method: &str, path: &str, body: &str) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes())).expect("send request");
}

pub fn parse(raw: &[u8]) -> Resp {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end in {text:?}"));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_string() };
    Resp { status, headers, body }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// The test models file in `dir`, for tests that start servers themselves.
pub fn models_file(dir: &Path) -> PathBuf {
    write(dir, "models.yml", MODELS)
}

/// Runs `client(i)` for i in 0..n, each on its own thread started `gap_ms`
/// after the one before, and waits for all (a client's panic fails the test).
pub fn staggered_clients(n: usize, gap_ms: u64, client: impl Fn(usize) + Send + Sync + 'static) {
    let client = std::sync::Arc::new(client);
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let client = std::sync::Arc::clone(&client);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(gap_ms * i as u64));
                client(i);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client");
    }
}

/// The cells of `cols` (by header name) of every row of a CSV text.
pub fn pick(text: &str, cols: &[&str]) -> Vec<Vec<String>> {
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let h = r.headers().expect("header").clone();
    let idx: Vec<usize> = cols.iter().map(|c| h.iter().position(|x| x == *c).expect(c)).collect();
    r.records().map(|row| idx.iter().map(|&i| row.as_ref().expect("row")[i].to_string()).collect()).collect()
}

/// A scenario for `Server::from_scenario` on the test GPU (6.74 B
/// parameters, 512 KiB of KV per token): `kv_cache` and `scheduler` are the
/// inside of their flow mappings, `extra` more top-level YAML (a `cluster:`
/// line). Its one-request workload is never run: the server takes the
/// engine from it, and replays replace the arrivals with the record.
pub fn test_scenario(name: &str, context_length: u32, kv_cache: &str, scheduler: &str, extra: &str) -> String {
    format!(
        "name: {name}
hardware: {{name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: {context_length}
  weights: {{parameters_billions: 6.74}}
  kv_cache: {{bytes_per_token: 524288, {kv_cache}}}
scheduler: {{{scheduler}}}
{extra}workload:
  arrivals: {{poisson: {{rate: 1}}}}
  requests: 1
  prompt_tokens: 1
  output_tokens: 1
"
    )
}

/// `--record PATH`, the flags `Server::from_scenario` takes to record.
pub fn record_flags(record: &Path) -> Vec<String> {
    vec!["--record".to_string(), record.display().to_string()]
}

/// The record columns a replay by `llmsim run` reproduces to the nanosecond.
pub const REPLAYED: [&str; 10] = [
    "id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "status",
    "queue_ms",
    "ttft_ms",
    "e2e_ms",
    "max_itl_ms",
    "preemptions",
];

/// `llmsim run SCENARIO` on the record file `record` as its trace: the
/// offline `--requests-csv` text and the result JSON.
pub fn replay(dir: &Path, scenario: &Path, record: &Path) -> (String, serde_json::Value) {
    let trace = format!("workload={{arrivals: {{trace: {}}}}}", record.display());
    let (out, json) = (dir.join("offline.csv"), dir.join("offline.json"));
    TestCommand::new(&["run"])
        .arg(scenario)
        .arg("--set")
        .arg(&trace)
        .arg("--requests-csv")
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .arg("-q")
        .ok();
    let result = serde_json::from_str(&read(&json)).expect("result JSON");
    (read(&out), result)
}
