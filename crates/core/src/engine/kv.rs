//! The paged KV cache as a pool of equal blocks.
//!
//! No prefix caching is modelled, so a block's identity never matters: the
//! pool only counts. A request holds `ceil(tokens / block_size)` blocks.

/// Counts of free and used KV blocks; `used + free == total` always.
#[derive(Clone, Debug)]
pub struct KvBlocks {
    total: u32,
    free: u32,
}

impl KvBlocks {
    pub fn new(total: u32) -> Self {
        KvBlocks { total, free: total }
    }

    pub fn total(&self) -> u32 {
        self.total
    }

    pub fn free(&self) -> u32 {
        self.free
    }

    pub fn used(&self) -> u32 {
        self.total - self.free
    }

    /// Takes `n` blocks; the caller has checked that they are free.
    /// Checked in every build (one comparison): a release build once
    /// wrapped through a transient overdraft here and back, unseen.
    pub fn take(&mut self, n: u32) {
        assert!(n <= self.free, "taking {n} blocks with {} free", self.free);
        self.free -= n;
    }

    /// Returns `n` blocks to the pool.
    pub fn give_back(&mut self, n: u32) {
        assert!(n <= self.total - self.free, "freeing {n} blocks with {} used", self.total - self.free);
        self.free += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_plus_free_is_total() {
        let mut kv = KvBlocks::new(10);
        kv.take(4);
        assert_eq!((kv.used(), kv.free()), (4, 6));
        kv.give_back(3);
        assert_eq!(kv.used() + kv.free(), kv.total());
    }
}
