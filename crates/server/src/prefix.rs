//! Prefix caching in the server (docs/prefix-caching.md): the content a
//! request brings to a model with `kv_cache.prefix_caching: true`.
//!
//! The engine identifies a full KV block by a hash of the tokens up to its
//! end; the planner makes those hashes from content segments, the server
//! from real token ids: the prompt's, then the answer's, chained block by
//! block ([`llmsim_core::engine::prefix::hash::token_block_hashes`]). Two
//! requests so share exactly the blocks whose tokens, from the first one
//! on, are the same ids: a shared system prompt, or a conversation resent
//! with its earlier answers.
//!
//! Token ids come from the built-in tokenizer, which has no vocabulary: a
//! token's id is a stable hash of its text (FNV-1a folded into
//! [`VOCAB`] ids), so the same text always gets the same ids. A chat
//! prompt is framed as ChatML, as its count is
//! ([`tokenizer::count_chat`]): `<|im_start|>`, the role and `\n` before
//! each message's content, `<|im_end|>` and `\n` after it, and
//! `<|im_start|>assistant\n` at the end. The two markers take the ids just
//! past the hashed ones. A completions prompt given as token ids is hashed
//! as given. The answer's ids are those of the tokens the server streams,
//! so a next turn that resends the answer as the assistant's message gets
//! the same ids for it and hits the blocks the answer filled.
//!
//! Only the blocks the engine can ever compute are hashed: the first
//! `floor((P + N - 1) / block_size)` (the last token is sampled, never fed
//! back), as the planner does.

use super::models::{EngineKind, ServedModel};
use llmsim_content::tokenizer;
use llmsim_core::engine::prefix::hash::token_block_hashes;

/// The id space of the built-in tokenizer's hashed ids, and a token's id
/// in it: the tokenizer's own (`super::tokenize`).
pub use super::tokenize::{BUILTIN_VOCAB as VOCAB, builtin_id as token_id};
const IM_START: u32 = VOCAB;
const IM_END: u32 = VOCAB + 1;
/// The token an empty completions prompt still holds (the beginning of
/// sequence), and an answer's end of sequence when the answer has no text.
const BOS: u32 = VOCAB + 2;
const EOS: u32 = VOCAB + 3;

/// What a request's prompt is, kept until the model (and so whether its
/// prefix caching is on) is known.
#[derive(Clone, Debug, Default)]
pub enum PromptContent {
    /// A chat: `(role, content)` per message.
    Chat(Vec<(String, String)>),
    /// A completions prompt as text.
    Text(String),
    /// A completions prompt as token ids.
    Ids(Vec<u64>),
    #[default]
    None,
}

fn text_ids(text: &str, out: &mut Vec<u32>) {
    out.extend(tokenizer::tokens(text).map(token_id));
}

/// The prompt's token ids: as many as the server counts for it.
pub fn prompt_ids(prompt: &PromptContent) -> Vec<u32> {
    let mut ids = Vec::new();
    match prompt {
        PromptContent::Chat(messages) => {
            let turn = |role: &str, ids: &mut Vec<u32>| ids.extend([IM_START, token_id(role), token_id("\n")]);
            for (role, content) in messages {
                turn(role, &mut ids);
                text_ids(content, &mut ids);
                ids.extend([IM_END, token_id("\n")]);
            }
            turn("assistant", &mut ids);
        }
        PromptContent::Text(t) => text_ids(t, &mut ids),
        // Ids past u32 are folded: they only need to stay distinct.
        PromptContent::Ids(v) => ids.extend(v.iter().map(|&i| (i ^ (i >> 32)) as u32)),
        PromptContent::None => {}
    }
    if ids.is_empty() {
        ids.push(BOS);
    }
    ids
}

/// The hashes of the full blocks a request can use: its prompt's ids
/// (`prompt` of them, padded or cut to the count the server charged),
/// then the ids of its `output` answer tokens (`pieces`, one token each,
/// padded with an end of sequence), limited to the first `prompt + output
/// - 1` tokens.
pub fn block_hashes(mut ids: Vec<u32>, prompt: u32, pieces: &[String], output: u32, block_size: u32) -> Vec<u64> {
    ids.resize(prompt as usize, BOS);
    ids.extend(pieces.iter().take(output as usize).map(|p| token_id(p)));
    ids.resize(prompt as usize + output as usize, EOS);
    ids.truncate((prompt as usize + output as usize).saturating_sub(1));
    token_block_hashes(&ids, block_size)
}

/// The block hashes of a request to `model`: empty unless the model runs
/// the scheduler with prefix caching on (then the request is unique
/// content to the engine, as without the flag).
pub fn for_model(
    model: &ServedModel,
    prompt: &PromptContent,
    prompt_tokens: u32,
    plan: &super::openai::Plan,
) -> Vec<u64> {
    match &model.engine {
        EngineKind::Scheduler(s) if s.engine.prefix_caching => {
            let bs = s.engine.capacity.block_size;
            block_hashes(prompt_ids(prompt), prompt_tokens, &plan.pieces.to_vec(), plan.output, bs)
        }
        _ => Vec::new(),
    }
}

/// Whether `model` reports prefix caching (`usage.prompt_tokens_details`).
pub fn caching(model: &ServedModel) -> bool {
    matches!(&model.engine, EngineKind::Scheduler(s) if s.engine.prefix_caching)
}

/// The block size `--record` names blocks in: only a model with prefix
/// caching on records its blocks.
pub fn recorded_block_size(spec: &ServedModel) -> Option<u32> {
    match &spec.engine {
        EngineKind::Scheduler(s) if s.engine.prefix_caching => Some(s.engine.capacity.block_size),
        _ => None,
    }
}

impl From<&super::request::PromptIn> for PromptContent {
    fn from(p: &super::request::PromptIn) -> PromptContent {
        use super::request::PromptIn;
        match p {
            PromptIn::Chat(m) => PromptContent::Chat(m.clone()),
            PromptIn::Text(t) => PromptContent::Text(t.clone()),
            PromptIn::Ids(ids) => PromptContent::Ids(ids.iter().map(|&i| i as u64).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_has_as_many_ids_as_its_count() {
        let msgs = vec![("system".to_string(), "You are terse.".to_string()), ("user".into(), "hi there".into())];
        let n = tokenizer::count_chat(msgs.iter().map(|(r, c)| (r.as_str(), c.as_str())));
        // "You are terse." is 4 tokens, "hi there" 2: 4 + 5 + 2 + 5 + 3.
        assert_eq!(n, 19);
        assert_eq!(prompt_ids(&PromptContent::Chat(msgs)).len(), 19);
        assert_eq!(prompt_ids(&PromptContent::Text(String::new())), vec![BOS], "an empty prompt holds one token");
    }

    #[test]
    fn only_blocks_the_engine_can_compute_are_hashed() {
        // P = 10, N = 7, block 4: the first 16 tokens hold 4 full blocks.
        let pieces: Vec<String> = (0..7).map(|i| format!(" w{i}")).collect();
        let ids: Vec<u32> = (0..10).collect();
        assert_eq!(block_hashes(ids.clone(), 10, &pieces, 7, 4).len(), 4);
        // N = 6: 15 tokens, 3 blocks.
        assert_eq!(block_hashes(ids, 10, &pieces, 6, 4).len(), 3);
    }

    #[test]
    fn the_same_text_has_the_same_ids_and_other_text_other_ones() {
        assert_eq!(token_id(" hello"), token_id(" hello"));
        assert_ne!(token_id(" hello"), token_id("hello"));
        assert!(token_id("x") < VOCAB);
    }
}
