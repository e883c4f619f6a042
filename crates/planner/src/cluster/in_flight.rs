//! What a fleet remembers of each request while it is in flight, by id,
//! forgotten when it ends: memory flat in the requests of a run (a day of
//! a hundred million of them), as the collector's summary mode keeps it.
//!
//! Ids come in order (0, 1, 2, ...: a source numbers its requests as they
//! arrive), so the requests in flight are a window `base..base + len` of
//! ids: a deque, its front popped while its requests have ended.

use std::collections::VecDeque;

use llmsim_core::engine::RequestId;

/// A value per request in flight.
#[derive(Clone, Debug)]
pub struct InFlight<T> {
    /// The id of `items[0]`.
    base: u64,
    /// `None`: ended, or never told.
    items: VecDeque<Option<T>>,
}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        InFlight { base: 0, items: VecDeque::new() }
    }
}

impl<T: Copy> InFlight<T> {
    /// Request `id` is in flight with `value`. An id below every one
    /// remembered (already ended, or passed over) is not remembered.
    pub fn insert(&mut self, id: RequestId, value: T) {
        let Some(i) = id.checked_sub(self.base) else { return };
        let i = usize::try_from(i).unwrap_or(usize::MAX);
        if i >= self.items.len() {
            self.items.resize(i + 1, None);
        }
        self.items[i] = Some(value);
    }

    pub fn get(&self, id: RequestId) -> Option<T> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        self.items.get(i).copied().flatten()
    }

    pub fn get_mut(&mut self, id: RequestId) -> Option<&mut T> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        self.items.get_mut(i)?.as_mut()
    }

    /// Request `id` ended: its value, which is forgotten.
    pub fn end(&mut self, id: RequestId) -> Option<T> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        let value = self.items.get_mut(i)?.take();
        while self.items.front().is_some_and(Option::is_none) {
            self.items.pop_front();
            self.base += 1;
        }
        value
    }

    /// Ids remembered, ended ones between live ones included.
    pub fn span(&self) -> usize {
        self.items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_requests_are_forgotten_from_the_front() {
        let mut f = InFlight::default();
        for id in 0..5u64 {
            f.insert(id, id * 10);
        }
        assert_eq!(f.end(1), Some(10));
        assert_eq!(f.span(), 5, "1 ended behind 0, which is in flight");
        assert_eq!(f.end(0), Some(0));
        assert_eq!(f.span(), 3, "0 and 1 popped");
        assert_eq!((f.get(0), f.get(1), f.get(2)), (None, None, Some(20)));
        assert_eq!(f.end(0), None, "ended twice");
        // An id passed over (never told) is popped with the ended ones.
        f.insert(7, 70);
        for id in [2, 3, 4] {
            f.end(id);
        }
        assert_eq!(f.span(), 1, "5 and 6 were never told: only 7 is left");
        *f.get_mut(7).unwrap() += 1;
        assert_eq!(f.end(7), Some(71));
        assert_eq!(f.span(), 0);
        // Below the window: not remembered.
        f.insert(3, 1);
        assert_eq!(f.get(3), None);
    }
}
