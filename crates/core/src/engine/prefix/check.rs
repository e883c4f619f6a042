//! [`PrefixPool::check`]: the pool checked against itself, one part at a
//! time (tests call it after every step, debug builds too). The parts run
//! in a fixed order, so the first broken invariant is the one reported.

use super::{Block, NIL, ORPHAN, PrefixPool, RUN, SHARED, SlotState, UNCACHED, registered_before, run_parts};

/// What one part of the check finds and a later one needs.
struct Tally {
    /// References to each block from the slots' tables and pinned runs.
    refs: Vec<u64>,
    /// The blocks a label stands for (spare labels: blocks in runs of the
    /// free queue or held anonymously): each once.
    anon: Vec<bool>,
    /// Slots pinning each pinned run.
    pins: Vec<u32>,
    /// Blocks the slots hold without labels.
    held_anon: u64,
    /// Own blocks registered by count (requests not preempted since their
    /// content was set): cached, in no list.
    counted: u32,
    /// The free queue: blocks listed (live entries), stale entries, blocks
    /// in runs, and the orphans among them.
    listed: u32,
    stale: u32,
    in_runs: u64,
    orphans: u32,
}

impl PrefixPool {
    /// Checks the pool against itself: reference counts equal the tables
    /// holding each block; the free queue holds exactly the blocks with
    /// count 0; in use + free = total; every cached hash maps to the blocks
    /// holding it, earliest-registered first, and every block holding a
    /// hash is in its list exactly once; each table's registered head holds
    /// the request's own hashes. `live` says which slots may hold blocks.
    pub fn check(&self, live: impl Fn(u32) -> bool) -> Result<(), String> {
        let n = self.blocks.len();
        let mut t = Tally {
            refs: vec![0; n],
            anon: vec![false; n],
            pins: vec![0; self.pinned.len()],
            held_anon: 0,
            counted: 0,
            listed: 0,
            stale: 0,
            in_runs: 0,
            orphans: 0,
        };
        self.check_spare(&mut t)?;
        for (slot, s) in self.slots.iter().enumerate() {
            self.check_slot(slot, s, &live, &mut t)?;
        }
        self.check_references(&mut t)?;
        self.check_free_queue(&mut t)?;
        self.check_counts(&t)?;
        let in_lists = self.check_hash_lists()? + self.check_own_lists()? + self.check_orphans(&t)?;
        self.check_memo()?;
        self.check_cached(&t, in_lists)
    }

    /// The spare labels: each once, each a block just taken.
    fn check_spare(&self, t: &mut Tally) -> Result<(), String> {
        for &b in &self.spare {
            if t.anon.get(b as usize) != Some(&false) {
                return Err(format!("block {b} is spare twice, or was never allocated"));
            }
            t.anon[b as usize] = true;
            // Taking it writes nothing: it must look like a block just taken.
            let block = &self.blocks[b as usize];
            if block.refs != 1 || block.kind != UNCACHED || block.queued_at != u32::MAX {
                return Err(format!("spare block {b} is not a held block without a hash"));
            }
        }
        Ok(())
    }

    /// One slot: its content's counts, its blocks without labels, its
    /// pinned run, and each block of its table (counted as a reference,
    /// holding the request's hash once registered).
    fn check_slot(&self, slot: usize, s: &SlotState, live: &impl Fn(u32) -> bool, t: &mut Tally) -> Result<(), String> {
        if !s.table.is_empty() && !live(slot as u32) {
            return Err(format!("slot {slot} holds {} blocks but is not running", s.table.len()));
        }
        if (s.known as usize) < s.hashes.len()
            || (!s.own.is_empty() && s.known as usize != s.hashes.len() + s.own.len())
        {
            return Err(format!(
                "slot {slot} counts {} blocks of content, has {} shared and {} own",
                s.known,
                s.hashes.len(),
                s.own.len()
            ));
        }
        if s.released && !s.table.is_empty() && s.own.len() + s.hashes.len() != s.known as usize {
            return Err(format!("slot {slot} was preempted but lists no own positions"));
        }
        if s.anon > 0 && (s.released || s.table.len() != s.hashes.len()) {
            return Err(format!(
                "slot {slot} holds {} blocks without labels past {} of {} shared positions (preempted: {})",
                s.anon,
                s.table.len(),
                s.hashes.len(),
                s.released
            ));
        }
        t.held_anon += u64::from(s.anon);
        if s.registered as usize > s.table.len() + s.anon as usize {
            return Err(format!(
                "slot {slot} registered {} of {} blocks",
                s.registered,
                s.table.len() + s.anon as usize
            ));
        }
        if s.anon > 0 && !live(slot as u32) {
            return Err(format!("slot {slot} holds {} blocks but is not running", s.anon));
        }
        // Its leading blocks held by a pin count once, for the run.
        let by_pin = match s.pin {
            NIL => 0,
            pin => {
                let p = self.pinned.get(pin as usize).ok_or(format!("slot {slot} pins run {pin}, not one"))?;
                if s.released || !s.table.starts_with(&p.blocks) {
                    return Err(format!("slot {slot} pins run {pin}, whose blocks do not lead its table"));
                }
                t.pins[pin as usize] += 1;
                p.blocks.len()
            }
        };
        for (i, &b) in s.table.iter().enumerate() {
            let Some(block) = self.blocks.get(b as usize) else {
                return Err(format!("slot {slot} holds block {b}, which was never allocated"));
            };
            t.refs[b as usize] += u64::from(i >= by_pin);
            if t.anon[b as usize] {
                return Err(format!("slot {slot} holds block {b}, which a run of the free queue stands for"));
            }
            let holds = match s.hashes.get(i) {
                Some(h) => block.kind == SHARED && block.hash == *h,
                None if !s.released => block.kind == UNCACHED,
                None => block.hash == s.tag && block.kind as usize == i - s.hashes.len(),
            };
            if i < s.registered as usize && !holds {
                return Err(format!("slot {slot}: block {b} at position {i} does not hold the request's hash"));
            }
        }
        if !s.released {
            t.counted += s.registered.saturating_sub(s.hashes.len() as u32);
            if s.own.iter().any(|h| h.first != NIL) {
                return Err(format!("slot {slot} lists own blocks but was never preempted"));
            }
        }
        Ok(())
    }

    /// Each pinned run counts the slots pinning it and holds its blocks
    /// once; every block counts the references found.
    fn check_references(&self, t: &mut Tally) -> Result<(), String> {
        for (i, p) in self.pinned.iter().enumerate() {
            if p.pins != t.pins[i] {
                return Err(format!("pinned run {i} counts {} pins, {} slots hold it", p.pins, t.pins[i]));
            }
            if p.pins > 0 {
                for &b in &p.blocks {
                    *t.refs.get_mut(b as usize).ok_or("a pinned run holds a missing block")? += 1;
                }
            }
        }
        for (b, block) in self.blocks.iter().enumerate() {
            if !t.anon[b] && u64::from(block.refs) != t.refs[b] {
                return Err(format!("block {b} counts {} references but {} tables hold it", block.refs, t.refs[b]));
            }
        }
        Ok(())
    }

    /// The free queue's entries: runs, and blocks live (count 0, at the
    /// position they were queued at: one at most per block, positions are
    /// distinct) or stale.
    fn check_free_queue(&self, t: &mut Tally) -> Result<(), String> {
        for (at, &e) in (self.queue_base..).zip(&self.queue) {
            let count = e as u32;
            if e >= RUN {
                let (u, o) = run_parts(e);
                if u == 0 && o == 0 {
                    return Err("an empty run in the free queue".into());
                }
                t.orphans += o;
                t.in_runs += u64::from(u) + u64::from(o);
                continue;
            }
            match e >> 32 {
                0 => {
                    let block = self.blocks.get(count as usize).ok_or("the free queue holds a missing block")?;
                    match block.refs == 0 && block.queued_at == at {
                        true if t.anon[count as usize] => {
                            return Err(format!("block {count} is listed free and stands for a run"));
                        }
                        true => t.listed += 1,
                        false => t.stale += 1,
                    }
                    continue;
                }
                _ => return Err(format!("free queue entry {e:#x} is neither a block nor a run")),
            }
        }
        Ok(())
    }

    /// The pool's counters against what the parts before found: nothing
    /// unsettled, the runs' blocks and the spare labels, the blocks listed
    /// free, in use + free = total.
    fn check_counts(&self, t: &Tally) -> Result<(), String> {
        if self.unsettled_blocks != 0 || self.unsettled_fills != 0 {
            return Err(format!(
                "{} blocks taken and {} filled by count are not settled with their slots",
                self.unsettled_blocks, self.unsettled_fills
            ));
        }
        if t.in_runs != u64::from(self.in_runs) || t.in_runs + t.held_anon != self.spare.len() as u64 {
            return Err(format!(
                "the runs of the free queue count {} blocks ({} counted), slots hold {} \
                 without labels, {} labels are spare",
                t.in_runs,
                self.in_runs,
                t.held_anon,
                self.spare.len()
            ));
        }
        let zero = self.blocks.iter().zip(&t.anon).filter(|(b, a)| b.refs == 0 && !**a).count() as u32;
        if t.listed != self.listed || t.listed != zero || t.stale != self.stale {
            return Err(format!(
                "{} blocks listed free ({} stale entries), {} counted ({} stale), {zero} with no reference",
                t.listed, t.stale, self.listed, self.stale
            ));
        }
        if self.used() + self.free() != self.total {
            return Err("blocks in use + free != total".into());
        }
        Ok(())
    }

    /// Every hash's list: the blocks holding it, in registration order.
    /// Returns the blocks listed.
    fn check_hash_lists(&self) -> Result<u32, String> {
        let mut in_lists = 0u32;
        for (h, holders) in self.cache.iter() {
            let (mut cur, mut prev, mut order) = (holders.first, NIL, None);
            while cur != NIL {
                let block = self.blocks.get(cur as usize).ok_or("a hash maps to a missing block")?;
                if block.kind != SHARED || block.hash != h || block.same_prev != prev {
                    return Err(format!("hash {h:016x} lists block {cur}, which does not hold it"));
                }
                let at = block.registered_at;
                if order.is_some_and(|o| !registered_before(o, at)) {
                    return Err(format!("hash {h:016x}: block {cur} is listed out of registration order"));
                }
                order = Some(at);
                in_lists += 1;
                prev = cur;
                cur = block.same_next;
            }
            if prev != holders.last {
                return Err(format!("hash {h:016x}: the list does not end at its last block"));
            }
        }
        Ok(in_lists)
    }

    /// Each live request's lists of own blocks, by position, in
    /// registration order. Returns the blocks listed.
    fn check_own_lists(&self) -> Result<u32, String> {
        let mut in_lists = 0u32;
        for (slot, s) in self.slots.iter().enumerate() {
            for (pos, holders) in s.own.iter().enumerate() {
                let (mut cur, mut prev, mut order) = (holders.first, NIL, None);
                while cur != NIL {
                    let block = self.blocks.get(cur as usize).ok_or("an own list holds a missing block")?;
                    if block.hash != s.tag || block.kind as usize != pos || block.same_prev != prev {
                        return Err(format!(
                            "slot {slot}: own position {pos} lists block {cur}, which does not hold it"
                        ));
                    }
                    let at = block.registered_at;
                    if order.is_some_and(|o| !registered_before(o, at)) {
                        return Err(format!("slot {slot}: own position {pos} is out of registration order"));
                    }
                    order = Some(at);
                    in_lists += 1;
                    prev = cur;
                    cur = block.same_next;
                }
                if prev != holders.last {
                    return Err(format!("slot {slot}: own position {pos}'s list does not end at its last block"));
                }
            }
        }
        Ok(in_lists)
    }

    /// The cached blocks in no list: orphans (in runs, or with a label of
    /// content that is gone) and own blocks registered by count. Returns
    /// how many.
    fn check_orphans(&self, t: &Tally) -> Result<u32, String> {
        let live = |b: &Block| self.slots.get((b.hash >> 32) as usize).is_some_and(|s| s.tag == b.hash);
        let mut unlisted = t.orphans + t.counted;
        for (b, block) in self.blocks.iter().enumerate() {
            if block.kind == ORPHAN && !t.anon[b] {
                if live(block) {
                    return Err(format!("block {b} is an orphan, but of content still there"));
                }
                unlisted += 1;
            }
        }
        Ok(unlisted)
    }

    /// The memoised hit runs: each knows whether it is the pinned run of
    /// its index, and those of the current epoch name each hash's first
    /// holder. The hash index counts its entries.
    fn check_memo(&self) -> Result<(), String> {
        for (i, chain) in self.chains.iter().enumerate() {
            if chain.pinned_eq != (chain.blocks == self.pinned[i].blocks) {
                return Err(format!("memo entry {i} says its blocks are the pinned run's: {}", chain.pinned_eq));
            }
        }
        for chain in self.chains.iter().filter(|c| c.epoch == self.epoch) {
            for (&h, &b) in chain.hashes.iter().zip(&chain.blocks) {
                if self.cache.get(h).map(|holders| holders.first) != Some(b) {
                    return Err(format!("a memoised hit run says block {b} serves hash {h:016x}, it does not"));
                }
            }
        }
        let entries = self.cache.iter().count();
        if entries != self.cache.len() || (entries == 0) != self.cache.is_empty() {
            return Err(format!("the hash index counts {} entries but holds {entries}", self.cache.len()));
        }
        Ok(())
    }

    /// Every block holding a hash (or an own position) is listed once or
    /// counted, and the pool's count of cached blocks agrees.
    fn check_cached(&self, t: &Tally, in_lists: u32) -> Result<(), String> {
        let cached = t.orphans
            + t.counted
            + self.blocks.iter().zip(&t.anon).filter(|(b, a)| b.kind != UNCACHED && !**a).count() as u32;
        if in_lists != cached || cached != self.cached {
            return Err(format!("{cached} blocks hold a hash, {in_lists} are listed, {} counted", self.cached));
        }
        Ok(())
    }
}
