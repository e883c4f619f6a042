//! The prefix cache's map from a content hash to the blocks holding it: an
//! open-addressing table with linear probing and backward-shift deletion,
//! kept at most half full.
//!
//! Why not `std::collections::HashMap`: every block the planner computes is
//! inserted once and removed once, so the map sits on the hot path. Keys are
//! already uniformly mixed 64-bit hashes, so they index the table directly;
//! one 16-byte slot holds key and value, and a lookup is usually a single
//! cache line, where a SwissTable reads a control group and then a bucket.
//! The table is looked up by key only; iteration (for the invariant check)
//! never decides anything that reaches an output.

use super::NIL;

/// The blocks holding one hash, in registration order: `first` serves
/// lookups. `first == NIL` marks an empty slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Holders {
    pub first: u32,
    pub last: u32,
}

#[derive(Copy, Clone, Debug)]
struct Slot {
    key: u64,
    holders: Holders,
}

const EMPTY: Slot = Slot { key: 0, holders: Holders { first: NIL, last: NIL } };

#[derive(Clone, Debug)]
pub struct HashIndex {
    slots: Vec<Slot>,
    mask: usize,
    len: usize,
}

impl HashIndex {
    /// An empty table, of a few slots: it doubles as entries come.
    pub fn new() -> HashIndex {
        HashIndex::with_capacity(0)
    }

    /// A table ready for about `expected` entries without growing.
    pub fn with_capacity(expected: usize) -> HashIndex {
        let size = (expected.max(8) * 2).next_power_of_two();
        HashIndex { slots: vec![EMPTY; size], mask: size - 1, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots the table holds (its memory: 16 bytes each).
    #[cfg(test)]
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The slot of `key`, or the empty slot where it would go.
    #[inline]
    fn find(&self, key: u64) -> usize {
        let mut i = key as usize & self.mask;
        loop {
            let s = &self.slots[i];
            if s.holders.first == NIL || s.key == key {
                return i;
            }
            i = (i + 1) & self.mask;
        }
    }

    #[inline]
    pub fn get(&self, key: u64) -> Option<Holders> {
        let s = self.slots[self.find(key)];
        (s.holders.first != NIL).then_some(s.holders)
    }

    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut Holders> {
        let i = self.find(key);
        let s = &mut self.slots[i];
        (s.holders.first != NIL).then_some(&mut s.holders)
    }

    /// The holders of `key`, inserting `new` first if it has none.
    /// Returns the entry and whether it was inserted.
    #[inline]
    pub fn get_or_insert(&mut self, key: u64, new: Holders) -> (&mut Holders, bool) {
        debug_assert!(new.first != NIL, "NIL marks an empty slot");
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let i = self.find(key);
        let inserted = self.slots[i].holders.first == NIL;
        if inserted {
            self.slots[i] = Slot { key, holders: new };
            self.len += 1;
        }
        (&mut self.slots[i].holders, inserted)
    }

    /// Removes `key` (if present), shifting later entries of its probe run back.
    pub fn remove(&mut self, key: u64) {
        let mut hole = self.find(key);
        if self.slots[hole].holders.first == NIL {
            return;
        }
        self.len -= 1;
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let s = self.slots[j];
            if s.holders.first == NIL {
                break;
            }
            // `s` may fill the hole unless its home lies cyclically in (hole, j].
            let home = s.key as usize & self.mask;
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        let size = old.len() * 2;
        self.slots = vec![EMPTY; size];
        self.mask = size - 1;
        for s in old.into_iter().filter(|s| s.holders.first != NIL) {
            let i = self.find(s.key);
            self.slots[i] = s;
        }
    }

    /// Every entry, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Holders)> + '_ {
        self.slots.iter().filter(|s| s.holders.first != NIL).map(|s| (s.key, s.holders))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn h(first: u32) -> Holders {
        Holders { first, last: first }
    }

    #[test]
    fn random_inserts_and_removes_agree_with_a_btreemap() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut t = HashIndex::with_capacity(4);
        let mut reference = BTreeMap::new();
        for step in 0..200_000u32 {
            // Few distinct keys, with many sharing low bits, so probe runs
            // collide and wrap around the end of the table.
            let key = rng.random_range(0..300u64) * 1024 + rng.random_range(0..3u64);
            match rng.random_range(0..3) {
                0 => {
                    t.remove(key);
                    reference.remove(&key);
                }
                _ => {
                    let (e, inserted) = t.get_or_insert(key, h(step));
                    assert_eq!(inserted, !reference.contains_key(&key));
                    if !inserted {
                        e.last = step;
                    }
                    reference.entry(key).and_modify(|v: &mut Holders| v.last = step).or_insert(h(step));
                }
            }
            if step % 997 == 0 {
                assert_eq!(t.len(), reference.len());
                for (k, v) in &reference {
                    assert_eq!(t.get(*k), Some(*v), "key {k}");
                }
                let mut all: Vec<_> = t.iter().collect();
                all.sort_by_key(|(k, _)| *k);
                assert_eq!(all, reference.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn a_missing_key_is_none_and_removing_it_changes_nothing() {
        let mut t = HashIndex::with_capacity(8);
        t.get_or_insert(5, h(1));
        t.remove(6);
        assert_eq!((t.get(6), t.get(5), t.len()), (None, Some(h(1)), 1));
        assert!(t.get_mut(7).is_none());
        t.get_mut(5).unwrap().last = 9;
        assert_eq!(t.get(5), Some(Holders { first: 1, last: 9 }));
        t.remove(5);
        assert!(t.is_empty());
    }
}
