//! `stop` strings, matched as vLLM matches them and in time linear in what
//! is read.
//!
//! vLLM checks the stop strings after every generated token
//! (`check_stop_strings` in its detokenizer): it looks for each stop string
//! among the matches that end in the new token's text, and the first string
//! *in list order* that has one ends the answer there: the output is the
//! text before that match (the stop string is not returned), and the token
//! that completed it is the last one generated. So a stop that spans a
//! token boundary ends the answer at the token where it completes, and
//! `usage.completion_tokens` counts that token.
//!
//! Searching each stop string over the whole answer costs
//! stops × answer length: 10,000 stop strings against a 1 MB answer took
//! 12.9 s of CPU on a request thread. Here one Aho-Corasick automaton over
//! all the stop strings (the `aho-corasick` crate, the one `regex` uses) is
//! fed the answer token by token, so planning reads each answer byte once
//! and stops at the token that completes a stop; the work per token is its
//! bytes plus the stop strings that end inside it. Building the automaton
//! costs time and memory linear in the stop strings' total length, which is
//! bounded ([`MAX_STOPS`], [`MAX_STOP_BYTES`]; vLLM sets no bound, OpenAI
//! allows four strings).

use aho_corasick::automaton::Automaton;
use aho_corasick::nfa::contiguous::NFA;
use aho_corasick::{Anchored, MatchKind, PatternID};

use super::errors::ApiError;

/// Most stop strings one request may give.
pub const MAX_STOPS: usize = 100_000;

/// Most bytes all of a request's stop strings may add up to (1 MiB: the
/// automaton then takes up to about a quarter of a second and 30 MB to
/// build).
pub const MAX_STOP_BYTES: usize = 1 << 20;

/// A request's stop strings, ready to match.
#[derive(Clone, Debug)]
pub struct Stops {
    strings: Vec<String>,
    nfa: NFA,
}

/// Where the answer ends because of a stop string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopHit {
    /// Index (0-based) of the token in which the stop string completed.
    pub token: usize,
    /// Byte offset in the answer where the stop string starts: the answer
    /// is cut there.
    pub cut: usize,
    /// Byte offset just after the stop string (the cut when the request
    /// sets `include_stop_str_in_output`).
    pub end: usize,
    /// The stop string.
    pub stop: String,
}

impl Stops {
    /// Builds the matcher; `None` when there are no stop strings (empty
    /// ones are dropped, as vLLM drops them). Over the limits: a 400
    /// naming `stop`.
    pub fn new(strings: Vec<String>) -> Result<Option<Stops>, ApiError> {
        let strings: Vec<String> = strings.into_iter().filter(|s| !s.is_empty()).collect();
        if strings.is_empty() {
            return Ok(None);
        }
        let bytes: usize = strings.iter().map(String::len).sum();
        if strings.len() > MAX_STOPS || bytes > MAX_STOP_BYTES {
            return Err(ApiError::bad_request(format!(
                "`stop` has {} strings of {bytes} bytes in all; llmsim accepts at most {MAX_STOPS} strings of at \
                 most {MAX_STOP_BYTES} bytes in all.",
                strings.len()
            ))
            .with_param("stop"));
        }
        let nfa = NFA::builder()
            .match_kind(MatchKind::Standard)
            .build(&strings)
            .map_err(|e| ApiError::bad_request(format!("`stop` cannot be matched: {e}")).with_param("stop"))?;
        Ok(Some(Stops { strings, nfa }))
    }

    /// The strings, in the request's order (empty ones dropped).
    pub fn strings(&self) -> &[String] {
        &self.strings
    }

    /// Feeds `tokens` (the answer's, in order, concatenating to it) until a
    /// stop string completes, reading at most `limit` tokens. Returns where
    /// the answer stops, if it does.
    pub fn find<T: AsRef<str>>(&self, tokens: impl IntoIterator<Item = T>, limit: usize) -> Option<StopHit> {
        self.find_after(tokens, limit, 0)
    }

    /// [`Stops::find`], ignoring stop strings that complete within the first
    /// `min_tokens` tokens: vLLM checks stop strings only once the output is
    /// longer than `min_tokens` (its detokenizer's `len(output_token_ids) >
    /// min_tokens`).
    pub fn find_after<T: AsRef<str>>(
        &self,
        tokens: impl IntoIterator<Item = T>,
        limit: usize,
        min_tokens: usize,
    ) -> Option<StopHit> {
        let mut scan = Scan::new(self);
        let mut offset = 0;
        for (i, token) in tokens.into_iter().take(limit).enumerate() {
            let token = token.as_ref();
            if let Some((pid, end)) = scan.feed(token.as_bytes(), offset)
                && i >= min_tokens
            {
                let stop = &self.strings[pid.as_usize()];
                return Some(StopHit { token: i, cut: end - stop.len(), end, stop: stop.clone() });
            }
            offset += token.len();
        }
        None
    }
}

/// The automaton's walk over the answer so far.
struct Scan<'s> {
    stops: &'s Stops,
    state: aho_corasick::automaton::StateID,
}

impl<'s> Scan<'s> {
    fn new(stops: &'s Stops) -> Scan<'s> {
        // invariant: a contiguous NFA supports unanchored searches.
        let state = stops.nfa.start_state(Anchored::No).expect("unanchored start state");
        Scan { stops, state }
    }

    /// Advances over one token starting at answer offset `offset`. Among
    /// the stop strings with a match ending in this token, returns the
    /// first in list order and the end of its first such match.
    fn feed(&mut self, token: &[u8], offset: usize) -> Option<(PatternID, usize)> {
        let nfa = &self.stops.nfa;
        let mut best: Option<(PatternID, usize)> = None;
        for (i, &b) in token.iter().enumerate() {
            self.state = nfa.next_state(Anchored::No, self.state, b);
            if !nfa.is_match(self.state) {
                continue;
            }
            let end = offset + i + 1;
            for k in 0..nfa.match_len(self.state) {
                let pid = nfa.match_pattern(self.state, k);
                // The earliest end wins for a given pattern: `best` only
                // changes to a pattern earlier in the list.
                if best.is_none_or(|(p, _)| pid < p) {
                    best = Some((pid, end));
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(list: &[&str]) -> Stops {
        Stops::new(list.iter().map(|s| s.to_string()).collect()).unwrap().unwrap()
    }

    /// vLLM's rule written out plainly: after each token, the first stop
    /// string in list order found in the window of matches ending in the new
    /// text (Python's `output_text.find(stop, 1 - new - len(stop))`).
    fn vllm_rule(tokens: &[&str], list: &[&str]) -> Option<(usize, usize, String)> {
        let mut text = String::new();
        for (i, t) in tokens.iter().enumerate() {
            text.push_str(t);
            for s in list.iter().filter(|s| !s.is_empty()) {
                let from = (text.len() + 1).saturating_sub(t.len() + s.len());
                if let Some(j) = text[from..].find(s) {
                    return Some((i, from + j, s.to_string()));
                }
            }
        }
        None
    }

    #[test]
    fn a_stop_that_spans_tokens_ends_the_answer_at_the_token_that_completes_it() {
        let s = stops(&["world"]);
        let hit = s.find(["Hello", " wor", "ld", "!"], usize::MAX).unwrap();
        // "Hello wor|ld": the match starts at byte 6 and completes in token 2.
        assert_eq!(hit, StopHit { token: 2, cut: 6, end: 11, stop: "world".into() });
    }

    #[test]
    fn the_first_stop_in_list_order_wins_within_a_token_not_the_earliest() {
        // "abcd" in one token: "bcd" starts earlier, but "c" is first in the
        // list and both end in this token (vLLM checks in list order).
        let s = stops(&["c", "bcd"]);
        assert_eq!(s.find(["abcd"], 9).unwrap(), StopHit { token: 0, cut: 2, end: 3, stop: "c".into() });
        // One character per token: "c" completes first (token 2).
        assert_eq!(s.find(["a", "b", "c", "d"], 9).unwrap(), StopHit { token: 2, cut: 2, end: 3, stop: "c".into() });
        // List order flipped: "bcd" completes at token 3, but "c" at token 2.
        let s = stops(&["bcd", "c"]);
        assert_eq!(s.find(["a", "b", "c", "d"], 9).unwrap(), StopHit { token: 2, cut: 2, end: 3, stop: "c".into() });
        assert_eq!(s.find(["abcd"], 9).unwrap(), StopHit { token: 0, cut: 1, end: 4, stop: "bcd".into() });
    }

    #[test]
    fn the_limit_bounds_what_is_read() {
        let s = stops(&["d"]);
        assert_eq!(s.find(["a", "b", "c", "d"], 3), None);
        assert_eq!(s.find(["a", "b", "c", "d"], 4).map(|h| h.token), Some(3));
    }

    #[test]
    fn empty_stops_are_dropped_and_limits_are_enforced() {
        assert!(Stops::new(vec![String::new()]).unwrap().is_none());
        let e = Stops::new(vec!["x".into(); MAX_STOPS + 1]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stop"));
        assert!(e.message.contains("100001 strings"), "{}", e.message);
        let e = Stops::new(vec!["y".repeat(MAX_STOP_BYTES + 1)]).unwrap_err();
        assert!(e.message.contains("1048577 bytes"), "{}", e.message);
    }

    #[test]
    fn the_automaton_agrees_with_vllms_rule_on_random_answers() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let word = |rng: &mut rand_chacha::ChaCha8Rng, n: usize| -> String {
            (0..n).map(|_| char::from(b'a' + rng.random_range(0..3u8))).collect()
        };
        for case in 0..2000 {
            let tokens: Vec<String> = (0..rng.random_range(1..12))
                .map(|_| {
                    let n = rng.random_range(1..4);
                    word(&mut rng, n)
                })
                .collect();
            let list: Vec<String> = (0..rng.random_range(1..5))
                .map(|_| {
                    let n = rng.random_range(1..5);
                    word(&mut rng, n)
                })
                .collect();
            let t: Vec<&str> = tokens.iter().map(String::as_str).collect();
            let l: Vec<&str> = list.iter().map(String::as_str).collect();
            let got = stops(&l).find(t.iter().copied(), usize::MAX).map(|h| (h.token, h.cut, h.stop));
            assert_eq!(got, vllm_rule(&t, &l), "case {case}: tokens {t:?}, stops {l:?}");
        }
    }
}
