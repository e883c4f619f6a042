//! Python's bare non-finite tokens, quoted as the bytes stream through.

use std::io::{self, BufRead, Read};

/// The bare tokens Python writes for non-finite floats, longest first so
/// `-Infinity` wins over a `-` followed by `Infinity`.
const BARE_TOKENS: [&[u8]; 3] = [b"-Infinity", b"Infinity", b"NaN"];

/// A reader that rewrites bare `Infinity`, `-Infinity` and `NaN` outside
/// JSON strings as the strings `"Infinity"`, `"-Infinity"` and `"NaN"`,
/// which [`super::num`] reads back as floats; every other byte passes
/// unchanged, so lines and columns before each token are kept. It holds
/// at most a token's worth of look-ahead, so a file of any size streams
/// through in constant memory.
pub struct QuoteBare<R> {
    inner: R,
    state: Rewrite,
    /// Output not yet handed out starts here in `state.out`.
    done: usize,
    eof: bool,
}

/// Where the rewrite stands between two bytes.
#[derive(Default)]
struct Rewrite {
    in_string: bool,
    escaped: bool,
    /// Bytes outside a string that may begin a token (`-`, `-I`, `Na`...).
    partial: Vec<u8>,
    out: Vec<u8>,
}

impl<R: BufRead> QuoteBare<R> {
    pub fn new(inner: R) -> Self {
        QuoteBare { inner, state: Rewrite::default(), done: 0, eof: false }
    }

    /// Takes one input block through the rewrite.
    fn refill(&mut self) -> io::Result<()> {
        self.state.out.clear();
        self.done = 0;
        let block = self.inner.fill_buf()?;
        if block.is_empty() {
            // A token cut short by the end stays as it was written.
            let st = &mut self.state;
            st.out.append(&mut st.partial);
            self.eof = true;
            return Ok(());
        }
        let n = block.len();
        self.state.block(block);
        self.inner.consume(n);
        Ok(())
    }
}

impl Rewrite {
    fn block(&mut self, block: &[u8]) {
        let n = block.len();
        let mut i = 0;
        while i < n {
            let b = block[i];
            i += 1;
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                } else {
                    // Copy the run up to the next quote or backslash at once.
                    let run = block[i..].iter().position(|&c| c == b'"' || c == b'\\').map_or(n, |p| i + p);
                    self.out.push(b);
                    self.out.extend_from_slice(&block[i..run]);
                    i = run;
                    continue;
                }
                self.out.push(b);
                continue;
            }
            if self.partial.is_empty() && !matches!(b, b'"' | b'-' | b'I' | b'N') {
                // Copy the run up to the next byte that may matter at once.
                let run = block[i..].iter().position(|&c| matches!(c, b'"' | b'-' | b'I' | b'N')).map_or(n, |p| i + p);
                self.out.push(b);
                self.out.extend_from_slice(&block[i..run]);
                i = run;
                continue;
            }
            self.step(b);
        }
    }

    /// One byte outside a string (or in a token's look-ahead).
    fn step(&mut self, b: u8) {
        if !self.partial.is_empty() || matches!(b, b'-' | b'I' | b'N') {
            self.partial.push(b);
            if let Some(tok) = BARE_TOKENS.iter().find(|t| **t == self.partial.as_slice()) {
                self.out.push(b'"');
                self.out.extend_from_slice(tok);
                self.out.push(b'"');
                self.partial.clear();
            } else if !BARE_TOKENS.iter().any(|t| t.starts_with(&self.partial)) {
                // Not a token: its first byte is plain, the rest may
                // begin one (`-NaN`), as a scan from each byte would find.
                let rest = self.partial.split_off(1);
                self.out.push(self.partial[0]);
                self.partial.clear();
                for c in rest {
                    self.after_partial(c);
                }
            }
            return;
        }
        if b == b'"' {
            self.in_string = true;
        }
        self.out.push(b);
    }

    /// A byte given back from a look-ahead that was not a token: outside
    /// a string still, unless it opens one.
    fn after_partial(&mut self, b: u8) {
        if self.in_string {
            self.out.push(b);
            match b {
                _ if self.escaped => self.escaped = false,
                b'\\' => self.escaped = true,
                b'"' => self.in_string = false,
                _ => {}
            }
        } else {
            self.step(b);
        }
    }
}

impl<R: BufRead> Read for QuoteBare<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.done == self.state.out.len() {
            if self.eof {
                return Ok(0);
            }
            self.refill()?;
        }
        let out = &self.state.out;
        let n = (out.len() - self.done).min(buf.len());
        buf[..n].copy_from_slice(&out[self.done..self.done + n]);
        self.done += n;
        Ok(n)
    }
}
