//! An answer's token texts, produced when they are sent rather than held.
//!
//! A plan used to keep every output token's text for the whole request:
//! `n` = 1,024 choices of 2,048 tokens is two million strings, and 30 such
//! streams took the server past 2 GB before a byte was sent. A [`Pieces`]
//! keeps what the tokens come from instead: the scripted answer's text (or,
//! with a tokenizer.json, its pieces, bounded by the script) and, past the
//! script, the seed and length of the filler the model continues with
//! ([`FillerTokens`], a few words of state), plus where a stop string cuts
//! it and whether an end-of-sequence token follows. Its pieces are the same
//! bytes [`super::openai::plan`] produces (a test compares the two), made
//! one at a time by a resumable iterator, so a stream holds one token at a
//! time and a choice's memory does not grow with `max_tokens`.
//!
//! Planning still reads the whole answer once, without keeping it: the
//! engine needs the answer's length before the first step, and a stop
//! string can end it anywhere ([`plan_lazy`]). The one exception is the
//! filler of a model with a tokenizer.json: its token boundaries come from
//! tokenizing the filler text whole, so an iterator that reaches the filler
//! materialises that choice's filler pieces, and drops them with itself.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use super::stop::Stops;
use super::telemetry::Finish;
use super::tokenize::Tokenizer;
use llmsim_content::responses::FillerTokens;
use llmsim_content::tokenizer;

/// What bounds an answer's length (vLLM's sampling parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lengths {
    /// The cap: `max_tokens` (or what the context leaves), at least 1.
    pub max_tokens: u32,
    /// No end of sequence and no stop string before this many tokens.
    pub min_tokens: u32,
    /// Never end with the end-of-sequence token: run to `max_tokens`.
    pub ignore_eos: bool,
    /// Keep the stop string in the text.
    pub include_stop: bool,
}

impl Lengths {
    pub fn cap(max_tokens: u32) -> Lengths {
        Lengths { max_tokens, min_tokens: 0, ignore_eos: false, include_stop: false }
    }
}

/// The answer's tokens and how they end: what the engine's `N` is.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The text of every output token, in order; the end-of-sequence token,
    /// when the answer ends with one, is the last and its text is empty.
    pub pieces: Pieces,
    /// The engine's output length: `pieces.len()` (at least 1).
    pub output: u32,
    pub finish: Finish,
    /// The stop string that ended the answer, if any.
    pub stop_reason: Option<String>,
}

/// The scripted part of an answer.
#[derive(Clone, Debug)]
pub enum Head {
    /// Text split by the built-in tokenizer as it is read.
    Text(Arc<str>),
    /// Token texts already split (a tokenizer.json's, or a whole plan's).
    Pieces(Arc<[String]>),
}

impl Head {
    /// The scripted answer of `text`, as `tokenizer` splits it.
    pub fn of(text: &str, tokenizer: &Tokenizer) -> Head {
        match tokenizer {
            Tokenizer::Builtin => Head::Text(text.into()),
            Tokenizer::Hf(_) => Head::Pieces(tokenizer.pieces(text).into()),
        }
    }

    /// Its tokens, at most `limit`.
    fn count(&self, limit: usize) -> usize {
        match self {
            Head::Text(t) => tokenizer::tokens(t).take(limit).count(),
            Head::Pieces(p) => p.len().min(limit),
        }
    }
}

/// What follows the script when the model goes on (`ignore_eos`,
/// `min_tokens`): `n` tokens of filler from `seed`, as
/// [`Tokenizer::continuation`] writes them.
#[derive(Clone, Debug)]
struct Tail {
    n: usize,
    seed: u64,
    tokenizer: Tokenizer,
}

/// An answer's token texts, lazily (see the module docs).
pub struct Pieces {
    head: Head,
    /// Tokens taken from the head, then from the tail.
    from_head: usize,
    tail: Option<Tail>,
    from_tail: usize,
    /// The answer is cut at this byte (a stop string's start or end).
    cut: Option<usize>,
    /// An end-of-sequence token (empty text) follows.
    eos: bool,
    /// Where the last lookup left off, so sending token after token costs
    /// one token each.
    cursor: Mutex<Option<Cursor>>,
}

/// A position in the answer: tokens read, their bytes and characters.
struct Cursor {
    iter: PieceIter,
    read: usize,
    bytes: usize,
    chars: usize,
}

impl Clone for Pieces {
    fn clone(&self) -> Pieces {
        Pieces {
            head: self.head.clone(),
            from_head: self.from_head,
            tail: self.tail.clone(),
            from_tail: self.from_tail,
            cut: self.cut,
            eos: self.eos,
            cursor: Mutex::new(None),
        }
    }
}

impl std::fmt::Debug for Pieces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Pieces {
    fn eq(&self, other: &Pieces) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Pieces {
    /// Pieces already split (a whole plan's).
    pub fn owned(pieces: Vec<String>) -> Pieces {
        let n = pieces.len();
        Pieces::new(Head::Pieces(pieces.into()), n, None)
    }

    fn new(head: Head, from_head: usize, tail: Option<Tail>) -> Pieces {
        let from_tail = tail.as_ref().map_or(0, |t| t.n);
        Pieces { head, from_head, tail, from_tail, cut: None, eos: false, cursor: Mutex::new(None) }
    }

    /// How many tokens (the end-of-sequence one included).
    pub fn len(&self) -> usize {
        self.from_head + self.from_tail + usize::from(self.eos)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The token texts, in order, from the start.
    pub fn iter(&self) -> PieceIter {
        PieceIter {
            head: self.head.clone(),
            head_at: 0,
            from_head: self.from_head,
            tail: self.tail.clone(),
            tail_iter: None,
            from_tail: self.from_tail,
            cut: self.cut,
            eos: self.eos,
            offset: 0,
        }
    }

    pub fn to_vec(&self) -> Vec<String> {
        self.iter().collect()
    }

    /// The whole text.
    pub fn concat(&self) -> String {
        self.iter().collect()
    }

    /// Token `i` (0-based; empty past the end), with the bytes and
    /// characters of the tokens before it. Reading the tokens in order costs
    /// one token each; going back starts over.
    pub fn at(&self, i: usize) -> (String, usize, usize) {
        let mut guard = self.cursor.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.as_ref().is_none_or(|c| c.read > i) {
            *guard = Some(Cursor { iter: self.iter(), read: 0, bytes: 0, chars: 0 });
        }
        let Some(c) = guard.as_mut() else { return (String::new(), 0, 0) };
        while c.read < i {
            let Some(p) = c.iter.next() else { break };
            c.read += 1;
            c.bytes += p.len();
            c.chars += p.chars().count();
        }
        if c.read < i {
            return (String::new(), c.bytes, c.chars);
        }
        let (bytes, chars) = (c.bytes, c.chars);
        let piece = c.iter.next().unwrap_or_default();
        c.read += 1;
        c.bytes += piece.len();
        c.chars += piece.chars().count();
        (piece, bytes, chars)
    }

    /// Keeps the first `k` tokens (a stop string ended the answer there).
    fn truncate(&mut self, k: usize) {
        if k <= self.from_head {
            self.from_head = k;
            self.from_tail = 0;
        } else {
            self.from_tail = self.from_tail.min(k - self.from_head);
        }
    }
}

impl PartialEq<Vec<String>> for Pieces {
    fn eq(&self, other: &Vec<String>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().cloned())
    }
}

/// The token texts of a [`Pieces`], owning what it reads from.
pub struct PieceIter {
    head: Head,
    /// Byte offset (text) or index (pieces) of the next head token.
    head_at: usize,
    from_head: usize,
    tail: Option<Tail>,
    tail_iter: Option<TailIter>,
    from_tail: usize,
    cut: Option<usize>,
    eos: bool,
    /// Bytes of the answer before the next token.
    offset: usize,
}

enum TailIter {
    Builtin { first: bool, words: FillerTokens, left: usize },
    Pieces(std::vec::IntoIter<String>),
}

impl PieceIter {
    fn raw(&mut self) -> Option<Cow<'static, str>> {
        if self.from_head > 0 {
            self.from_head -= 1;
            return match &self.head {
                Head::Text(t) => {
                    let rest = &t[self.head_at..];
                    let token = tokenizer::tokens(rest).next().unwrap_or_default();
                    self.head_at += token.len();
                    Some(Cow::Owned(token.to_string()))
                }
                Head::Pieces(p) => {
                    self.head_at += 1;
                    Some(Cow::Owned(p.get(self.head_at - 1).cloned().unwrap_or_default()))
                }
            };
        }
        if self.from_tail > 0 {
            self.from_tail -= 1;
            let tail = self.tail.as_ref()?;
            let it = self.tail_iter.get_or_insert_with(|| match &tail.tokenizer {
                Tokenizer::Builtin => {
                    TailIter::Builtin { first: true, words: FillerTokens::new(tail.n, tail.seed), left: tail.n }
                }
                hf => TailIter::Pieces(hf.continuation(tail.n, tail.seed).into_iter()),
            });
            return Some(match it {
                // `continuation`: a space, then the filler; the built-in
                // tokenizer splits it into exactly its pieces (the space
                // joins the first word), padded with spaces (never needed).
                TailIter::Builtin { first, words, left } => {
                    *left = left.saturating_sub(1);
                    match words.next() {
                        Some(w) if *first => {
                            *first = false;
                            Cow::Owned(format!(" {w}"))
                        }
                        Some(w) => w,
                        None => Cow::Borrowed(" "),
                    }
                }
                TailIter::Pieces(p) => Cow::Owned(p.next().unwrap_or_else(|| " ".to_string())),
            });
        }
        if self.eos {
            self.eos = false;
            return Some(Cow::Borrowed(""));
        }
        None
    }
}

impl Iterator for PieceIter {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let raw = self.raw()?;
        let start = self.offset;
        self.offset += raw.len();
        Some(match self.cut {
            Some(cut) => raw[..raw.len().min(cut.saturating_sub(start))].to_string(),
            None => raw.into_owned(),
        })
    }
}

/// [`super::openai::plan`] without holding the answer: the same pieces,
/// output length, finish and stop reason, for the scripted `head` followed
/// (where the model goes on) by `tokenizer`'s filler from `filler_seed`.
pub fn plan_lazy(head: Head, tokenizer: &Tokenizer, filler_seed: u64, stops: Option<&Stops>, lengths: Lengths) -> Plan {
    let limit = lengths.max_tokens.max(1) as usize;
    let min = lengths.min_tokens as usize;
    let scripted = head.count(limit + 1);
    let natural = (!lengths.ignore_eos).then(|| scripted.max(min));
    let want = natural.map_or(limit, |c| c.min(limit));
    let from_head = scripted.min(want);
    let tail =
        (want > from_head).then(|| Tail { n: want - from_head, seed: filler_seed, tokenizer: tokenizer.clone() });
    let mut pieces = Pieces::new(head, from_head, tail);
    if let Some(hit) = stops.and_then(|s| s.find_after(pieces.iter(), want, min)) {
        pieces.truncate(hit.token + 1);
        pieces.cut = Some(if lengths.include_stop { hit.end } else { hit.cut });
        let output = pieces.len() as u32;
        return Plan { pieces, output, finish: Finish::Stop, stop_reason: Some(hit.stop) };
    }
    let finish = match natural {
        Some(c) if c < limit => {
            pieces.eos = true;
            Finish::Stop
        }
        _ => Finish::Length,
    };
    let output = u32::try_from(pieces.len()).unwrap_or(u32::MAX);
    Plan { pieces, output, finish, stop_reason: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::plan;

    fn stops(list: &[&str]) -> Option<Stops> {
        Stops::new(list.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    /// The lazy plan against the whole one, on answers, lengths and stop
    /// strings of every kind (a stop inside the filler, across the script's
    /// end, ignore_eos, min_tokens, include_stop).
    #[test]
    fn the_lazy_plan_is_the_whole_plan_piece_for_piece() {
        let tok = Tokenizer::Builtin;
        let texts = ["", "Hello there, world!", "a b c d e f g h i j k l m n o p", "It's 2024. Numbers 12345 ok."];
        let stop_sets: [&[&str]; 5] = [&[], &["world"], &["e f", "Numbers"], &[". "], &["the", "model"]];
        let mut cases = 0;
        for text in texts {
            for stop in stop_sets {
                for max in [1u32, 2, 5, 17, 60] {
                    for (min, ignore, include) in
                        [(0, false, false), (0, true, false), (9, false, true), (3, true, true)]
                    {
                        if min > max {
                            continue;
                        }
                        let l = Lengths { max_tokens: max, min_tokens: min, ignore_eos: ignore, include_stop: include };
                        let s = stops(stop);
                        let seed = 77 + u64::from(max);
                        let whole = plan(
                            tok.pieces(text).iter().map(String::as_str),
                            |n| tok.continuation(n, seed),
                            s.as_ref(),
                            l,
                        );
                        let lazy = plan_lazy(Head::of(text, &tok), &tok, seed, s.as_ref(), l);
                        let what = format!("{text:?} stops {stop:?} {l:?}");
                        assert_eq!(lazy.pieces.to_vec(), whole.pieces.to_vec(), "{what}");
                        assert_eq!(
                            (lazy.output, lazy.finish, &lazy.stop_reason),
                            (whole.output, whole.finish, &whole.stop_reason),
                            "{what}"
                        );
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 300, "4 texts x 5 stop lists x 15 length settings");
    }

    #[test]
    fn tokens_read_in_order_or_out_of_it_are_the_same_with_their_offsets() {
        let tok = Tokenizer::Builtin;
        let l = Lengths { ignore_eos: true, ..Lengths::cap(40) };
        let p = plan_lazy(Head::of("héllo wörld", &tok), &tok, 5, None, l).pieces;
        let all = p.to_vec();
        assert_eq!(all.len(), 40);
        let expect = |i: usize| {
            let before = &all[..i];
            (all[i].clone(), before.iter().map(String::len).sum(), before.iter().map(|s| s.chars().count()).sum())
        };
        for i in (0..40).chain([3, 1, 39, 0, 20]) {
            assert_eq!(p.at(i), expect(i), "token {i}");
        }
        assert_eq!(p.at(40).0, "", "past the end");
    }
}
