//! Configuration errors that name the file, the key path, the value and
//! what is allowed.

use std::fmt;
use std::path::{Path, PathBuf};

/// A scenario, hardware or trace file that cannot be used as written.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// Dotted key path (`scheduler.max_batch_tokens`), a CSV location, or empty.
    pub path: String,
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigError {
    /// `message` is anything displayable: text, or a typed error such as
    /// [`super::keys::KeyError`] whose words become the message.
    pub fn new(file: &Path, path: impl Into<String>, message: impl fmt::Display) -> Self {
        ConfigError { file: file.to_path_buf(), path: path.into(), line: None, message: message.to_string() }
    }

    pub fn at_line(mut self, line: Option<usize>) -> Self {
        self.line = line;
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

impl From<crate::input::InputError> for ConfigError {
    fn from(e: crate::input::InputError) -> Self {
        ConfigError::new(&e.file, "", e.message())
    }
}

impl From<crate::trace::TraceError> for ConfigError {
    fn from(e: crate::trace::TraceError) -> Self {
        ConfigError::new(&e.file, e.at, e.message)
    }
}
