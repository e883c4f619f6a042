//! A served model's tokenizer: the built-in one (the default), which has
//! no vocabulary, or a Hugging Face `tokenizer.json` the model names
//! (`tokenizer: FILE` in the models file), read with the `tokenizers`
//! crate, the library vLLM's own (fast) tokenizers come from. With one,
//! prompt counts, `/tokenize`, `/detokenize` and the answers' token
//! boundaries are the model's: a `vllm bench serve` random-dataset prompt
//! (decoded runs of token ids) counts what the model counts.
//!
//! The crate is built without its default features: no Oniguruma (a C
//! library) and no C++ suffix arrays; `fancy-regex` (pure Rust) runs the
//! pre-tokenizer patterns instead, so a fresh clone builds with cargo alone.
//! With a tokenizer.json, a chat prompt is the model's chat template
//! rendered (the `chat_template` of the `tokenizer_config.json` next to it,
//! or a models-file `chat_template:` file; see [`template`]) and tokenized
//! without added special tokens, as vLLM does (the template writes the
//! BOS). Without a template, and with the built-in tokenizer, chat prompts
//! are framed as ChatML (5 tokens per message, 3 for the reply's priming).
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

use std::path::Path;
use std::sync::Arc;

use llmsim_content::{responses, tokenizer};

pub mod template;

pub use template::{ChatInput, ChatTemplate, TemplateError};

/// The id space of the built-in tokenizer's hashed ids (2^17, about the
/// size of a Llama 3 or Qwen vocabulary).
pub const BUILTIN_VOCAB: u32 = 1 << 17;

/// A Hugging Face tokenizer and its chat template, if it has one, shared
/// by every request of its model.
#[derive(Clone)]
pub struct HfTokenizer(Arc<tokenizers::Tokenizer>, Option<Arc<ChatTemplate>>);

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HfTokenizer(vocab {}, template {:?})", self.0.get_vocab_size(true), self.1)
    }
}

/// A `tokenizer.json` that cannot be read: the file and the tokenizers
/// crate's reason.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {} as a tokenizer.json: {reason}", file.display())]
pub struct TokenizerError {
    pub file: std::path::PathBuf,
    pub reason: String,
}

#[derive(Clone, Debug, Default)]
pub enum Tokenizer {
    #[default]
    Builtin,
    Hf(HfTokenizer),
}

impl Tokenizer {
    /// Reads a `tokenizer.json`; the error says what is wrong with it.
    pub fn load(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Tokenizer, path)
            .map_err(|e| TokenizerError { file: path.to_path_buf(), reason: e.message() })?;
        let t: tokenizers::Tokenizer = text
            .parse()
            .map_err(|e: tokenizers::Error| TokenizerError { file: path.to_path_buf(), reason: e.to_string() })?;
        Ok(Tokenizer::Hf(HfTokenizer(Arc::new(t), None)))
    }

    /// Reads a `tokenizer.json` and its chat template (`chat_template`, the
    /// models file's `chat_template:` file, else found next to the
    /// tokenizer: see [`template`]).
    pub fn load_with_template(path: &Path, chat_template: Option<&Path>) -> Result<Tokenizer, TokenizerError> {
        let Tokenizer::Hf(HfTokenizer(t, _)) = Tokenizer::load(path)? else {
            unreachable!("load reads a tokenizer.json")
        };
        let template = ChatTemplate::find(path, chat_template)
            .map_err(|e| TokenizerError { file: path.to_path_buf(), reason: format!("its chat template: {e}") })?;
        Ok(Tokenizer::Hf(HfTokenizer(t, template.map(Arc::new))))
    }

    /// The model's chat template, when it has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        match self {
            Tokenizer::Hf(HfTokenizer(_, t)) => t.as_deref(),
            Tokenizer::Builtin => None,
        }
    }

    /// Token ids of a chat rendered by the model's chat template and
    /// tokenized as vLLM does (special tokens only if the request asks):
    /// None without a template (the ChatML framing of [`Tokenizer::count_chat`]
    /// applies); the template's message when it fails to render.
    pub fn template_ids(&self, chat: &ChatInput) -> Option<Result<Vec<u32>, TemplateError>> {
        let Tokenizer::Hf(HfTokenizer(t, Some(template))) = self else { return None };
        Some(template.render(chat).and_then(|text| {
            t.encode(text, chat.add_special_tokens)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| TemplateError(format!("tokenizing the rendered chat failed: {e}")))
        }))
    }

    /// The vocabulary strings of token ids (transformers'
    /// `convert_ids_to_tokens`: `Ġhello` for a byte-level ` hello`); None
    /// for the built-in tokenizer, which has no vocabulary. An id outside
    /// the vocabulary has no string: `""`.
    pub fn token_strs(&self, ids: &[u32]) -> Option<Vec<String>> {
        match self {
            Tokenizer::Builtin => None,
            Tokenizer::Hf(t) => Some(ids.iter().map(|&i| t.0.id_to_token(i).unwrap_or_default()).collect()),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Tokenizer::Builtin => "builtin",
            Tokenizer::Hf(_) => "tokenizer.json",
        }
    }

    /// Tokens of a completions prompt (with the tokenizer's special tokens,
    /// such as a beginning of sequence, as vLLM adds them).
    pub fn count(&self, text: &str) -> usize {
        match self {
            Tokenizer::Builtin => tokenizer::count(text),
            Tokenizer::Hf(t) => t.0.encode(text, true).map_or(0, |e| e.len()),
        }
    }

    /// Prompt tokens of a chat, ChatML framing included.
    pub fn count_chat<'a>(&self, messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> usize {
        match self {
            Tokenizer::Builtin => tokenizer::count_chat(messages),
            Tokenizer::Hf(t) => {
                let body: usize = messages
                    .into_iter()
                    .map(|(_, c)| t.0.encode(c, false).map_or(0, |e| e.len()) + tokenizer::PER_MESSAGE_OVERHEAD)
                    .sum();
                body + tokenizer::PER_PROMPT_OVERHEAD
            }
        }
    }

    /// The tokens of `text` as the texts the server streams; they
    /// concatenate back to `text`. With a tokenizer.json each token's text
    /// runs from its start offset to the next token's (so whitespace a
    /// pre-tokenizer drops stays with the token before it, and a character
    /// split across byte-level tokens goes with the first of them).
    pub fn pieces(&self, text: &str) -> Vec<String> {
        match self {
            Tokenizer::Builtin => tokenizer::tokens(text).map(str::to_string).collect(),
            Tokenizer::Hf(t) => {
                let Ok(enc) = t.0.encode(text, false) else { return vec![text.to_string()] };
                let floor = |mut i: usize| {
                    i = i.min(text.len());
                    while !text.is_char_boundary(i) {
                        i -= 1;
                    }
                    i
                };
                let mut starts: Vec<usize> = enc.get_offsets().iter().map(|&(s, _)| floor(s)).collect();
                if let Some(first) = starts.first_mut() {
                    *first = 0;
                }
                for i in 1..starts.len() {
                    starts[i] = starts[i].max(starts[i - 1]);
                }
                let mut out = Vec::with_capacity(starts.len());
                for (i, &s) in starts.iter().enumerate() {
                    let e = starts.get(i + 1).copied().unwrap_or(text.len());
                    out.push(text[s..e].to_string());
                }
                if out.is_empty() && !text.is_empty() {
                    out.push(text.to_string());
                }
                out
            }
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
            Tokenizer::Hf(t) => t.0.encode(text, true).map_or_else(|_| Vec::new(), |e| e.get_ids().to_vec()),
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
            let ids = self.content_ids(content);
            for (piece, id) in self.pieces(content).iter().zip(ids) {
                push(id, piece);
            }
            push(end, "<|im_end|>");
            push(builtin_id("\n"), "\n");
        }
        turn("assistant", &mut push);
        (ids, strs)
    }

    /// Ids of a message's content, without special tokens.
    fn content_ids(&self, text: &str) -> Vec<u32> {
        match self {
            Tokenizer::Builtin => self.encode(text),
            Tokenizer::Hf(t) => t.0.encode(text, false).map_or_else(|_| Vec::new(), |e| e.get_ids().to_vec()),
        }
    }

    /// How many token ids the model knows: a prompt id at or past it is
    /// out of vocabulary (vLLM's `validate_token_ids`). A tokenizer.json's
    /// vocabulary with its added tokens; for the built-in tokenizer, its id
    /// space: the hashed ids and the two ChatML markers `/tokenize` uses.
    pub fn vocab_size(&self) -> u64 {
        match self {
            Tokenizer::Builtin => u64::from(BUILTIN_VOCAB) + 2,
            Tokenizer::Hf(t) => t.0.get_vocab_size(true) as u64,
        }
    }

    /// The text of token ids; None when the tokenizer cannot say (the
    /// built-in one has no vocabulary).
    pub fn decode(&self, ids: &[u64]) -> Option<String> {
        match self {
            Tokenizer::Builtin => None,
            Tokenizer::Hf(t) => {
                let ids: Vec<u32> = ids.iter().map(|&i| u32::try_from(i).unwrap_or(u32::MAX)).collect();
                // vLLM's /detokenize keeps special tokens (`skip_special_tokens=False`).
                t.0.decode(&ids, false).ok()
            }
        }
    }
}

/// The built-in tokenizer's id of a token: FNV-1a of its bytes, folded.
pub fn builtin_id(token: &str) -> u32 {
    let h = llmsim_core::util::fnv1a(token.bytes());
    ((h ^ (h >> 32)) % u64::from(BUILTIN_VOCAB)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word-level tokenizer.json written here: whitespace pre-tokenizer,
    /// seven words, `[UNK]` for the rest.
    pub const WORDS_JSON: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
        "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2,"the":3,"quick":4,"fox":5,",":6},
        "unk_token":"[UNK]"}}"#;

    fn words() -> Tokenizer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, WORDS_JSON).unwrap();
        Tokenizer::load(&path).unwrap()
    }

    #[test]
    fn a_tokenizer_json_counts_splits_and_decodes_as_the_model() {
        let t = words();
        // Whitespace pre-tokenizer: "hello", ",", "world", "123456" (one word).
        let text = "hello, world 123456";
        assert_eq!(t.count(text), 4);
        assert_eq!(Tokenizer::Builtin.count(text), 6, "the built-in one splits digits in threes and spaces apart");
        assert_eq!(t.pieces(text), vec!["hello", ", ", "world ", "123456"]);
        assert_eq!(t.encode(text), vec![1, 6, 2, 0]);
        assert_eq!(t.decode(&[1, 2]).as_deref(), Some("hello world"));
        // Chat: content tokens + 5 per message + 3.
        assert_eq!(t.count_chat([("user", "hello world")]), 2 + 5 + 3);
        let (ids, _) = t.encode_chat(&[("user".into(), "hello world".into())]);
        assert_eq!(ids.len(), 10);
        let e = Tokenizer::load(Path::new("/nonexistent/tokenizer.json")).unwrap_err();
        assert!(e.to_string().contains("cannot read /nonexistent/tokenizer.json as a tokenizer.json"), "{e}");
    }

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
