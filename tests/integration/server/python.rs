//! The official `openai` Python package against a live server: streamed and
//! whole chat and completions, content, token counts, usage, and TTFT
//! against the engine's prediction. CI installs the package (.ci/run) and
//! this test fails there without it; locally it is skipped with a notice.

use std::process::Command;

use super::harness::*;
use crate::support::*;

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
fn the_official_openai_python_client_streams_chat_and_completions() {
    let Some(python) = python_with_openai() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but python3 with the `openai` package is missing: .ci/run must `pip install openai`"
        );
        eprintln!("NOTICE: skipping the openai client test: `python3 -c 'import openai'` failed (pip install openai)");
        return;
    };
    let server = Server::start();
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
