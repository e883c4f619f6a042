//! A stand-in for `crate::content` (the tokenizer and responses.yml
//! matching, written in parallel) with the same signatures, so that the
//! server builds and is tested before that module lands. Switching is the
//! one `use ... as content;` line in `server.rs`.
//!
//! Tokens here are runs of non-whitespace with their leading whitespace;
//! the answer echoes the last user message.

pub mod tokenizer {
    /// Tokens counted for each chat message besides its text.
    pub const PER_MESSAGE_OVERHEAD: usize = 4;
    /// Tokens counted once per prompt (the assistant's reply prefix).
    pub const PER_PROMPT_OVERHEAD: usize = 3;

    /// Splits text into tokens whose concatenation is the text.
    pub fn tokenize(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut seen_word = false;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() && seen_word {
                out.push(&text[start..i]);
                start = i;
                seen_word = false;
            } else if !c.is_whitespace() {
                seen_word = true;
            }
        }
        if start < text.len() {
            out.push(&text[start..]);
        }
        out
    }

    pub fn count(text: &str) -> usize {
        tokenize(text).len()
    }

    /// Prompt tokens of a chat: every message's text plus the overheads.
    pub fn count_chat<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> usize {
        messages.into_iter().map(|(role, content)| count(role) + count(content) + PER_MESSAGE_OVERHEAD).sum::<usize>()
            + PER_PROMPT_OVERHEAD
    }
}

pub mod responses {
    use std::path::Path;

    use crate::config::ConfigError;

    /// What the answer depends on.
    pub struct Query<'a> {
        pub last_user_message: &'a str,
        pub model: &'a str,
        pub seed: Option<u64>,
    }

    /// The answer text and the entry that produced it.
    pub struct Answer {
        pub text: String,
        pub entry: String,
    }

    /// The scripted answers (the stub echoes).
    #[derive(Clone, Debug, Default)]
    pub struct Responses;

    impl Responses {
        pub fn load(file: &Path) -> Result<Responses, ConfigError> {
            crate::config::read_text(file).map(|_| Responses)
        }

        pub fn builtin() -> Responses {
            Responses
        }

        pub fn answer(&self, q: &Query) -> Answer {
            let text = q.last_user_message.trim();
            let text = if text.is_empty() { "Hello from llmsim." } else { text };
            Answer { text: text.to_string(), entry: "echo".to_string() }
        }
    }
}

pub use responses::{Answer, Query, Responses};
