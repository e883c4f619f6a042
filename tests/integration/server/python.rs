//! The official `openai` Python package against a live server: streamed and
//! whole chat and completions, content, token counts, usage, logprobs, `n`,
//! `ignore_eos`, faults, tool calls (whole, streamed and the turn after the
//! tool's result), and TTFT against the engine's prediction.
//!
//! It needs python3 with the `openai` package, so it is `#[ignore]`d: a
//! plain `cargo test` lists it as ignored (with the reason) instead of
//! passing without running it. CI installs the package and runs it by name
//! (.ci/run), where a missing package fails the test.

use std::process::Command;

use super::harness::*;
use crate::support::*;

/// Two models that fail every request: a 429 before the first byte, and a
/// stream cut after two tokens; and one with vLLM's tool-call flags.
const FAULTY: &str = "  - name: flaky
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    faults: {rate: 1, kinds: [{kind: http_429, retry_after_s: 1}]}
  - name: cutter
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    faults: {rate: 1, kinds: [{kind: cut, after_tokens: 2}]}
  - name: agent
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    tool_call_parser: hermes
    enable_auto_tool_choice: true
";

fn python_with_openai() -> Option<String> {
    for python in ["python3", "python"] {
        let ok = Command::new(python).args(["-c", "import openai"]).output().is_ok_and(|o| o.status.success());
        if ok {
            return Some(python.to_string());
        }
    }
    None
}

#[test]
#[ignore = "needs python3 with the openai package (pip install openai); CI runs it: cargo test --release --test \
            integration -- --ignored openai_python"]
fn the_official_openai_python_client_streams_chat_and_completions() {
    let python = python_with_openai()
        .expect("python3 with the `openai` package is missing: `pip install openai` (.ci/run does) and run again");
    let server = Server::start_with(&format!("{MODELS}{FAULTY}"), &[]);
    let out = Command::new(python)
        .arg(repo("tests/python/openai_client.py"))
        .arg(format!("http://127.0.0.1:{}/v1", server.port))
        .output()
        .expect("run the python client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server\n{}",
        server.stderr()
    );
    assert!(stdout.contains("openai client: all checks passed"), "{stdout}");
    // Shown with --nocapture: how close the client's TTFT came to the engine's.
    stdout.lines().filter(|l| l.contains("TTFT")).for_each(|l| println!("{l}"));
}
