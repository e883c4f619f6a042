//! Content hashes of full KV blocks (docs/prefix-caching.md, "The rules").
//!
//! The engine never sees tokens or strings: a request brings the hashes of
//! its full blocks, prompt then answer, as a `Vec<u64>`, and two blocks are
//! the same content exactly when their hashes are equal. Two producers make
//! those hashes:
//!
//! * the planner describes a request as [`Segment`]s, each a content key and
//!   a length; the hash of block `b` chains the hash of block `b - 1` with
//!   the `(key, offset in the key's stream, length)` pieces that cover its
//!   tokens ([`segment_block_hashes`]). The same key at the same offsets is
//!   the same tokens whatever the segment's length, so a longer prefix of
//!   the same `prefix_id` shares the shorter one's head;
//! * the server hashes its tokenizer's ids of the prompt, then of the answer
//!   ([`token_block_hashes`]).
//!
//! Both chain every block with its predecessor, so a hash names the whole
//! prefix up to the end of its block, as vLLM's block hashes do. Hashes are
//! 64 bits from a folded 128-bit multiply: two different prefixes collide
//! with probability about 2^-64 per pair, far below anything a run can
//! reach; a collision would count as a hit.

/// A run of tokens of one content stream: the first `len` tokens of the
/// stream named `key` (a stream always starts at offset 0).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    pub key: u64,
    pub len: u32,
}

impl Segment {
    pub fn new(key: u64, len: u32) -> Segment {
        Segment { key, len }
    }
}

/// Tags that keep the kinds of content keys apart.
const PROMPT: u64 = 0x7072_6f6d_7074_0001;
const GENERATED: u64 = 0x6765_6e65_7261_0002;
const NAMED: u64 = 0x6e61_6d65_6400_0003;
const HASH_ID: u64 = 0x6861_7368_6964_0004;
const BLOCK: u64 = 0x626c_6f63_6b00_0005;
const TOKENS: u64 = 0x746f_6b65_6e73_0006;
const BLOCK_ID: u64 = 0x626c_6b69_6400_0007;

/// Mixes two words into one (wyhash's folded multiply, with constants so
/// that zero inputs do not stay zero).
#[inline]
pub fn mix(a: u64, b: u64) -> u64 {
    let r = u128::from(a ^ 0xa076_1d64_78bd_642f) * u128::from(b ^ 0xe703_7ed1_a0b4_28db);
    (r as u64) ^ ((r >> 64) as u64)
}

/// The unique prompt tokens of request `id`.
pub fn prompt_key(id: u64) -> u64 {
    mix(PROMPT, id)
}

/// The tokens request `id` generates.
pub fn generated_key(id: u64) -> u64 {
    mix(GENERATED, id)
}

/// Content named by a string: a trace's `prefix_id`, or `sys:<group>` for
/// the system prompts `workload.shared_prefix` draws (so a trace written by
/// `llmsim trace` replays to the very same hashes).
pub fn named_key(name: &str) -> u64 {
    // FNV-1a over the bytes, then mixed.
    let fnv = crate::util::fnv1a(name.bytes());
    mix(NAMED, mix(fnv, name.len() as u64))
}

/// One block of a Mooncake-style trace's `hash_ids`.
pub fn hash_id_key(id: u64) -> u64 {
    mix(HASH_ID, id)
}

/// Appends to `out` the hashes of the full blocks among the first `limit`
/// tokens of `segments` (fewer if the segments hold fewer tokens):
/// `min(limit, total) / block_size` hashes. Zero-length segments are skipped.
pub fn segment_block_hashes(segments: &[Segment], limit: u64, block_size: u32, out: &mut Vec<u64>) {
    hash_blocks(segments, None, limit, block_size, out, None);
}

/// A buffer of block hashes (a `Vec<u64>`) that remembers the hashes of
/// the blocks inside the first segment of the requests it was filled for:
/// requests of the same system prompt (`workload.shared_prefix`, a
/// trace's `prefix_id`) or of the same session start with the same
/// segment, and a block inside it hashes the same whatever follows (its
/// pieces are the segment's key and offsets). Only speed: the hashes are
/// those [`segment_block_hashes`] gives.
#[derive(Clone, Debug, Default)]
pub struct BlockHashes {
    hashes: Vec<u64>,
    /// Hashes of the full blocks of a first segment, by its key and the
    /// block size; emptied when it holds [`MEMO`] of them. (It remembered
    /// the last 16 round robin: requests cycling through 100 system
    /// prompts, as inference-perf sends them, never found theirs.)
    memo: std::collections::BTreeMap<(u64, u32), Vec<u64>>,
}

/// How many first segments a [`BlockHashes`] remembers (16 in unit
/// tests, so that they see it emptied).
const MEMO: usize = if cfg!(test) { 16 } else { 4096 };

impl std::ops::Deref for BlockHashes {
    type Target = Vec<u64>;
    fn deref(&self) -> &Vec<u64> {
        &self.hashes
    }
}

impl std::ops::DerefMut for BlockHashes {
    fn deref_mut(&mut self) -> &mut Vec<u64> {
        &mut self.hashes
    }
}

impl BlockHashes {
    /// [`hash_blocks`] into the buffer (cleared first), its first
    /// segment's blocks from the memo when it has them.
    fn fill(&mut self, segments: &[Segment], tail: Segment, limit: u64, block_size: u32) {
        self.hashes.clear();
        // Full blocks inside the first segment (0: nothing to remember).
        let inside = segments.first().map_or(0, |first| (first.len / block_size.max(1)) as usize);
        let key = segments.first().map_or(0, |first| first.key);
        let known = match inside {
            0 => None,
            _ => self.memo.get(&(key, block_size)).filter(|h| h.len() >= inside).map(|head| &head[..inside]),
        };
        hash_blocks(segments, Some(tail), limit, block_size, &mut self.hashes, known);
        if inside == 0 || known.is_some() {
            return;
        }
        if self.hashes.len() >= inside {
            if self.memo.len() >= MEMO {
                self.memo.clear();
            }
            self.memo.insert((key, block_size), self.hashes[..inside].to_vec());
        }
    }
}

/// [`segment_block_hashes`] over `segments` followed by `tail`. `head`:
/// the hashes of the full blocks inside `segments[0]` (or a prefix of
/// them), already known.
fn hash_blocks(
    segments: &[Segment],
    tail: Option<Segment>,
    limit: u64,
    block_size: u32,
    out: &mut Vec<u64>,
    head: Option<&[u64]>,
) {
    let at = |i: usize| if i < segments.len() { segments[i] } else { tail.unwrap_or(Segment::new(0, 0)) };
    let count = segments.len() + usize::from(tail.is_some());
    let total: u64 = segments.iter().chain(&tail).map(|s| u64::from(s.len)).sum();
    let blocks = limit.min(total) / u64::from(block_size.max(1));
    out.reserve(blocks as usize);
    let (mut seg, mut off, mut prev) = (0usize, 0u32, 0u64);
    if let Some(head) = head {
        // The chain's state after those blocks: inside the first segment,
        // or at the start of the second when they fill it.
        let head = &head[..head.len().min(blocks as usize)];
        out.extend_from_slice(head);
        if let Some(&last) = head.last() {
            prev = last;
            off = head.len() as u32 * block_size;
            if off == segments[0].len {
                (seg, off) = (1, 0);
            }
        }
    }
    for _ in out.len() as u64..blocks {
        let mut h = mix(prev, BLOCK);
        let mut left = block_size;
        while left > 0 && seg < count {
            let s = at(seg);
            let take = (s.len - off).min(left);
            if take > 0 {
                h = mix(h ^ s.key, (u64::from(off) << 32) | u64::from(take));
            }
            off += take;
            left -= take;
            if off == s.len {
                seg += 1;
                off = 0;
            }
        }
        out.push(h);
        prev = h;
    }
}

/// The content hashes the planner gives request `req`, written to `out`
/// (cleared first): its prompt as `prompt` segments (a unique segment keyed
/// by its id when empty), then its answer as a segment keyed by its id;
/// only the blocks that can ever be computed (the first `P + N - 1` tokens:
/// the last token is sampled, never fed back).
pub fn request_block_hashes(req: &crate::engine::Request, prompt: &[Segment], block_size: u32, out: &mut BlockHashes) {
    let tail = Segment::new(generated_key(req.id), req.output);
    let limit = u64::from(req.prompt) + u64::from(req.output) - 1;
    if prompt.is_empty() {
        // Unique tokens: nothing to remember.
        out.clear();
        let unique = [Segment::new(prompt_key(req.id), req.prompt)];
        return hash_blocks(&unique, Some(tail), limit, block_size, out, None);
    }
    debug_assert_eq!(
        prompt.iter().map(|s| u64::from(s.len)).sum::<u64>().min(u64::from(u32::MAX)),
        u64::from(req.prompt),
        "segments must add up to the prompt"
    );
    out.fill(prompt, tail, limit, block_size);
}

/// [`request_block_hashes`] for a request whose content from segment
/// `own_from` on is its own (`prompt[own_from..]`, then its answer;
/// `own_from == prompt.len()`: the answer alone; an empty `prompt` is the
/// request's unique tokens, all its own): only the blocks that end before
/// its own content starts get a hash, since every later block chains
/// content no other request has. [`crate::engine::Engine::submit_with_content`]
/// takes the rest as the request's own.
pub fn request_shared_hashes(
    req: &crate::engine::Request,
    prompt: &[Segment],
    own_from: usize,
    block_size: u32,
    out: &mut BlockHashes,
) {
    out.clear();
    if prompt.is_empty() {
        return;
    }
    let own_start: u64 = prompt[..own_from.min(prompt.len())].iter().map(|s| u64::from(s.len)).sum();
    let limit = (u64::from(req.prompt) + u64::from(req.output) - 1).min(own_start);
    out.fill(prompt, Segment::new(generated_key(req.id), req.output), limit, block_size);
}

/// The hashes of the full blocks of a token-id sequence (the server's
/// prompt ids, then its answer's): `tokens.len() / block_size` hashes.
pub fn token_block_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let bs = block_size.max(1) as usize;
    let mut prev = 0u64;
    tokens
        .chunks_exact(bs)
        .map(|block| {
            let h = block.iter().fold(mix(prev, TOKENS), |h, &t| mix(h, u64::from(t)));
            prev = h;
            h
        })
        .collect()
}

/// The hashes of blocks named by ids (a recorded trace's `block_ids`, one
/// id per full block, equal ids for equal content up to the block's end),
/// written to `out` (cleared first): one hash per id, chained.
pub fn id_block_hashes(ids: &[u64], out: &mut Vec<u64>) {
    out.clear();
    let mut prev = 0u64;
    out.extend(ids.iter().map(|&id| {
        prev = mix(mix(prev, BLOCK_ID), id);
        prev
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(segments: &[Segment], limit: u64, bs: u32) -> Vec<u64> {
        let mut out = Vec::new();
        segment_block_hashes(segments, limit, bs, &mut out);
        out
    }

    #[test]
    fn only_full_blocks_within_the_limit_get_a_hash() {
        let segs = [Segment::new(1, 10), Segment::new(2, 7)];
        assert_eq!(hashes(&segs, 100, 4).len(), 4, "17 tokens hold 4 full blocks of 4");
        assert_eq!(hashes(&segs, 11, 4).len(), 2, "the first 11 tokens hold 2");
        assert_eq!(hashes(&segs, 3, 4).len(), 0);
    }

    #[test]
    fn blocks_are_equal_exactly_while_the_pieces_agree() {
        // Same key for 10 tokens, then different content.
        let a = hashes(&[Segment::new(1, 10), Segment::new(2, 6)], 100, 4);
        let b = hashes(&[Segment::new(1, 10), Segment::new(3, 6)], 100, 4);
        // Blocks 0 and 1 ([0,4), [4,8)) are key 1 only; block 2 mixes in keys 2 and 3.
        assert_eq!(a[..2], b[..2]);
        assert_ne!(a[2], b[2]);
        assert_ne!(a[3], b[3], "a chain: everything after a difference differs");
    }

    #[test]
    fn a_reused_buffer_remembers_first_segments_without_changing_a_hash() {
        // One buffer across many requests (its memo hits and misses, and
        // is emptied once 16 first segments are held: 7 keys x 3 block sizes)
        // against the segments hashed from scratch: prompt, then answer,
        // within P + N - 1 tokens (request_block_hashes), and the same up
        // to where the own content starts (request_shared_hashes).
        let mut buf = BlockHashes::default();
        let mut hits = 0;
        for i in 0..400u64 {
            let (key, first, rest) = (i % 7, 3 + (i * 7) % 40, (i * 11) % 19);
            let bs = [4, 16, 5][(i / 100 % 3) as usize];
            let output = 1 + (i % 9) as u32;
            let prompt = [Segment::new(key, first as u32), Segment::new(1000 + i, rest as u32)];
            let req = crate::engine::Request {
                id: i,
                arrival: crate::time::SimTime::ZERO,
                prompt: (first + rest) as u32,
                output,
                priority: 0,
                lora: 0,
            };
            let whole = [prompt[0], prompt[1], Segment::new(generated_key(i), output)];
            let limit = first + rest + u64::from(output) - 1;
            hits += usize::from(buf.memo.get(&(key, bs)).is_some_and(|h| !h.is_empty()));
            request_block_hashes(&req, &prompt, bs, &mut buf);
            assert_eq!(*buf, hashes(&whole, limit, bs), "request {i}");
            request_shared_hashes(&req, &prompt, 1, bs, &mut buf);
            assert_eq!(*buf, hashes(&whole, limit.min(first), bs), "request {i}, shared part");
        }
        assert!(hits > 100, "the memo served {hits} requests");
    }

    #[test]
    fn a_longer_segment_of_the_same_key_shares_the_shorter_ones_head() {
        let short = hashes(&[Segment::new(7, 8), Segment::new(8, 8)], 100, 4);
        let long = hashes(&[Segment::new(7, 12), Segment::new(9, 4)], 100, 4);
        assert_eq!(short[..2], long[..2], "tokens 0..8 of key 7 in both");
        assert_ne!(short[2], long[2]);
    }

    #[test]
    fn the_same_tokens_at_other_offsets_are_other_content() {
        let a = hashes(&[Segment::new(1, 8)], 100, 4);
        let b = hashes(&[Segment::new(2, 4), Segment::new(1, 8)], 100, 4);
        assert!(!b.contains(&a[0]), "block 0 of key 1 sits at offset 4 in b");
    }

    #[test]
    fn a_block_may_hold_many_short_segments() {
        let segs = [Segment::new(1, 1), Segment::new(2, 1), Segment::new(3, 2), Segment::new(4, 0), Segment::new(5, 4)];
        assert_eq!(hashes(&segs, 100, 4).len(), 2);
        let swapped = [Segment::new(2, 1), Segment::new(1, 1), Segment::new(3, 2), Segment::new(5, 4)];
        assert_ne!(hashes(&segs, 100, 4)[0], hashes(&swapped, 100, 4)[0], "order matters");
    }

    #[test]
    fn token_ids_chain_block_by_block() {
        let a: Vec<u32> = (0..40).collect();
        let mut b = a.clone();
        b[37] = 999;
        let (ha, hb) = (token_block_hashes(&a, 16), token_block_hashes(&b, 16));
        assert_eq!(ha.len(), 2, "40 tokens hold 2 full blocks of 16");
        assert_eq!(ha, hb, "token 37 is in the partial third block");
        b[5] = 999;
        let hb = token_block_hashes(&b, 16);
        assert_ne!(ha[0], hb[0]);
        assert_ne!(ha[1], hb[1]);
    }

    #[test]
    fn keys_of_different_kinds_never_coincide_for_small_ids() {
        let mut all = std::collections::BTreeSet::new();
        for id in 0..1000 {
            for k in [prompt_key(id), generated_key(id), hash_id_key(id), named_key(&format!("sys:{id}"))] {
                assert!(all.insert(k), "duplicate key for id {id}");
            }
        }
    }
}
