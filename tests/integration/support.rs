//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (where Cargo.toml is).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A path relative to the repository root.
pub fn repo(rel: &str) -> PathBuf {
    root().join(rel)
}

/// Runs the built `llmsim` binary in a scratch directory.
pub struct TestCommand {
    cmd: Command,
}

/// The binary under test: the one cargo built, or `LLMSIM_TEST_BIN` (to
/// show that a regression test fails on an older build).
pub fn binary() -> PathBuf {
    std::env::var_os("LLMSIM_TEST_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_llmsim")), PathBuf::from)
}

impl TestCommand {
    pub fn new(args: &[&str]) -> TestCommand {
        let mut cmd = Command::new(binary());
        cmd.args(args).current_dir(root());
        TestCommand { cmd }
    }

    /// Runs with a guard against hangs and runaway memory: the process may
    /// use at most `mem_mib` MiB of address space (`ulimit -v`) and is
    /// killed after `secs` seconds (then the exit code is -1 and stderr
    /// says so). The guard catches a hang; it is not a speed test, so keep
    /// it far above the normal time.
    pub fn bounded(self, secs: u64, mem_mib: u64) -> Out {
        use std::io::Read;
        use std::process::Stdio;
        use std::time::{Duration, Instant};
        let cmd = &self.cmd;
        let mut sh = Command::new("sh");
        sh.arg("-c").arg(format!("ulimit -v {} && exec \"$0\" \"$@\"", mem_mib * 1024));
        sh.arg(cmd.get_program()).args(cmd.get_args());
        if let Some(dir) = cmd.get_current_dir() {
            sh.current_dir(dir);
        }
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        let mut child = sh.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
        let pipe = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                buf
            })
        };
        let out = pipe(Box::new(child.stdout.take().expect("stdout")));
        let err = pipe(Box::new(child.stderr.take().expect("stderr")));
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if start.elapsed() > Duration::from_secs(secs) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = out.join().unwrap_or_default();
        let mut stderr = err.join().unwrap_or_default();
        let status = match status {
            Some(s) => s,
            None => {
                stderr.extend_from_slice(format!("\n[killed after {secs} s: a hang]").as_bytes());
                // A status that is not success and has no code: killed.
                std::os::unix::process::ExitStatusExt::from_raw(9)
            }
        };
        Out(Output { status, stdout, stderr })
    }

    pub fn arg(mut self, a: impl AsRef<std::ffi::OsStr>) -> Self {
        self.cmd.arg(a);
        self
    }

    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.cmd.current_dir(dir);
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.cmd.env(k, v);
        self
    }

    pub fn output(mut self) -> Out {
        let out = self.cmd.output().expect("run llmsim");
        Out(out)
    }

    /// Runs and asserts exit code 0.
    pub fn ok(self) -> Out {
        let out = self.output();
        assert_eq!(out.code(), 0, "expected success\n{}", out.describe());
        out
    }

    /// Runs and asserts the given non-zero exit code.
    pub fn fails_with(self, code: i32) -> Out {
        let out = self.output();
        assert_eq!(out.code(), code, "expected exit {code}\n{}", out.describe());
        out
    }
}

pub struct Out(pub Output);

impl Out {
    pub fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    pub fn describe(&self) -> String {
        format!("exit {}\n--- stdout\n{}\n--- stderr\n{}", self.code(), self.stdout(), self.stderr())
    }
    /// Asserts stderr contains every fragment.
    pub fn stderr_has(&self, fragments: &[&str]) -> &Self {
        let err = self.stderr();
        for f in fragments {
            assert!(err.contains(f), "stderr lacks {f:?}\n{}", self.describe());
        }
        assert!(!err.contains("panicked"), "panic!\n{}", self.describe());
        self
    }
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&p, text).expect("write");
    p
}
