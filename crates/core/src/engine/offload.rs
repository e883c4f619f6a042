//! KV offload tiers (docs/offload.md): host memory and local disk below the
//! GPU's prefix cache, as LMCache and vLLM's offloading connector add them.
//!
//! Every block registered in the GPU's prefix cache (a full block of known
//! content, at the step that schedules it) is written through to every
//! tier; each tier keeps the most recently stored or loaded blocks that
//! fit, by content hash (least recently used out first). At admission,
//! after the GPU's hit run, the blocks that follow are looked up in the
//! tiers, fastest first: the leading run found in some tier is loaded
//! instead of computed. A load is on the step's critical path (LMCache's
//! blocking retrieve): it adds `blocks x seconds a block` of the tier each
//! block comes from to the step that admits the request. Writes overlap
//! the computation and cost nothing. Pure: no clock, no files.

use std::collections::HashMap;

/// One tier as the engine runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Tier {
    /// Blocks it holds.
    pub blocks: u64,
    /// Seconds to load one block from it into the GPUs.
    pub block_s: f64,
}

/// The tiers, fastest first (`kv_cache.offload`).
#[derive(Clone, Debug, PartialEq)]
pub struct Offload {
    pub tiers: Vec<Tier>,
}

/// No node.
const NIL: u32 = u32::MAX;

#[derive(Copy, Clone, Debug)]
struct Node {
    hash: u64,
    prev: u32,
    next: u32,
}

/// One tier's content: a least-recently-used list of content hashes.
#[derive(Clone, Debug)]
struct Lru {
    cap: u64,
    map: HashMap<u64, u32, super::IdHasher>,
    nodes: Vec<Node>,
    /// Most recently used first.
    head: u32,
    tail: u32,
    /// Nodes of evicted hashes, for reuse.
    spare: Vec<u32>,
}

impl Lru {
    fn new(cap: u64) -> Lru {
        Lru { cap, map: HashMap::default(), nodes: Vec::new(), head: NIL, tail: NIL, spare: Vec::new() }
    }

    fn contains(&self, h: u64) -> bool {
        self.map.contains_key(&h)
    }

    fn unlink(&mut self, i: u32) {
        let Node { prev, next, .. } = self.nodes[i as usize];
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// `h` becomes the most recently used, stored if it was not (the least
    /// recently used leaving when the tier is full).
    fn store(&mut self, h: u64) {
        if let Some(&i) = self.map.get(&h) {
            self.unlink(i);
            self.push_front(i);
            return;
        }
        if self.cap == 0 {
            return;
        }
        if self.map.len() as u64 >= self.cap {
            let old = self.tail;
            self.unlink(old);
            self.map.remove(&self.nodes[old as usize].hash);
            self.spare.push(old);
        }
        let i = match self.spare.pop() {
            Some(i) => {
                self.nodes[i as usize].hash = h;
                i
            }
            None => {
                self.nodes.push(Node { hash: h, prev: NIL, next: NIL });
                (self.nodes.len() - 1) as u32
            }
        };
        self.map.insert(h, i);
        self.push_front(i);
    }

    fn len(&self) -> u64 {
        self.map.len() as u64
    }
}

/// The tiers' content and what was loaded from them.
#[derive(Clone, Debug)]
pub struct Tiers {
    cfg: Offload,
    lrus: Vec<Lru>,
    /// Blocks loaded from each tier since the start.
    pub loaded: Vec<u64>,
    /// Seconds of loads since the start.
    pub load_s: f64,
    /// Blocks the last [`Tiers::load`] took from each tier.
    pub last: Vec<u32>,
}

impl Tiers {
    pub fn new(cfg: &Offload) -> Tiers {
        Tiers {
            lrus: cfg.tiers.iter().map(|t| Lru::new(t.blocks)).collect(),
            loaded: vec![0; cfg.tiers.len()],
            load_s: 0.0,
            last: vec![0; cfg.tiers.len()],
            cfg: cfg.clone(),
        }
    }

    /// Writes blocks of content `hashes` through to every tier.
    pub fn store(&mut self, hashes: &[u64]) {
        for lru in &mut self.lrus {
            for &h in hashes {
                lru.store(h);
            }
        }
    }

    /// The leading blocks of `hashes` some tier holds (each from the
    /// fastest that does), loaded: they become the most recently used in
    /// their tier. Returns how many, and the seconds their loads take.
    pub fn load(&mut self, hashes: &[u64]) -> (u32, f64) {
        let mut n = 0;
        let mut secs = 0.0;
        self.last.iter_mut().for_each(|k| *k = 0);
        for &h in hashes {
            let Some(t) = self.lrus.iter().position(|l| l.contains(h)) else { break };
            self.lrus[t].store(h);
            self.loaded[t] += 1;
            self.last[t] += 1;
            secs += self.cfg.tiers[t].block_s;
            n += 1;
        }
        self.load_s += secs;
        (n, secs)
    }

    /// Blocks each tier holds now.
    pub fn held(&self) -> Vec<u64> {
        self.lrus.iter().map(Lru::len).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiers(caps: &[u64]) -> Tiers {
        Tiers::new(&Offload { tiers: caps.iter().map(|&blocks| Tier { blocks, block_s: 1.0 }).collect() })
    }

    #[test]
    fn a_tier_keeps_the_most_recently_used_blocks_that_fit() {
        let mut t = tiers(&[3]);
        t.store(&[1, 2, 3]);
        t.store(&[4]); // 1 leaves
        assert_eq!(t.load(&[1, 2]), (0, 0.0), "1 was the least recently used");
        assert_eq!(t.load(&[2, 3, 4]), (3, 3.0));
        t.store(&[5]); // now 2 is the least recently used (2, 3, 4 loaded in that order)
        assert_eq!(t.load(&[2]), (0, 0.0));
        assert_eq!(t.load(&[3, 4, 5]), (3, 3.0));
        assert_eq!(t.held(), [3]);
    }

    #[test]
    fn a_load_takes_the_leading_run_from_the_fastest_tier_holding_each_block() {
        let mut t =
            Tiers::new(&Offload { tiers: vec![Tier { blocks: 2, block_s: 0.5 }, Tier { blocks: 10, block_s: 2.0 }] });
        t.store(&[1, 2, 3, 4]); // the fast tier keeps 3, 4; the slow one all four
        assert_eq!(t.load(&[1, 2, 3, 9, 4]), (3, 2.0 + 2.0 + 0.5), "1 and 2 from disk, 3 from memory, 9 stops it");
        assert_eq!(t.loaded, [1, 2]);
        assert_eq!(t.load_s, 4.5);
    }

    #[test]
    fn a_tier_of_no_blocks_holds_nothing() {
        let mut t = tiers(&[0]);
        t.store(&[1]);
        assert_eq!(t.load(&[1]), (0, 0.0));
    }
}
