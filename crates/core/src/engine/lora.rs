//! LoRA adapters on one base model, as vLLM serves them with
//! `--enable-lora` (docs/lora.md).
//!
//! A request names an adapter (or none: the base model). The engine holds
//! `max_loras` GPU slots; a step may use at most that many distinct
//! adapters (vLLM V1's `Scheduler.schedule` skips a waiting request whose
//! adapter would be one too many, and admits the ones behind it that
//! fit). Before a step runs, every adapter it uses that is not in a slot
//! is copied there from host memory, into a free slot or over the least
//! recently used one the step does not use (vLLM's
//! `LRUCacheWorkerLoRAManager`); the step waits for the copies. The
//! adapters' own math (punica's batched shrink and expand kernels) costs
//! the step a roofline term: `max(tokens x token_s, adapters x
//! slot_read_s)`.

/// The LoRA figures the engine runs with, derived by the scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Lora {
    /// GPU slots: the most distinct adapters a step may use (`--max-loras`).
    pub max_loras: u32,
    /// Seconds to copy adapter `i` (a request's `lora` is `i + 1`) from
    /// host memory into a slot.
    pub load_s: Vec<f64>,
    /// Seconds of adapter math a token that uses an adapter adds (FLOPs
    /// at the slots' rank over the compute peak).
    pub token_s: f64,
    /// Seconds to read one slot's weights (at the slots' rank) once in a
    /// step that uses it.
    pub slot_read_s: f64,
}

impl Lora {
    /// The adapters' share of a step in which `tokens` tokens use an
    /// adapter and `adapters` distinct adapters are used.
    pub fn step_s(&self, tokens: u64, adapters: usize) -> f64 {
        (tokens as f64 * self.token_s).max(adapters as f64 * self.slot_read_s)
    }
}

/// The GPU slots: which adapter each holds and the step that last used it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slots {
    /// `(adapter, last step used)`, at most `max_loras` entries.
    resident: Vec<(u16, u64)>,
    /// Adapters copied in by the last [`Slots::activate`].
    pub(crate) loaded: Vec<u16>,
}

impl Slots {
    /// Makes every adapter of `used` (distinct, at most `cap`) resident
    /// for step `step`: the missing ones take a free slot, else the slot
    /// whose adapter was used longest ago among those `used` leaves out.
    /// The copied adapters are left in [`Slots::loaded`], in `used` order.
    pub(crate) fn activate(&mut self, used: &[u16], step: u64, cap: usize) {
        self.loaded.clear();
        for &a in used {
            match self.resident.iter_mut().find(|(r, _)| *r == a) {
                Some(entry) => entry.1 = step,
                None => {
                    self.loaded.push(a);
                    if self.resident.len() < cap {
                        self.resident.push((a, step));
                        continue;
                    }
                    // `used` holds at most `cap` adapters and this one is not
                    // resident, so some slot's adapter is not in `used`.
                    let oldest = (0..self.resident.len())
                        .filter(|&i| !used.contains(&self.resident[i].0))
                        .min_by_key(|&i| (self.resident[i].1, self.resident[i].0));
                    if let Some(i) = oldest {
                        self.resident[i] = (a, step);
                    }
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn resident(&self) -> Vec<u16> {
        let mut r: Vec<u16> = self.resident.iter().map(|e| e.0).collect();
        r.sort_unstable();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_fill_then_evict_the_least_recently_used_outside_the_step() {
        let mut s = Slots::default();
        s.activate(&[1, 2], 0, 2);
        assert_eq!(s.loaded, vec![1, 2]);
        s.activate(&[2], 1, 2); // 2 touched at step 1; 1 last used at 0
        assert!(s.loaded.is_empty());
        s.activate(&[3], 2, 2); // evicts 1 (older), keeps 2
        assert_eq!((s.loaded.clone(), s.resident()), (vec![3], vec![2, 3]));
        // 2 was used at 1, 3 at 2: a step using 3 and 4 evicts 2, never 3.
        s.activate(&[4, 3], 3, 2);
        assert_eq!((s.loaded.clone(), s.resident()), (vec![4], vec![3, 4]));
    }

    #[test]
    fn a_step_is_priced_by_its_larger_term() {
        let l = Lora { max_loras: 2, load_s: vec![0.0], token_s: 1e-6, slot_read_s: 5e-5 };
        assert_eq!(l.step_s(10, 1), 5e-5); // memory: one slot read
        assert!((l.step_s(100, 1) - 1e-4).abs() < 1e-15); // compute: 100 x 1 us
        assert_eq!(l.step_s(0, 0), 0.0);
    }
}
