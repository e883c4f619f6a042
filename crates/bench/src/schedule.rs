//! When each request is due, and what it says.
//!
//! The open-loop schedule is the planner's own open-loop workload
//! ([`llmsim_planner::workload::OpenLoop`], seeded ChaCha8): `llmsim bench --rate R
//! --burstiness B --seed S` sends its requests at exactly the times a
//! scenario with `gamma: {rate: R, burstiness: B}` (`poisson` when B is one)
//! and `seed: S` would make them arrive, the first at t = 0. So a bench can
//! be predicted before it runs, and `--trace` writes the same rows as
//! `llmsim trace`.
//!
//! Prompts are distinct from the first token on, so no prefix cache can
//! serve one request's prompt from another's. Each prompt is words of
//! lowercase letters with a leading space: under the built-in tokenizer's
//! rule "a run of letters with an optional leading space is one token"
//! ([`llmsim_content::tokenizer`]) each word is one token, so the prompt
//! has exactly the requested count; a chat prompt is shorter by the chat
//! template's overhead ([`content_tokens`]).

use rand::RngExt;

use llmsim_core::time::SimTime;
use llmsim_planner::workload::{Gaps, Lengths, Limit, OpenLoop, Source};

/// Offered load.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Load {
    /// Requests sent on a seeded schedule, whether or not earlier ones
    /// finished. Burstiness 1 is Poisson (vLLM's `--burstiness`).
    Open { rate: f64, burstiness: f64 },
    /// `concurrency` users, each sending its next request when its
    /// previous one is done.
    Closed { concurrency: u32 },
}

/// Scheduled arrivals of an open loop, relative to the start.
pub fn open_schedule(rate: f64, burstiness: f64, requests: u64, seed: u64) -> Vec<SimTime> {
    let gaps = if burstiness == 1.0 { Gaps::Poisson { rate } } else { Gaps::Gamma { rate, burstiness } };
    let limit = Limit { requests: Some(requests), until: None };
    let mut source = OpenLoop::new(gaps, seed, Lengths::new(seed, None, None), limit);
    std::iter::from_fn(|| source.pop().map(|r| r.arrival)).collect()
}

/// Tokens of prompt text that make `prompt_tokens` in all: the whole count
/// for completions; for chat, minus one message's and one prompt's template
/// overhead. `None` if the overhead alone exceeds the count.
pub fn content_tokens(prompt_tokens: u32, chat: bool) -> Option<u32> {
    use llmsim_content::tokenizer::{PER_MESSAGE_OVERHEAD, PER_PROMPT_OVERHEAD};
    let overhead = if chat { (PER_MESSAGE_OVERHEAD + PER_PROMPT_OVERHEAD) as u32 } else { 0 };
    prompt_tokens.checked_sub(overhead).filter(|n| *n >= 1)
}

/// The prompt of request `index`: `tokens` one-token words, the first one
/// unique to (`run`, `index`). `run` keeps separate bench runs (and the
/// warm-up) from sharing prompts.
pub fn prompt(run: &str, index: u64, tokens: u32, seed: u64) -> String {
    let mut rng = llmsim_planner::workload::stream(seed ^ index.rotate_left(17), 7);
    let mut text = String::with_capacity(tokens as usize * 7);
    text.push(' ');
    text.push_str(run);
    text.push_str(&letters(index));
    for _ in 1..tokens {
        text.push(' ');
        let len = rng.random_range(2..=7);
        for _ in 0..len {
            text.push(char::from(b'a' + rng.random_range(0..26u8)));
        }
    }
    text
}

/// A number written in letters (`0` = `a`, `25` = `z`, `26` = `ba`).
/// The shared prefix request `index` starts with, of `groups`: round
/// robin, so every group gets `requests / groups` requests (give or take
/// one), as `vllm bench serve --dataset-name prefix_repetition` does.
pub fn prefix_group(index: u64, groups: u32) -> u64 {
    index % u64::from(groups.max(1))
}

pub fn letters(mut n: u64) -> String {
    let mut out = Vec::new();
    loop {
        out.push(b'a' + (n % 26) as u8);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_have_one_word_per_token_and_differ_from_the_first_word() {
        let a = prompt("xq", 0, 50, 1);
        let b = prompt("xq", 1, 50, 1);
        let words = |s: &str| s.split(' ').skip(1).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(words(&a).len(), 50);
        assert!(a.starts_with(' '));
        assert!(words(&a).iter().all(|w| !w.is_empty() && w.bytes().all(|c| c.is_ascii_lowercase())));
        assert_ne!(words(&a)[0], words(&b)[0]);
        assert_eq!(prompt("xq", 0, 1, 1), " xqa");
    }

    #[test]
    fn prompts_have_exactly_the_requested_tokens_by_our_tokenizer() {
        use llmsim_content::tokenizer::{count, count_chat};
        for (i, n) in [(0u64, 1u32), (1, 9), (30, 512), (7_000, 2048)] {
            let p = prompt("mqz", i, n, 5);
            assert_eq!(count(&p), n as usize, "completions prompt of {n}");
            let chat = prompt("mqz", i, content_tokens(n + 8, true).unwrap(), 5);
            assert_eq!(count_chat([("user", chat.as_str())]), n as usize + 8, "chat prompt of {}", n + 8);
        }
        assert_eq!(content_tokens(8, true), None);
        assert_eq!(content_tokens(8, false), Some(8));
    }

    #[test]
    fn letters_count_in_base_26() {
        assert_eq!(letters(0), "a");
        assert_eq!(letters(25), "z");
        assert_eq!(letters(26), "ba");
    }

    #[test]
    fn the_open_schedule_is_the_planners_open_loop() {
        let s = open_schedule(10.0, 1.0, 200, 42);
        assert_eq!(s.len(), 200);
        assert_eq!(s[0], SimTime::ZERO);
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        // 199 gaps of mean 0.1 s.
        let mean_gap = s[199].as_secs_f64() / 199.0;
        assert!((mean_gap - 0.1).abs() < 0.02, "{mean_gap}");
        assert_eq!(open_schedule(10.0, 1.0, 200, 42), s, "seeded");
        assert_ne!(open_schedule(10.0, 4.0, 200, 42), s, "burstiness changes the gaps");
    }
}
