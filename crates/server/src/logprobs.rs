//! Synthetic logprobs: deterministic numbers in vLLM's shapes.
//!
//! There is no model, so the numbers are made up, but made up the same way
//! every time (a fixed function of the request's seed, the choice and the
//! token's position) and consistent with each other: the sampled token is
//! the most likely one (as a greedy model's is), its probability is in
//! [0.40, 0.95), and the alternatives' probabilities halve down the list
//! from what is left, so every list is sorted and sums to less than 1.
//! Alternatives are other words of the filler vocabulary, distinct from the
//! sampled token and from each other.
//!
//! Shapes: chat `{"content": [{"token", "logprob", "bytes", "top_logprobs":
//! [{"token", "logprob", "bytes"}]}]}` with `top_logprobs` entries (the
//! sampled token first); completions `{"text_offset", "token_logprobs",
//! "tokens", "top_logprobs": [{token: logprob}]}` with `logprobs` entries
//! (at least the sampled token). The end-of-sequence token is listed with
//! empty text (vLLM shows the tokenizer's EOS string, which the built-in
//! tokenizer does not have).

use llmsim_core::util::{splitmix, unit};

use serde_json::{Value, json};

use super::api::Api;

/// One output token's logprob and its alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    /// The most likely tokens, sampled token first (at least that one).
    pub top: Vec<(String, f64)>,
    /// How many of `top` a chat lists (`top_logprobs`, which may be 0).
    pub asked: usize,
}

/// Logprobs of `pieces` (an answer's tokens) with `top` alternatives each
/// (the sampled token counts as one), for choice `choice` under `seed`.
pub fn synthesize(pieces: &[String], top: u32, seed: u64, choice: u32) -> Vec<TokenLogprob> {
    Synth { top, seed, choice }.all(pieces.iter().cloned())
}

/// What a choice's logprobs are made from: each token's follows from these,
/// its position and its text, so they are made as the token is sent
/// ([`Synth::at`]) and never held for the whole answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Synth {
    /// Alternatives per token (the sampled token counts as one).
    pub top: u32,
    pub seed: u64,
    pub choice: u32,
}

impl Synth {
    /// The logprobs of token `i` (0-based), whose text is `token`.
    pub fn at(&self, token: &str, i: usize) -> TokenLogprob {
        let top = self.top;
        let base = splitmix(self.seed ^ splitmix(u64::from(self.choice)));
        let h = splitmix(base ^ i as u64);
        let p0 = 0.40 + 0.55 * unit(h);
        let logprob = p0.ln();
        let mut list = vec![(token.to_string(), logprob)];
        let mut rest = 1.0 - p0;
        let mut k = 0u64;
        while list.len() < top.max(1) as usize {
            k += 1;
            let word = format!(" {}", llmsim_content::responses::filler(1, splitmix(h ^ k)).to_lowercase());
            if list.iter().any(|(t, _)| *t == word) {
                if k > 64 * u64::from(top) {
                    // The vocabulary ran out of distinct words: number them.
                    list.push((format!("{word}{k}"), (rest / 2.0).ln()));
                    rest /= 2.0;
                }
                continue;
            }
            rest /= 2.0;
            list.push((word, rest.ln()));
        }
        TokenLogprob { token: token.to_string(), logprob, top: list, asked: top as usize }
    }

    /// The logprobs of every token of an answer (a whole response's).
    pub fn all(&self, pieces: impl Iterator<Item = String>) -> Vec<TokenLogprob> {
        pieces.enumerate().map(|(i, t)| self.at(&t, i)).collect()
    }
}

fn entry(token: &str, logprob: f64) -> Value {
    json!({"token": token, "logprob": logprob, "bytes": token.as_bytes()})
}

fn chat_content(lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|t| {
            let mut e = entry(&t.token, t.logprob);
            let alts: Vec<Value> = t.top.iter().take(t.asked).map(|(tok, lp)| entry(tok, *lp)).collect();
            e["top_logprobs"] = Value::Array(alts);
            e
        })
        .collect();
    json!({"content": content})
}

fn completion(lps: &[TokenLogprob], mut offset: usize) -> Value {
    let mut offsets = Vec::with_capacity(lps.len());
    for t in lps {
        offsets.push(offset);
        offset += t.token.chars().count();
    }
    let tops: Vec<Value> = lps
        .iter()
        .map(|t| {
            let mut m = serde_json::Map::new();
            for (tok, lp) in &t.top {
                m.entry(tok.clone()).or_insert(json!(lp));
            }
            Value::Object(m)
        })
        .collect();
    json!({
        "text_offset": offsets,
        "token_logprobs": lps.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "tokens": lps.iter().map(|t| t.token.as_str()).collect::<Vec<_>>(),
        "top_logprobs": tops,
    })
}

/// The `logprobs` of a stream chunk carrying `lps`, whose first token
/// starts at character `offset` of the choice's text.
pub fn stream_json(api: Api, lps: &[TokenLogprob], offset: usize) -> Value {
    match api {
        Api::Chat => chat_content(lps),
        Api::Completion => completion(lps, offset),
    }
}

/// The `logprobs` of a whole answer (text after `offset` echoed characters).
pub fn full_json(api: Api, lps: &[TokenLogprob], offset: usize) -> Value {
    stream_json(api, lps, offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn logprobs_are_deterministic_sorted_and_sum_below_one() {
        let p = pieces(&["Hello", " world", "!", ""]);
        let a = synthesize(&p, 5, 7, 0);
        assert_eq!(a, synthesize(&p, 5, 7, 0), "same seed, same numbers");
        assert_ne!(a, synthesize(&p, 5, 8, 0), "another seed, other numbers");
        assert_ne!(a, synthesize(&p, 5, 7, 1), "another choice, other numbers");
        for t in &a {
            assert_eq!(t.top.len(), 5);
            assert_eq!(t.top[0], (t.token.clone(), t.logprob), "the sampled token is the most likely");
            let probs: Vec<f64> = t.top.iter().map(|(_, lp)| lp.exp()).collect();
            assert!(probs.windows(2).all(|w| w[0] > w[1]), "{probs:?}");
            assert!(probs.iter().sum::<f64>() < 1.0);
            assert!((0.40..0.95).contains(&probs[0]));
            let mut names: Vec<&str> = t.top.iter().map(|(s, _)| s.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), 5, "distinct alternatives");
        }
    }

    #[test]
    fn completions_offsets_count_characters_after_the_echo() {
        let lps = synthesize(&pieces(&["é", "ab"]), 1, 0, 0);
        let v = full_json(Api::Completion, &lps, 3);
        assert_eq!(v["text_offset"], json!([3, 4]));
        assert_eq!(v["tokens"], json!(["é", "ab"]));
        assert_eq!(v["top_logprobs"][1].as_object().unwrap().len(), 1);
        let c = full_json(Api::Chat, &lps, 0);
        assert_eq!(c["content"][0]["bytes"], json!([0xc3, 0xa9]));
        assert_eq!(c["content"][0]["top_logprobs"].as_array().unwrap().len(), 1);
        let none = full_json(Api::Chat, &synthesize(&pieces(&["a"]), 0, 0, 0), 0);
        assert_eq!(none["content"][0]["top_logprobs"], json!([]), "top_logprobs 0: the token alone");
    }
}
