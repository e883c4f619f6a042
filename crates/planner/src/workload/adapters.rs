//! LoRA adapters (`lora:`, docs/lora.md): which adapter each request
//! runs with, as a function of its id alone, as classes are
//! ([`super::classes`]): a draw by weight (the base model's
//! `base_weight` first, then the adapters') from word `2 * id` of its own
//! ChaCha8 stream of the workload's seed. The same request names the same
//! adapter whatever the arrivals, the lengths or the engine, and adding
//! adapters leaves every other draw as it was.

use rand_chacha::ChaCha8Rng;

use super::{dist, stream};
use llmsim_core::engine::RequestId;
use llmsim_scenario::config::Scenario;

/// The stream of the adapter draws ("lora").
const LORA_STREAM: u64 = 0x6c6f_7261;

/// The adapters of a scenario and how a request's is found.
#[derive(Clone, Debug)]
pub struct Adapters {
    /// Cumulative shares of the base model then each adapter, the last 1.
    cumulative: Vec<f64>,
    rng: ChaCha8Rng,
}

impl Adapters {
    /// The scenario's adapters, if it has `lora:`.
    pub fn of(s: &Scenario) -> Option<Adapters> {
        let lora = s.lora.as_ref()?;
        let weights: Vec<f64> =
            std::iter::once(lora.base_weight).chain(lora.adapters.iter().map(|a| a.weight)).collect();
        let total: f64 = weights.iter().sum();
        let mut sum = 0.0;
        let mut cumulative: Vec<f64> = weights
            .iter()
            .map(|w| {
                sum += w;
                sum / total
            })
            .collect();
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        Some(Adapters { cumulative, rng: stream(s.workload.seed, LORA_STREAM) })
    }

    /// The adapter request `id` runs with: `k + 1` for adapter `k`, 0 for
    /// the base model.
    pub fn adapter_of(&self, id: RequestId) -> u16 {
        let mut rng = self.rng.clone();
        rng.set_word_pos(u128::from(id) * 2);
        let u = dist::unit(&mut rng);
        // A zero weight (the base model's 0) has a zero-width share: `u`
        // below the next bound skips it.
        self.cumulative.partition_point(|&c| c <= u).min(self.cumulative.len() - 1) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(lora: &str, seed: u64) -> Scenario {
        let text = format!(
            "hardware: h100-80gb\nmodel: llama-3.1-8b\nworkload:\n  seed: {seed}\n  arrivals: {{poisson: {{rate: 1}}}}\n  requests: 10\n  prompt_tokens: 10\n  output_tokens: 10\nlora: {lora}\n"
        );
        let file = std::path::Path::new("t.yml");
        let raw = llmsim_scenario::config::parse_str(&text, file).unwrap_or_else(|e| panic!("{e}"));
        llmsim_scenario::config::validate::scenario(raw, file).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn shares_follow_the_weights_and_the_base_model_takes_its_own() {
        for seed in [3, 4, 5] {
            // Weights: base 1, lora-1 1 (k^-0), lora-2 1: a third each; the
            // standard error of a share of 30,000 is 0.0027 (81 requests).
            let a = Adapters::of(&scenario("{count: 2, base_weight: 1}", seed)).unwrap();
            let mut seen = [0u32; 3];
            for id in 0..30_000 {
                seen[usize::from(a.adapter_of(id))] += 1;
            }
            for n in seen {
                assert!((9_600..10_400).contains(&n), "seed {seed}: {seen:?}");
            }
            // No base weight: never 0; Zipf 1 over 2 adapters: 2/3 and 1/3.
            let z = Adapters::of(&scenario("{count: 2, zipf: 1}", seed)).unwrap();
            let first = (0..30_000).filter(|&id| z.adapter_of(id) == 1).count();
            assert!((0..30_000).all(|id| z.adapter_of(id) != 0));
            assert!((19_600..20_400).contains(&first), "seed {seed}: {first}");
        }
    }
}
