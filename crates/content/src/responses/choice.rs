//! Deterministic choices: which variant, how many synthetic tokens, which
//! filler words. The same seed, entry and prompt give the same answer on
//! every machine and every Rust release.
//!
//! std's `DefaultHasher` is not guaranteed stable across releases, so the
//! hash is spelled out: FNV-1a 64 over the seed (8 bytes, little-endian),
//! the entry id, a 0xFF byte (never part of UTF-8, so the fields cannot run
//! into each other) and the trimmed prompt, then the SplitMix64 finaliser,
//! which spreads FNV's weak low bits over the whole word. Filler words come
//! from a SplitMix64 stream started at that hash.

use llmsim_core::util::finalise;

/// The hash that every choice for one answer derives from.
pub fn answer_hash(seed: u64, entry: &str, prompt: &str) -> u64 {
    let bytes = seed.to_le_bytes().into_iter().chain(entry.bytes()).chain([0xFF]).chain(prompt.bytes());
    finalise(llmsim_core::util::fnv1a(bytes))
}

/// `lo + hash mod (hi - lo + 1)`: a value in `[lo, hi]`.
pub fn in_range(hash: u64, lo: u64, hi: u64) -> u64 {
    match (hi - lo).checked_add(1) {
        Some(span) => lo + hash % span,
        None => hash,
    }
}

pub use llmsim_core::util::Stream;

/// Filler words: plain ASCII letters, so that each, with its leading space,
/// is exactly one token of the built-in tokenizer.
pub const WORDS: &[&str] = &[
    "the", "model", "answer", "request", "token", "server", "time", "batch", "memory", "cache", "block", "queue",
    "load", "step", "prompt", "output", "latency", "system", "engine", "value", "result", "simple", "quick", "steady",
    "large", "small", "early", "later", "every", "each", "some", "many", "few", "more", "less", "often", "still",
    "again", "here", "there", "then", "now", "and", "but", "so", "yet", "with", "without", "from", "into", "over",
    "under", "after", "before", "while", "because", "runs", "waits", "grows", "shrinks", "moves", "holds", "sends",
    "reads", "writes", "keeps", "makes", "takes", "gives", "finds", "shows", "starts", "stops", "fills", "frees",
    "serves", "is", "was", "can", "will", "may", "should", "we", "it", "they", "this", "that", "a", "an", "of", "to",
    "in", "on", "for", "as", "by", "at",
];

/// Text of exactly `tokens` tokens by the built-in tokenizer: sentences of
/// filler words, each capitalised and ending in a period, with an
/// occasional comma. The same `hash` gives the same text.
pub fn filler(tokens: usize, hash: u64) -> String {
    let mut out = String::with_capacity(tokens * 7);
    for piece in FillerTokens::new(tokens, hash) {
        out.push_str(&piece);
    }
    out
}

/// `filler` one piece at a time, from a few words of state: each piece is
/// a word (with its leading space, but for the first; capitalised at a
/// sentence's start), a `.` or a `,`, which is one token of the built-in
/// tokenizer. Concatenated they are `filler(tokens, hash)` byte for byte,
/// so a long answer can be produced as it is sent instead of held whole.
#[derive(Clone, Debug)]
pub struct FillerTokens {
    rng: u64,
    left: usize,
    /// Words in the current sentence.
    words: usize,
    target: usize,
    /// Whether anything was produced yet (the first word has no space).
    started: bool,
    /// A comma decided after the last word, not yet produced.
    comma: bool,
}

impl FillerTokens {
    pub fn new(tokens: usize, hash: u64) -> FillerTokens {
        let mut rng = Stream(hash);
        let target = 5 + rng.below(10);
        FillerTokens { rng: rng.0, left: tokens, words: 0, target, started: false, comma: false }
    }
}

impl Iterator for FillerTokens {
    type Item = std::borrow::Cow<'static, str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.comma {
            self.comma = false;
            return Some(",".into());
        }
        if self.left == 0 {
            return None;
        }
        let mut rng = Stream(self.rng);
        // End the sentence on the last token, or when it is long enough and
        // at least two tokens remain for a next sentence to make sense.
        let end = self.words > 0 && (self.left == 1 || (self.words >= self.target && self.left >= 3));
        let piece = if end {
            self.words = 0;
            self.target = 5 + rng.below(10);
            ".".into()
        } else {
            let word = WORDS[rng.below(WORDS.len())];
            let mut out = String::with_capacity(word.len() + 1);
            if self.started {
                out.push(' ');
            }
            let mut chars = word.chars();
            if self.words == 0
                && let Some(first) = chars.next()
            {
                out.push(first.to_ascii_uppercase());
            }
            out.push_str(chars.as_str());
            self.words += 1;
            if self.words >= 2 && self.words + 1 < self.target && self.left >= 4 && rng.below(8) == 0 {
                self.comma = true;
                self.left -= 1;
            }
            out.into()
        };
        self.started = true;
        self.left -= 1;
        self.rng = rng.0;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::count;

    #[test]
    fn the_hash_is_a_fixed_function_of_seed_entry_and_prompt() {
        // Pinned values: a change here changes every scripted answer.
        assert_eq!(answer_hash(0, "greet", "hello"), 0x64db1bcb01038a44);
        assert_ne!(answer_hash(0, "greet", "hello"), answer_hash(1, "greet", "hello"));
        assert_ne!(answer_hash(0, "greet", "hello"), answer_hash(0, "greeting", "hello"));
        assert_ne!(answer_hash(0, "ab", "c"), answer_hash(0, "a", "bc"), "fields cannot run into each other");
    }

    #[test]
    fn in_range_covers_the_whole_inclusive_range() {
        let seen: std::collections::BTreeSet<u64> = (0..1000).map(|i| in_range(finalise(i), 3, 7)).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![3, 4, 5, 6, 7]);
        assert_eq!(in_range(12345, 4, 4), 4);
        assert_eq!(in_range(12345, 0, u64::MAX), 12345);
    }

    #[test]
    fn filler_has_exactly_the_requested_number_of_tokens() {
        for seed in 0..20 {
            for n in 0..300 {
                let text = filler(n, seed);
                assert_eq!(count(&text), n, "seed {seed}, {n} tokens: {text:?}");
            }
        }
        assert_eq!(count(&filler(100_000, 7)), 100_000);
    }

    #[test]
    fn filler_pieces_are_the_old_filler_byte_for_byte_one_token_each() {
        // The filler as it was written before it became an iterator.
        fn old(tokens: usize, hash: u64) -> String {
            let mut rng = Stream(hash);
            let mut out = String::new();
            let (mut left, mut words, mut target) = (tokens, 0, 5 + rng.below(10));
            while left > 0 {
                if words > 0 && (left == 1 || (words >= target && left >= 3)) {
                    out.push('.');
                    words = 0;
                    target = 5 + rng.below(10);
                } else {
                    if !out.is_empty() {
                        out.push(' ');
                    }
                    let w = WORDS[rng.below(WORDS.len())];
                    if words == 0 {
                        out.push_str(&w[..1].to_ascii_uppercase());
                        out.push_str(&w[1..]);
                    } else {
                        out.push_str(w);
                    }
                    words += 1;
                    if words >= 2 && words + 1 < target && left >= 4 && rng.below(8) == 0 {
                        out.push(',');
                        left -= 1;
                    }
                }
                left -= 1;
            }
            out
        }
        for seed in 0..20 {
            for n in 0..200 {
                let pieces: Vec<_> = FillerTokens::new(n, seed).collect();
                assert_eq!(pieces.concat(), old(n, seed), "seed {seed}, {n} tokens");
                assert_eq!(pieces.len(), n, "one piece a token");
                assert!(pieces.iter().all(|p| count(p) == 1), "{pieces:?}");
            }
        }
    }

    #[test]
    fn filler_reads_as_sentences() {
        let text = filler(40, 1);
        assert!(text.starts_with(|c: char| c.is_ascii_uppercase()), "{text}");
        assert!(text.ends_with('.'), "{text}");
        assert!(text.matches(". ").count() >= 2, "{text}");
        assert_eq!(filler(40, 1), text, "same hash, same text");
        assert_ne!(filler(40, 2), text);
    }
}
