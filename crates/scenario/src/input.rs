//! One input layer for every file llmsim reads.
//!
//! Why it exists: each reader used to open its file its own way, and some
//! read a file whole before looking at its size (a `calibration:
//! /dev/zero` read 2 GB before failing) while others refused a 5 MB
//! benchmark file at the scenario's 4 MiB. Here every file has a [`Kind`],
//! each kind one limit ([`Kind::limit`], listed in `docs/scenario.md`), and
//! every read stops at that limit plus one byte whatever the file is: a
//! regular file is refused by its size before it is read, and a pipe, a
//! device or a file that grows while it is read is refused at the first
//! byte past the limit. A file with a NUL byte in its first block (64 KiB)
//! is binary (or UTF-16) and refused before it is parsed: `/dev/zero` is
//! refused at its first byte.
//!
//! Small kinds (YAML and small JSON) are read whole with [`read_text`].
//! The large kinds (traces and measured files, up to 1 GiB) are streamed:
//! [`open`] gives a buffered, bounded reader that the CSV and JSON parsers
//! read from, so a file's text is never held whole next to what is parsed
//! from it. Errors name the file, the kind and the limit.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::limits;
use llmsim_core::util::thousands;

/// What a file is, for its limit and for messages.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Scenario,
    Hardware,
    Calibration,
    /// `models/NAME.yml`, a model a scenario names.
    Model,
    /// `model.hf_config`: a Hugging Face `config.json`.
    HfConfig,
    /// A sweep file (or the scenario `llmsim sweep` is given).
    Sweep,
    Experiment,
    /// The models file of `llmsim serve`.
    ServeModels,
    /// `responses.yml`, scripted answers of `llmsim serve`.
    Responses,
    /// A Hugging Face `tokenizer.json` for `llmsim serve`.
    Tokenizer,
    /// A trace CSV or Mooncake-style JSONL trace.
    Trace,
    /// A measured file: benchmark JSON (per-request arrays), a trace CSV
    /// with measured latencies, a measured table, an AIConfigurator CSV.
    Measured,
    /// The configuration of a measured load test (inference-perf's YAML).
    MeasuredConfig,
    /// An AIConfigurator kernel table (`llmsim kernels`).
    KernelTable,
    /// An `llmsim run --json` result (`llmsim diff`'s PREDICTED).
    Prediction,
    /// A sweep shard (`llmsim merge`).
    Shard,
    /// `results/fidelity-fits.yml`, the record of `llmsim fidelity`.
    FitRecord,
}

impl Kind {
    /// Every kind, in the order the documentation lists them.
    pub const ALL: [Kind; 17] = [
        Kind::Scenario,
        Kind::Hardware,
        Kind::Calibration,
        Kind::Model,
        Kind::Sweep,
        Kind::Experiment,
        Kind::ServeModels,
        Kind::Responses,
        Kind::MeasuredConfig,
        Kind::FitRecord,
        Kind::HfConfig,
        Kind::Prediction,
        Kind::Tokenizer,
        Kind::Shard,
        Kind::Trace,
        Kind::Measured,
        Kind::KernelTable,
    ];

    /// The most bytes a file of this kind may have.
    pub const fn limit(self) -> u64 {
        match self {
            Kind::Scenario
            | Kind::Hardware
            | Kind::Calibration
            | Kind::Model
            | Kind::Sweep
            | Kind::Experiment
            | Kind::ServeModels
            | Kind::Responses
            | Kind::MeasuredConfig
            | Kind::FitRecord
            | Kind::HfConfig
            | Kind::Prediction => limits::MAX_YAML_BYTES as u64,
            Kind::Tokenizer => limits::MAX_TOKENIZER_BYTES,
            Kind::Shard => limits::MAX_SHARD_BYTES,
            Kind::Trace => limits::MAX_TRACE_BYTES,
            Kind::Measured | Kind::KernelTable => limits::MAX_MEASURED_BYTES,
        }
    }

    /// The kind as messages name it: `the most llmsim reads for a {name}`.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Scenario => "scenario",
            Kind::Hardware => "hardware profile",
            Kind::Calibration => "calibration profile",
            Kind::Model => "model file",
            Kind::HfConfig => "Hugging Face config.json",
            Kind::Sweep => "sweep file",
            Kind::Experiment => "experiment file",
            Kind::ServeModels => "serve models file",
            Kind::Responses => "responses file",
            Kind::Tokenizer => "tokenizer.json",
            Kind::Trace => "trace",
            Kind::Measured => "measured file",
            Kind::MeasuredConfig => "load test configuration",
            Kind::KernelTable => "kernel table",
            Kind::Prediction => "llmsim run --json result",
            Kind::Shard => "sweep shard",
            Kind::FitRecord => "fit record",
        }
    }

    /// Which files are of this kind, for the documentation.
    pub const fn files(self) -> &'static str {
        match self {
            Kind::Scenario => "scenario (YAML)",
            Kind::Hardware => "hardware profile, `hardware/NAME.yml`",
            Kind::Calibration => "calibration profile, `calibration:`",
            Kind::Model => "model file, `models/NAME.yml`",
            Kind::Sweep => "sweep file",
            Kind::Experiment => "experiment file",
            Kind::ServeModels => "`llmsim serve` models file",
            Kind::Responses => "`llmsim serve` responses file",
            Kind::MeasuredConfig => "inference-perf `config.yaml`",
            Kind::FitRecord => "`results/fidelity-fits.yml`",
            Kind::HfConfig => "`model.hf_config` (Hugging Face `config.json`)",
            Kind::Prediction => "`llmsim diff` PREDICTED (`llmsim run --json`)",
            Kind::Tokenizer => "`tokenizer.json` of `llmsim serve`",
            Kind::Shard => "sweep shard (`llmsim merge`)",
            Kind::Trace => "trace CSV or JSONL (`workload.arrivals.trace`, `run --trace-from`)",
            Kind::Measured => "measured file (`diff`, `calibrate`, `run --trace-from`)",
            Kind::KernelTable => "AIConfigurator kernel table (`llmsim kernels`)",
        }
    }

    /// How files of this kind are read, for the documentation.
    pub const fn reading(self) -> &'static str {
        match self {
            Kind::Trace => "streamed",
            Kind::Measured => "streamed (measured tables, AIConfigurator CSVs and inference-perf stages: whole)",
            _ => "whole",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit in bytes as messages and the docs show it: `4,194,304 bytes (4 MiB)`.
pub fn bytes(limit: u64) -> String {
    let short = if limit >= 1 << 30 && limit.is_multiple_of(1 << 30) {
        format!("{} GiB", limit >> 30)
    } else {
        format!("{} MiB", limit >> 20)
    };
    format!("{} bytes ({short})", thousands(limit))
}

/// Why a file could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Missing, a directory, not UTF-8, or another IO error (the reason).
    Cannot(String),
    /// More bytes than the kind's limit.
    TooLarge,
    /// A NUL byte where text was expected, at this offset.
    Binary(u64),
}

/// A file that could not be read: its path, its kind and why. Shown as
/// `FILE: why`, as a configuration error without a key is (the config
/// and trace errors convert from it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    pub file: PathBuf,
    pub kind: Kind,
    pub reason: Reason,
}

impl InputError {
    pub fn new(file: &Path, kind: Kind, reason: Reason) -> Self {
        InputError { file: file.to_path_buf(), kind, reason }
    }

    /// The error of a failed read of `file`; a read stopped by the limit
    /// ([`Bounded`]) is [`Reason::TooLarge`].
    pub fn from_io(file: &Path, kind: Kind, e: &io::Error) -> Self {
        if e.get_ref().is_some_and(|inner| inner.is::<Exceeded>()) {
            return InputError::new(file, kind, Reason::TooLarge);
        }
        let why = match e.kind() {
            io::ErrorKind::NotFound => "no such file".to_string(),
            io::ErrorKind::InvalidData => "it is not UTF-8 text".to_string(),
            io::ErrorKind::IsADirectory => "it is a directory".to_string(),
            _ => e.to_string(),
        };
        InputError::new(file, kind, Reason::Cannot(why))
    }

    /// What is wrong, without the file's name.
    pub fn message(&self) -> String {
        match &self.reason {
            Reason::Cannot(why) => format!("cannot read the file: {why}"),
            Reason::TooLarge => format!(
                "the file is larger than {}, the most llmsim reads for a {}",
                bytes(self.kind.limit()),
                self.kind
            ),
            Reason::Binary(at) => format!(
                "the file is not text: it has a NUL byte at byte {} (binary, or UTF-16 rather than UTF-8); \
                 a {} is UTF-8 text",
                thousands(*at),
                self.kind
            ),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message())
    }
}

impl std::error::Error for InputError {}

/// The whole file as text, if it is at most its kind's limit.
pub fn read_text(kind: Kind, file: &Path) -> Result<String, InputError> {
    open(kind, file)?.into_text()
}

/// Opens a file for reading up to its kind's limit: refused at once when
/// a regular file is larger, or when its first block holds a NUL byte.
pub fn open(kind: Kind, file: &Path) -> Result<Input, InputError> {
    let err = |e: io::Error| InputError::from_io(file, kind, &e);
    let f = std::fs::File::open(file).map_err(err)?;
    let meta = f.metadata().map_err(err)?;
    if meta.is_dir() {
        return Err(InputError::new(file, kind, Reason::Cannot("it is a directory".into())));
    }
    if meta.is_file() && meta.len() > kind.limit() {
        return Err(InputError::new(file, kind, Reason::TooLarge));
    }
    let mut input = Input {
        file: file.to_path_buf(),
        kind,
        inner: BufReader::with_capacity(64 << 10, Bounded::new(f, kind.limit())),
        replay: Vec::new(),
        replayed: 0,
    };
    let first = input.inner.fill_buf().map_err(err)?;
    if let Some(at) = first.iter().position(|&b| b == 0) {
        return Err(InputError::new(file, kind, Reason::Binary(at as u64)));
    }
    Ok(input)
}

/// An open file of a known kind: buffered, and failing with
/// [`Reason::TooLarge`] (through [`InputError::from_io`]) at the first
/// byte past the limit.
pub struct Input {
    file: PathBuf,
    kind: Kind,
    inner: BufReader<Bounded<std::fs::File>>,
    /// Bytes [`Input::first_non_space`] took to look ahead, served first.
    replay: Vec<u8>,
    replayed: usize,
}

impl Input {
    pub fn file(&self) -> &Path {
        &self.file
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The error of a failed read of this file.
    pub fn error(&self, e: &io::Error) -> InputError {
        InputError::from_io(&self.file, self.kind, e)
    }

    /// The rest of the file as text (a file sniffed by
    /// [`Input::first_non_space`] to be of a shape parsed from text).
    pub fn into_text(mut self) -> Result<String, InputError> {
        let mut text = String::new();
        self.read_to_string(&mut text).map_err(|e| self.error(&e))?;
        if let Some(at) = text.find('\0') {
            return Err(InputError::new(&self.file, self.kind, Reason::Binary(at as u64)));
        }
        Ok(text)
    }

    /// The next `n` bytes (fewer at the end of the file), without
    /// consuming them: what a reader sniffs a format by.
    pub fn peek(&mut self, n: usize) -> Result<&[u8], InputError> {
        while self.replay.len() - self.replayed < n {
            let buf = self.inner.fill_buf().map_err(|e| InputError::from_io(&self.file, self.kind, &e))?;
            if buf.is_empty() {
                break;
            }
            let take = buf.len().min(n - (self.replay.len() - self.replayed));
            self.replay.extend_from_slice(&buf[..take]);
            self.inner.consume(take);
        }
        let end = self.replay.len().min(self.replayed + n);
        Ok(&self.replay[self.replayed..end])
    }

    /// The first byte that is not ASCII whitespace (`None`: there is none),
    /// without consuming anything: what a reader sniffs a format by.
    pub fn first_non_space(&mut self) -> Result<Option<u8>, InputError> {
        loop {
            if let Some(&b) = self.replay[self.replayed..].iter().find(|b| !b.is_ascii_whitespace()) {
                return Ok(Some(b));
            }
            let buf = self.inner.fill_buf().map_err(|e| InputError::from_io(&self.file, self.kind, &e))?;
            if buf.is_empty() {
                return Ok(None);
            }
            let n = buf.len();
            self.replay.extend_from_slice(buf);
            self.inner.consume(n);
        }
    }
}

impl Read for Input {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.replayed < self.replay.len() {
            let n = (self.replay.len() - self.replayed).min(out.len());
            out[..n].copy_from_slice(&self.replay[self.replayed..self.replayed + n]);
            self.replayed += n;
            return Ok(n);
        }
        self.inner.read(out)
    }
}

impl BufRead for Input {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.replayed < self.replay.len() {
            return Ok(&self.replay[self.replayed..]);
        }
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        if self.replayed < self.replay.len() {
            self.replayed = (self.replayed + n).min(self.replay.len());
        } else {
            self.inner.consume(n);
        }
    }
}

/// A read that passed the limit (the payload of the IO error [`Bounded`]
/// returns; [`InputError::from_io`] recognises it).
#[derive(Debug)]
pub struct Exceeded;

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the file is larger than its limit")
    }
}

impl std::error::Error for Exceeded {}

/// A reader that reads at most `limit + 1` bytes and fails at that byte:
/// unlike [`Read::take`], which ends quietly, so a parser would take a
/// file cut at the limit for the whole file.
pub struct Bounded<R> {
    inner: R,
    limit: u64,
    read: u64,
}

impl<R: Read> Bounded<R> {
    pub fn new(inner: R, limit: u64) -> Self {
        Bounded { inner, limit, read: 0 }
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.read > self.limit {
            return Err(io::Error::other(Exceeded));
        }
        let room = usize::try_from(self.limit + 1 - self.read).unwrap_or(usize::MAX);
        let n = out.len().min(room);
        let got = self.inner.read(&mut out[..n])?;
        self.read += got as u64;
        if self.read > self.limit {
            return Err(io::Error::other(Exceeded));
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests;
