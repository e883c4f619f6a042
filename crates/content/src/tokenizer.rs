//! The built-in tokenizer: counts prompt tokens and splits answers into the
//! tokens the server streams, with no vocabulary file.
//!
//! It is the pre-tokenizer of GPT-style BPE tokenizers (GPT-2, cl100k)
//! without the BPE merges, so it counts about as many tokens as a real
//! tokenizer would for English prose and code, and it is fast and exact
//! about one thing that matters to a streaming server: the tokens
//! concatenate back to the text byte for byte. The rules, tried in this
//! order at each position:
//!
//! | rule | regex equivalent |
//! |---|---|
//! | contractions, any case | `'(?i:s\|t\|re\|ve\|m\|ll\|d)` |
//! | one CJK character (Han, Hiragana, Katakana, Hangul) with its combining marks, optional leading space | ` ?[\p{Han}…]\p{M}*` |
//! | a run of other letters and combining marks, optional leading space | ` ?\p{L}[\p{L}\p{M}]*` |
//! | up to three digits (no leading space, as cl100k) | `\p{N}{1,3}` |
//! | a run of anything else (punctuation, symbols, emoji), optional leading space | ` ?[^\s\p{L}\p{N}]+` |
//! | whitespace up to and including its last newline | `\s*[\r\n]` |
//! | whitespace not followed by a non-space | `\s+(?!\S)` |
//! | any other whitespace | `\s+` |
//!
//! The `regex` crate has no look-around, so the scanner is written by hand;
//! the table above is its specification. Its one departure from GPT-2 is
//! deliberate: combining marks stay with the letters they modify, so a
//! decomposed `é` is not split in two. Like GPT-2, a contraction is split off
//! wherever an apostrophe starts a token (`'tis` is `'t` + `is`).
//!
//! Chat prompts also pay for the chat template around each message; see
//! [`count_chat`].

mod classes;

use classes::{Class, Table};

/// Tokens a chat message costs beyond its content: the ChatML framing used
/// by Qwen and by OpenAI's own models, `<|im_start|>` + role + `\n` before
/// the content and `<|im_end|>` + `\n` after it (5 tokens, role included).
pub const PER_MESSAGE_OVERHEAD: usize = 5;

/// Tokens added once per chat prompt: the assistant turn's priming,
/// `<|im_start|>assistant\n` (3 tokens).
pub const PER_PROMPT_OVERHEAD: usize = 3;

/// Splits text into tokens; concatenating them gives `text` back exactly.
pub fn tokenize(text: &str) -> Vec<&str> {
    tokens(text).collect()
}

/// The number of tokens in `text`, without allocating.
pub fn count(text: &str) -> usize {
    tokens(text).count()
}

/// Prompt tokens of a chat: sum(count(content) + PER_MESSAGE_OVERHEAD) +
/// PER_PROMPT_OVERHEAD. The role is part of the per-message overhead (every
/// standard role, `system`, `user`, `assistant`, `tool`, `developer`, is one
/// token), so its text is not counted separately.
pub fn count_chat<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> usize {
    let body: usize = messages.into_iter().map(|(_role, content)| count(content) + PER_MESSAGE_OVERHEAD).sum();
    body + PER_PROMPT_OVERHEAD
}

/// The tokens of `text`, lazily.
pub fn tokens(text: &str) -> Tokens<'_> {
    Tokens { rest: text, table: classes::table() }
}

/// Iterator over the tokens of a text; see [`tokens`].
#[derive(Clone)]
pub struct Tokens<'a> {
    rest: &'a str,
    table: &'static Table,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let len = Scanner { s: self.rest, t: self.table }.token_len();
        let (token, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(token)
    }
}

impl std::fmt::Debug for Tokens<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").field("rest", &self.rest).finish()
    }
}

/// Finds the end of the first token of a non-empty string. Every method
/// takes a byte offset at a character boundary and returns one.
struct Scanner<'a> {
    s: &'a str,
    t: &'static Table,
}

impl Scanner<'_> {
    /// The byte length of the first token (at least one character).
    fn token_len(&self) -> usize {
        if let Some(n) = self.contraction() {
            return n;
        }
        match self.class_at(0) {
            Some((Class::Space, _)) => self.space(),
            Some((Class::Digit, _)) => self.digits(0),
            Some(_) => self.word(0),
            None => 0,
        }
    }

    /// The class and byte length of the character at `i`, or None at the end.
    #[inline(always)]
    fn class_at(&self, i: usize) -> Option<(Class, usize)> {
        let b = *self.s.as_bytes().get(i)?;
        if b < 0x80 {
            return Some((self.t.of(b as char), 1));
        }
        let c = self.s[i..].chars().next()?;
        Some((self.t.of(c), c.len_utf8()))
    }

    /// `'s 't 're 've 'm 'll 'd` in any case, at the start.
    fn contraction(&self) -> Option<usize> {
        let b = self.s.as_bytes();
        if b.first() != Some(&b'\'') {
            return None;
        }
        let lower = |i: usize| b.get(i).map(u8::to_ascii_lowercase);
        match (lower(1)?, lower(2)) {
            (b'r', Some(b'e')) | (b'v', Some(b'e')) | (b'l', Some(b'l')) => Some(3),
            (b's' | b't' | b'm' | b'd', _) => Some(2),
            _ => None,
        }
    }

    /// A letter run, a CJK character or a punctuation run starting at `i`
    /// (0, or 1 after a leading space).
    fn word(&self, i: usize) -> usize {
        match self.class_at(i) {
            Some((Class::Letter, n)) => self.while_in(i + n, Class::Letter.bit() | Class::Mark.bit()),
            Some((Class::Cjk, n)) => self.while_in(i + n, Class::Mark.bit()),
            Some((Class::Other | Class::Mark, n)) => self.while_in(i + n, Class::Other.bit() | Class::Mark.bit()),
            // Digits and spaces never reach here (see `space` and `token_len`).
            Some((_, n)) => i + n,
            None => i,
        }
    }

    /// Up to three digits starting at `i`.
    fn digits(&self, mut i: usize) -> usize {
        for _ in 0..3 {
            match self.class_at(i) {
                Some((Class::Digit, n)) => i += n,
                _ => break,
            }
        }
        i
    }

    /// Extends from `i` over characters whose class is in `classes` (a
    /// set of [`Class::bit`]s).
    #[inline]
    fn while_in(&self, mut i: usize, classes: u8) -> usize {
        while let Some((class, n)) = self.class_at(i) {
            if classes & class.bit() == 0 {
                break;
            }
            i += n;
        }
        i
    }

    /// The whitespace rules, at a whitespace character.
    fn space(&self) -> usize {
        let run = self.while_in(0, Class::Space.bit());
        let ws = &self.s[..run];
        // `\s*[\r\n]`: up to and including the run's last newline.
        if let Some(nl) = ws.rfind(['\r', '\n']) {
            return nl + 1;
        }
        // `\s+(?!\S)` at the end of the text.
        if run == self.s.len() {
            return run;
        }
        // `\s+(?!\S)`: all but the last character, which goes with what follows.
        let last = ws.char_indices().next_back().map_or(0, |(i, _)| i);
        if last > 0 {
            return last;
        }
        // One whitespace character before a non-space: a space joins a
        // letter run, a CJK character or a punctuation run; otherwise `\s+`.
        let takes_space =
            || matches!(self.class_at(1), Some((Class::Letter | Class::Cjk | Class::Other | Class::Mark, _)));
        if ws == " " && takes_space() { self.word(1) } else { run }
    }
}

#[cfg(test)]
mod tests;
