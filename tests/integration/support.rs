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

impl TestCommand {
    pub fn new(args: &[&str]) -> TestCommand {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_llmsim"));
        cmd.args(args).current_dir(root());
        TestCommand { cmd }
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
