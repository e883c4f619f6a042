//! The server's fuzz slice (docs/development.md, "Fuzzing"): seeded
//! mutations of valid request bodies (every field set to an edge value,
//! deleted, retyped, nested, truncated), random JSON Schemas as tool
//! parameters and structured-output schemas, and wire-level abuse (no or a
//! wrong Content-Type, slow senders, bodies cut short, garbage heads),
//! against one running `llmsim serve`.
//!
//! The oracle, after every case: an answer came within the deadline with a
//! status a client can act on (never a 500 or a dropped connection for a
//! request that was sent whole); an error is OpenAI-style JSON with a
//! message; a 200 is JSON, or an SSE stream of JSON events ending in
//! `[DONE]`; the server is alive, its stderr has no panic, `/health`
//! answers within a second, and its memory stays under a bound.
//! `LLMSIM_FUZZ_CASES=N` runs N cases and `LLMSIM_FUZZ_SEED=S` starts
//! elsewhere, as the planner's slice does (tests/integration/fuzz.rs).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use super::harness::*;
use crate::fuzz::{cases, seed};

/// Models for the slice: fast engines with small contexts, so the
/// worst answer a case can ask for (n and max_tokens at their bounds)
/// stays small; one with tools and a tool parser.
const FUZZ_MODELS: &str = "
models:
  - name: fixed
    engine: fixed
    fixed: {context_length: 256, prefill_tokens_per_s: 10000000, itl_ms: 0.01}
  - name: sched
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 256
      weights: {parameters_billions: 0.5}
      kv_cache: {bytes_per_token: 4096, num_blocks: 64}
    scheduler: {max_batch_tokens: 512, max_num_sequences: 16}
  - name: agent
    engine: fixed
    fixed: {context_length: 256, prefill_tokens_per_s: 10000000, itl_ms: 0.01}
    tool_call_parser: hermes
    enable_auto_tool_choice: true
";

/// Values a mutated field takes: edges of every JSON type.
fn edge(rng: &mut ChaCha8Rng) -> Value {
    let pick = rng.random_range(0..30);
    match pick {
        0 => Value::Null,
        1 => json!(0),
        2 => json!(-1),
        3 => json!(1),
        4 => json!(2),
        5 => json!(1e308),
        6 => json!(-1e308),
        7 => json!(0.5),
        8 => json!(u64::MAX),
        9 => json!(i64::MIN),
        10 => json!(4_294_967_296u64),
        11 => json!(""),
        12 => json!("x"),
        13 => Value::String("é\u{0}\u{feff}".into()),
        14 => Value::String("y".repeat(rng.random_range(0..5_000))),
        15 => json!([]),
        16 => json!({}),
        17 => json!(true),
        18 => json!(false),
        19 => json!([1, 2, 3]),
        20 => json!(["stop", "\n"]),
        21 => json!([[1, 2], [3]]),
        22 => json!({"type": "json_object"}),
        23 => json!({"include_usage": true, "continuous_usage_stats": true}),
        24 => json!(1025),
        25 => json!(1e9),
        26 => json!(-0.0),
        27 => json!(20),
        28 => json!(21),
        _ => json!(std::iter::repeat_n(7, 300).collect::<Vec<_>>()),
    }
}

/// One of `xs`, chosen by `rng`.
fn pick<T: Clone>(rng: &mut ChaCha8Rng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())].clone()
}

/// A random JSON Schema, depth-bounded, edge keywords made likely.
fn schema(rng: &mut ChaCha8Rng, depth: u32) -> Value {
    let leaf = depth >= 3 || rng.random_range(0..3) == 0;
    let mut s = if leaf {
        match rng.random_range(0..9) {
            0 => json!({"type": "string"}),
            1 => {
                json!({"type": "string", "minLength": (pick(rng, &[0, 3, 1_000_000_000u64])), "maxLength": (pick(rng, &[5, 0, 2]))})
            }
            2 => {
                json!({"type": "string", "pattern": (pick(rng, &["^[a-z]{2,4}$", "(", "a{1000000}", "^\\d+-\\w*$", ".*"]))})
            }
            3 => json!({"type": "integer", "minimum": edge(rng), "maximum": edge(rng)}),
            4 => json!({"type": "number", "minimum": 1e308, "maximum": 1e308, "multipleOf": edge(rng)}),
            5 => json!({"enum": [edge(rng), edge(rng)]}),
            6 => json!({"type": "boolean"}),
            7 => json!({"type": ["null", "string", "integer"]}),
            _ => {
                json!({"type": "string", "format": (pick(rng, &["date", "date-time", "email", "uuid", "ipv4", "nonsense"]))})
            }
        }
    } else {
        match rng.random_range(0..6) {
            0 | 1 => {
                let n = rng.random_range(0..5);
                let mut props = serde_json::Map::new();
                let mut required = Vec::new();
                for i in 0..n {
                    let name = format!("f{i}");
                    props.insert(name.clone(), schema(rng, depth + 1));
                    if rng.random_range(0..2) == 0 {
                        required.push(Value::String(name));
                    }
                }
                json!({"type": "object", "properties": props, "required": required,
                       "additionalProperties": rng.random_range(0..2) == 0})
            }
            2 => json!({"type": "array", "items": schema(rng, depth + 1),
                        "minItems": (pick(rng, &[0, 2, 1_000_000_000u64])), "maxItems": (pick(rng, &[3, 1]))}),
            3 => json!({"anyOf": [schema(rng, depth + 1), schema(rng, depth + 1)]}),
            4 => json!({"allOf": [schema(rng, depth + 1), {"type": "integer"}]}),
            _ => json!({"$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}},
                        "required": ["next"]}}, "$ref": "#/$defs/Node"}),
        }
    };
    if rng.random_range(0..12) == 0
        && let Some(o) = s.as_object_mut()
    {
        // A keyword of the wrong type.
        o.insert(["type", "properties", "required", "items", "enum"][rng.random_range(0..5)].into(), edge(rng));
    }
    s
}

fn tools(rng: &mut ChaCha8Rng) -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "weather",
        "parameters": schema(rng, 0)}}])
}

/// A valid request body of one of the endpoints, with its path.
fn valid(rng: &mut ChaCha8Rng) -> (&'static str, Value) {
    let model = ["fixed", "sched", "agent"][rng.random_range(0..3)];
    match rng.random_range(0..10) {
        0..=3 => {
            let mut b = json!({"model": model, "messages": [{"role": "system", "content": "be brief"},
                {"role": "user", "content": (pick(rng, &["hello there", "pick one", "weather in Paris", "long"]))}],
                "max_tokens": rng.random_range(1..40), "stream": rng.random_range(0..2) == 0,
                "seed": rng.random_range(0..100)});
            let o = b.as_object_mut().unwrap();
            match rng.random_range(0..6) {
                0 => {
                    o.insert("tools".into(), tools(rng));
                    o.insert("tool_choice".into(), json!(["auto", "required", "none"][rng.random_range(0..3)]));
                }
                1 => {
                    o.insert(
                        "response_format".into(),
                        json!({"type": "json_schema",
                        "json_schema": {"name": "answer", "schema": schema(rng, 0)}}),
                    );
                    // Room for the whole answer, so its content is judged.
                    o.insert("max_tokens".into(), json!(200));
                }
                2 => {
                    o.insert("logprobs".into(), json!(true));
                    o.insert("top_logprobs".into(), json!(rng.random_range(0..21)));
                }
                3 => {
                    o.insert("n".into(), json!(rng.random_range(1..4)));
                    o.insert("stop".into(), json!(["e", "\n"]));
                }
                4 => {
                    o.insert("stream_options".into(), json!({"include_usage": true}));
                }
                _ => {}
            }
            ("/v1/chat/completions", b)
        }
        4..=6 => {
            let prompt = match rng.random_range(0..3) {
                0 => json!("hello there"),
                1 => json!([1, 2, 3, 4]),
                _ => json!(["one", "two"]),
            };
            (
                "/v1/completions",
                json!({"model": model, "prompt": prompt, "max_tokens": rng.random_range(1..40),
                       "stream": rng.random_range(0..2) == 0, "logprobs": rng.random_range(0..3)}),
            )
        }
        7 => ("/tokenize", json!({"model": model, "prompt": "hello there", "add_special_tokens": true})),
        8 => ("/tokenize", json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})),
        _ => ("/detokenize", json!({"model": model, "tokens": [1, 2, 3]})),
    }
}

/// Every path to a value inside `v` (object keys and array indices).
fn paths(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                at.push(k.clone());
                out.push(at.clone());
                paths(c, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                at.push(i.to_string());
                out.push(at.clone());
                paths(c, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn at_mut<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, k| match v {
        Value::Object(m) => m.get_mut(k),
        Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

/// One case: what is sent and how.
struct Case {
    what: String,
    /// The raw bytes of the request (head and body).
    raw: Vec<u8>,
    /// Send the bytes in pieces with pauses (a slow sender).
    slow: bool,
    /// Whether the request was sent whole: if not, the server may close
    /// the connection or answer 400/408 as it likes.
    whole: bool,
    /// The body as sent, when it is JSON: what a 200's content must satisfy.
    body: Option<Value>,
}

fn request(path: &str, content_type: Option<&str>, body: &[u8], extra_head: &str) -> Vec<u8> {
    let ct = content_type.map(|c| format!("Content-Type: {c}\r\n")).unwrap_or_default();
    let mut raw = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{ct}{extra_head}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    raw
}

fn make_case(i: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed() ^ 0x5e7e_u64 ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (path, mut body) = valid(&mut rng);
    let kind = rng.random_range(0..20);
    let mut what = format!("{path} {body}");
    let mut ct = Some("application/json");
    let mut slow = false;
    let mut whole = true;
    let mut extra = String::new();
    let mut text: Option<Vec<u8>> = None;
    match kind {
        0..=8 => {
            // A field set to an edge value, deleted, or a key added.
            let mut all = Vec::new();
            paths(&body, &mut Vec::new(), &mut all);
            let p = all[rng.random_range(0..all.len())].clone();
            match rng.random_range(0..5) {
                0 => {
                    if let Some((last, parent)) = p.split_last()
                        && let Some(Value::Object(m)) = at_mut(&mut body, parent)
                    {
                        m.remove(last);
                    }
                    what = format!("{path}: delete {}", p.join("."));
                }
                1 => {
                    let k = [
                        "max_completion_tokens",
                        "min_tokens",
                        "temperature",
                        "top_p",
                        "top_k",
                        "presence_penalty",
                        "repetition_penalty",
                        "ignore_eos",
                        "skip_special_tokens",
                        "truncate_prompt_tokens",
                        "prompt_logprobs",
                        "echo",
                        "add_generation_prompt",
                        "continue_final_message",
                        "request_id",
                        "priority",
                        "guided_json",
                        "guided_choice",
                        "guided_regex",
                        "structured_outputs",
                        "response_format",
                        "logit_bias",
                        "best_of",
                        "user",
                        "suffix",
                        "return_token_strs",
                        "chat_template_kwargs",
                        "n",
                        "stop_token_ids",
                    ][rng.random_range(0..29)];
                    let v = edge(&mut rng);
                    what = format!("{path}: add {k} = {v}");
                    body.as_object_mut().unwrap().insert(k.into(), v);
                }
                _ => {
                    let v = edge(&mut rng);
                    what = format!("{path}: {} = {v}", p.join("."));
                    if let Some(slot) = at_mut(&mut body, &p) {
                        *slot = v;
                    }
                }
            }
        }
        9 => {
            // Structured output in each of its spellings, with a random schema.
            let (k, v) = match rng.random_range(0..5) {
                0 => ("guided_json", schema(&mut rng, 0)),
                1 => ("structured_outputs", json!({"choice": ["yes", "no", edge(&mut rng)]})),
                2 => (
                    "structured_outputs",
                    json!({"regex": (pick(&mut rng, &["[a-c]{3}", "(", "\\d{2,5}x?", "a{0,1000000}", "(ab|c)*d"]))}),
                ),
                3 => ("structured_outputs", json!({"json": schema(&mut rng, 0)})),
                _ => (
                    "response_format",
                    json!({"type": (pick(&mut rng, &["json_schema", "json_object", "text", "nope"])),
                    "json_schema": edge(&mut rng)}),
                ),
            };
            what = format!("{path}: {k} = {v}");
            body.as_object_mut().unwrap().insert(k.into(), v);
        }
        10 => {
            // Tools whose schemas are random.
            let t = tools(&mut rng);
            what = format!("{path}: tools = {t}");
            body.as_object_mut().unwrap().insert("tools".into(), t);
        }
        11 => {
            let s = serde_json::to_vec(&body).unwrap();
            let cut = rng.random_range(0..s.len());
            what = format!("{path}: body cut at byte {cut} (Content-Length says so)");
            text = Some(s[..cut].to_vec());
        }
        12 => {
            let mut s = serde_json::to_vec(&body).unwrap();
            let at = rng.random_range(0..=s.len());
            let junk: &[u8] =
                [&b"\0"[..], b"}", b"{", b",", b"\xff\xfe", b"\"", b"]]]]", b"NaN"][rng.random_range(0..8)];
            s.splice(at..at, junk.iter().copied());
            what = format!("{path}: insert {junk:?} at byte {at}");
            text = Some(s);
        }
        13 => {
            ct = [
                None,
                Some("text/plain"),
                Some("application/x-www-form-urlencoded"),
                Some("application/json; charset=latin1"),
                Some("APPLICATION/JSON"),
            ][rng.random_range(0..5)];
            what = format!("{path}: Content-Type {ct:?}");
        }
        14 => {
            slow = true;
            what = format!("{path}: sent slowly");
        }
        15 => {
            // Deep nesting.
            let depth = [64, 200, 5_000][rng.random_range(0..3)];
            let nested = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            let s = serde_json::to_string(&body).unwrap();
            let s = s.replacen("{", &format!("{{\"deep\":{nested},"), 1);
            what = format!("{path}: a value {depth} deep");
            text = Some(s.into_bytes());
        }
        16 => {
            extra =
                ["X-Request-Id: abc\r\n", "X-Request-Id: \r\n", "X-Request-Id: ä\r\n", "Accept: text/event-stream\r\n"]
                    [rng.random_range(0..4)]
                .into();
            what = format!("{path}: header {}", extra.trim());
        }
        17 => {
            // Prompts of many shapes.
            let shapes = [
                json!([]),
                json!([[]]),
                json!([-1]),
                json!([u32::MAX]),
                json!([1e9]),
                json!(""),
                json!([""]),
                json!([1, "a"]),
                json!([{"a": 1}]),
            ];
            let v = pick(&mut rng, &shapes);
            let k = if path == "/v1/chat/completions" { "messages" } else { "prompt" };
            what = format!("{path}: {k} = {v}");
            body.as_object_mut().unwrap().insert(k.into(), v);
        }
        18 => {
            // A large valid request: n and max_tokens high on a small context.
            let o = body.as_object_mut().unwrap();
            o.insert("n".into(), json!([8, 64, 1024][rng.random_range(0..3)]));
            o.insert("max_tokens".into(), json!(200));
            o.insert("stream".into(), json!(true));
            what = format!("{path}: n {} max_tokens 200 streamed", o["n"]);
        }
        _ => {
            whole = false;
            let s = serde_json::to_vec(&body).unwrap();
            let cut = rng.random_range(0..s.len());
            what = format!("{path}: sender hangs up after {cut} of {} body bytes", s.len());
            let mut raw = request(path, ct, &s, "");
            raw.truncate(raw.len() - s.len() + cut);
            return Case { what, raw, slow: false, whole, body: None };
        }
    }
    let sent = text.is_none().then(|| body.clone());
    let bytes = text.unwrap_or_else(|| serde_json::to_vec(&body).unwrap());
    Case { what, raw: request(path, ct, &bytes, &extra), slow, whole, body: sent }
}

/// Sends a case and reads the answer (None when the server closed without one).
fn send_case(port: u16, case: &Case) -> Result<Option<Resp>, String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    if case.slow {
        for piece in case.raw.chunks(case.raw.len().div_ceil(6).max(1)) {
            s.write_all(piece).map_err(|e| format!("write: {e}"))?;
            std::thread::sleep(Duration::from_millis(150));
        }
    } else {
        let _ = s.write_all(&case.raw);
    }
    if !case.whole {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
            return Err("no answer within 30 s".into());
        }
        Err(_) if !raw.is_empty() => {}
        Err(e) => return Err(format!("read: {e}")),
    }
    if raw.is_empty() {
        return Ok(None);
    }
    Ok(Some(parse(&raw)))
}

/// What is wrong with an answer, if anything.
fn judge(case: &Case, r: Option<&Resp>) -> Option<String> {
    let Some(r) = r else {
        return if case.whole { Some("the connection closed without an answer".into()) } else { None };
    };
    if !matches!(r.status, 200 | 400 | 404 | 405 | 408 | 413 | 415 | 422 | 429 | 503) {
        return Some(format!("status {}", r.status));
    }
    if r.status == 200 {
        if r.header("content-type").is_some_and(|c| c.contains("text/event-stream")) {
            let events = r.events();
            if events.last().map(String::as_str) != Some("[DONE]") {
                return Some("a stream that does not end in [DONE]".into());
            }
            for e in &events[..events.len() - 1] {
                if serde_json::from_str::<Value>(e).is_err() {
                    return Some(format!("a stream event that is not JSON: {e:.200}"));
                }
            }
        } else {
            let Ok(v) = serde_json::from_str::<Value>(&r.body) else {
                return Some(format!("a 200 body that is not JSON: {:.200}", r.body));
            };
            return case.body.as_ref().and_then(|b| unmet_constraint(b, &v));
        }
        return None;
    }
    if case.whole && r.status != 408 {
        let Ok(v) = serde_json::from_str::<Value>(&r.body) else {
            return Some(format!("a {} body that is not JSON: {:.200}", r.status, r.body));
        };
        let message = v["error"]["message"].as_str().or(v["detail"].as_str());
        if message.is_none_or(str::is_empty) {
            return Some(format!("a {} body without an error message: {:.200}", r.status, r.body));
        }
    }
    None
}

/// A whole 200 answer whose content breaks the structured-output
/// constraint it was asked for (a JSON Schema, a JSON object, a regex or a
/// choice): a silent wrong answer. Choices cut by `max_tokens` (finish
/// reason `length`) or a stop string, or answered with a tool call, are
/// not judged.
fn unmet_constraint(body: &Value, answer: &Value) -> Option<String> {
    let rf = &body["response_format"];
    let so = &body["structured_outputs"];
    for c in answer["choices"].as_array()? {
        // A stop string (`stop_reason` names it) cuts a constrained answer as
        // any other, in vLLM too.
        if c["finish_reason"] != "stop"
            || c["stop_reason"].is_string()
            || c["message"]["tool_calls"].as_array().is_some_and(|t| !t.is_empty())
        {
            continue;
        }
        let Some(text) = c["message"]["content"].as_str().or(c["text"].as_str()) else { continue };
        let json = || serde_json::from_str::<Value>(text).ok();
        let schema = match (&rf["type"], &rf["json_schema"]["schema"], &so["json"]) {
            (t, s, _) if t == "json_schema" && s.is_object() => Some(s),
            (_, _, s) if s.is_object() => Some(s),
            _ => None,
        };
        if let Some(schema) = schema
            && let Ok(v) = jsonschema::validator_for(schema)
            && !json().is_some_and(|j| v.is_valid(&j) || valid_as_python_checks_multiple_of(schema, &j))
        {
            return Some(format!("content {text:.200} breaks its schema {schema:.300}"));
        }
        if (rf["type"] == "json_object" || so["json_object"] == true) && !json().is_some_and(|j| j.is_object()) {
            return Some(format!("content {text:.200} is not a JSON object"));
        }
        if let Some(re) = so["regex"].as_str()
            && let Ok(re) = regex::Regex::new(&format!("^(?:{re})$"))
            && !re.is_match(text)
        {
            return Some(format!("content {text:.200} does not match its regex"));
        }
        if let Some(choices) = so["choice"].as_array()
            && choices.iter().all(Value::is_string)
            && !choices.iter().any(|o| o.as_str() == Some(text))
        {
            return Some(format!("content {text:.200} is none of its choices"));
        }
    }
    None
}

/// Past 2^53, `multipleOf` is judged differently by validators: Python's
/// `jsonschema` (and pydantic) divide in floats (1e308 is a multiple of
/// 1e9), the `jsonschema` crate takes the remainder of the binary values
/// (it is not). A value valid but for `multipleOf`, all of whose numbers
/// are that large, is judged as Python judges it: valid.
fn valid_as_python_checks_multiple_of(schema: &Value, v: &Value) -> bool {
    fn strip(s: &Value) -> Value {
        match s {
            Value::Object(m) => Value::Object(
                m.iter().filter(|(k, _)| k.as_str() != "multipleOf").map(|(k, v)| (k.clone(), strip(v))).collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    fn numbers(v: &Value, out: &mut Vec<f64>) {
        match v {
            Value::Number(n) => out.extend(n.as_f64()),
            Value::Array(a) => a.iter().for_each(|x| numbers(x, out)),
            Value::Object(m) => m.values().for_each(|x| numbers(x, out)),
            _ => {}
        }
    }
    let mut ns = Vec::new();
    numbers(v, &mut ns);
    !ns.is_empty()
        && ns.iter().all(|n| n.abs() >= 2f64.powi(53))
        && jsonschema::validator_for(&strip(schema)).is_ok_and(|val| val.is_valid(v))
}

/// The server's resident memory, in MiB (Linux).
fn rss_mib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb / 1024)
}

#[test]
fn mutated_and_abusive_requests_get_an_answer_and_the_server_keeps_serving() {
    let server = Server::start_with(FUZZ_MODELS, &[]);
    let n = u64::from(cases(300));
    let mut failures = Vec::new();
    let mut tally = std::collections::BTreeMap::<u16, u32>::new();
    let mut peak = 0;
    for i in 0..n {
        let case = make_case(i);
        let answer = send_case(server.port, &case);
        let why = match &answer {
            Err(e) => Some(e.clone()),
            Ok(r) => {
                if let Some(r) = r {
                    *tally.entry(r.status).or_default() += 1;
                }
                judge(&case, r.as_ref())
            }
        };
        // The server is still there and answers quickly.
        let t = Instant::now();
        let health = std::panic::catch_unwind(|| server.get("/health").status);
        let took = t.elapsed();
        let alive = matches!(health, Ok(200)) && took < Duration::from_secs(1);
        peak = peak.max(rss_mib(server.pid()).unwrap_or(0));
        let why = why.or_else(|| (!alive).then(|| format!("/health after the case: {health:?} in {took:?}")));
        if let Some(why) = why {
            failures.push(format!("case {i} ({}): {why}", case.what.chars().take(300).collect::<String>()));
            if !alive {
                break;
            }
        }
    }
    let stderr = server.stderr();
    assert!(!stderr.contains("panicked"), "the server panicked:\n{stderr}");
    eprintln!("{n} server cases: statuses {tally:?}, peak RSS {peak} MiB");
    assert!(failures.is_empty(), "{} of {n} cases failed:\n{}", failures.len(), failures.join("\n---\n"));
    assert!(peak < 1024, "peak RSS {peak} MiB");
    // The slice exercised both answers and refusals.
    assert!(tally.get(&200).is_some_and(|&c| c > 0) && tally.get(&400).is_some_and(|&c| c > 0), "{tally:?}");
}
