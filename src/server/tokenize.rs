//! A served model's tokenizer: the built-in one (the default), which has
//! no vocabulary, or a Hugging Face `tokenizer.json` the model names.
//!
//! Everything the server does with tokens goes through here: prompt counts
//! (chat prompts pay the chat template's framing, see
//! [`tokenizer::count_chat`]), the answer's token boundaries (each token is
//! one streamed chunk), the filler a model continues with past its script
//! (`ignore_eos`, `min_tokens`), and `/tokenize`, `/detokenize`.
//!
//! The built-in tokenizer has no vocabulary, so its token ids are a stable
//! hash of each token's text (FNV-1a, folded into [`BUILTIN_VOCAB`]): the
//! same text always gets the same ids, but ids cannot be turned back into
//! text, and `/detokenize` says so.

use crate::content::{responses, tokenizer};

/// The id space of the built-in tokenizer's hashed ids (2^17, about the
/// size of a Llama 3 or Qwen vocabulary).
pub const BUILTIN_VOCAB: u32 = 1 << 17;

#[derive(Clone, Debug, Default)]
pub enum Tokenizer {
    #[default]
    Builtin,
}

impl Tokenizer {
    pub fn name(&self) -> &'static str {
        match self {
            Tokenizer::Builtin => "builtin",
        }
    }

    pub fn count(&self, text: &str) -> usize {
        match self {
            Tokenizer::Builtin => tokenizer::count(text),
        }
    }

    /// Prompt tokens of a chat, template framing included.
    pub fn count_chat<'a>(&self, messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> usize {
        match self {
            Tokenizer::Builtin => tokenizer::count_chat(messages),
        }
    }

    /// The tokens of `text` as the texts the server streams; they
    /// concatenate back to `text`.
    pub fn pieces(&self, text: &str) -> Vec<String> {
        match self {
            Tokenizer::Builtin => tokenizer::tokens(text).map(str::to_string).collect(),
        }
    }

    /// `n` tokens of filler that continue an answer (a space first, so the
    /// first word does not run into the answer's last), the same for the
    /// same `seed`.
    pub fn continuation(&self, n: usize, seed: u64) -> Vec<String> {
        if n == 0 {
            return Vec::new();
        }
        let text = format!(" {}", responses::filler(n, seed));
        let mut pieces = self.pieces(&text);
        // The built-in tokenizer counts the filler exactly; another
        // tokenizer may split it differently: cut or pad with single spaces.
        pieces.resize(n, " ".to_string());
        pieces
    }

    /// Token ids of `text`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self {
            Tokenizer::Builtin => tokenizer::tokens(text).map(builtin_id).collect(),
        }
    }

    /// Token ids and texts of a chat prompt with its ChatML framing
    /// (`<|im_start|>role\n` before each message, `<|im_end|>\n` after it,
    /// `<|im_start|>assistant\n` at the end): as many as
    /// [`Tokenizer::count_chat`] counts. The two markers take the ids just
    /// past the hashed ones.
    pub fn encode_chat(&self, messages: &[(String, String)]) -> (Vec<u32>, Vec<String>) {
        let (start, end) = (BUILTIN_VOCAB, BUILTIN_VOCAB + 1);
        let mut ids = Vec::new();
        let mut strs = Vec::new();
        let mut push = |id: u32, s: &str| {
            ids.push(id);
            strs.push(s.to_string());
        };
        let turn = |role: &str, push: &mut dyn FnMut(u32, &str)| {
            push(start, "<|im_start|>");
            push(builtin_id(role), role);
            push(builtin_id("\n"), "\n");
        };
        for (role, content) in messages {
            turn(role, &mut push);
            for piece in self.pieces(content) {
                let id = self.encode(&piece).first().copied().unwrap_or(0);
                push(id, &piece);
            }
            push(end, "<|im_end|>");
            push(builtin_id("\n"), "\n");
        }
        turn("assistant", &mut push);
        (ids, strs)
    }

    /// The text of token ids; None when the tokenizer cannot say (the
    /// built-in one has no vocabulary).
    pub fn decode(&self, _ids: &[u64]) -> Option<String> {
        match self {
            Tokenizer::Builtin => None,
        }
    }
}

/// The built-in tokenizer's id of a token: FNV-1a of its bytes, folded.
pub fn builtin_id(token: &str) -> u32 {
    let h = token.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    ((h ^ (h >> 32)) % u64::from(BUILTIN_VOCAB)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continuation_has_exactly_the_tokens_asked_for_and_repeats() {
        let t = Tokenizer::Builtin;
        for n in [1, 2, 7, 100] {
            let c = t.continuation(n, 42);
            assert_eq!(c.len(), n);
            assert!(c[0].starts_with(' '), "{c:?}");
            assert_eq!(c, t.continuation(n, 42));
            // Its text tokenizes back to the same tokens.
            assert_eq!(t.pieces(&c.concat()), c);
        }
        assert_ne!(t.continuation(20, 1), t.continuation(20, 2));
    }

    #[test]
    fn builtin_ids_are_stable_and_in_range() {
        let t = Tokenizer::Builtin;
        let ids = t.encode("hello world hello");
        assert_eq!(ids.len(), 3);
        assert_ne!(ids[0], ids[1]);
        assert!(ids.iter().all(|&i| i < BUILTIN_VOCAB));
        // "hello" and " hello" are different tokens.
        assert_eq!(t.encode("hello"), vec![ids[0]]);
        assert_eq!(t.decode(&[1, 2]), None);
    }

    #[test]
    fn a_chat_encodes_to_as_many_tokens_as_it_counts() {
        let t = Tokenizer::Builtin;
        let m = vec![("system".to_string(), "Be brief.".to_string()), ("user".to_string(), "Hi there".to_string())];
        let (ids, strs) = t.encode_chat(&m);
        // (3 + 5) + (2 + 5) + 3, by hand: "Be", " brief", "." and "Hi", " there".
        assert_eq!(ids.len(), 18);
        assert_eq!(ids.len(), t.count_chat(m.iter().map(|(r, c)| (r.as_str(), c.as_str()))));
        assert_eq!(strs[..4], ["<|im_start|>", "system", "\n", "Be"]);
        assert_eq!(
            strs.concat(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
        );
    }
}
