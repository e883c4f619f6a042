//! Small helpers shared by the config, the CLI and the reports.

/// The candidate closest to `word` by edit distance, if it is close enough
/// to be a plausible typo (at most a third of the word's length, min 2).
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)))
        .map(|(_, c)| c)
}

/// The SplitMix64 finaliser: spreads every input bit over the whole word.
/// Spelled out (not std's hasher, which may change between releases) so
/// seeded choices are the same on every machine and Rust release.
pub fn finalise(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One SplitMix64 step from state `z`: the finaliser of `z` plus the
/// golden-ratio increment.
pub fn splitmix(z: u64) -> u64 {
    finalise(z.wrapping_add(0x9e37_79b9_7f4a_7c15))
}

/// A uniform number in [0, 1) from a hash's top 53 bits.
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_gives_the_reference_streams_first_outputs() {
        // SplitMix64's published first outputs from state 0 and from
        // state 1234567 (Vigna's splitmix64.c).
        assert_eq!(splitmix(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix(1234567), 6_457_827_717_110_365_317);
        assert_eq!(unit(0), 0.0);
        assert_eq!(unit(u64::MAX), 1.0 - 2f64.powi(-53));
    }

    #[test]
    fn nearest_finds_a_typo_and_ignores_strangers() {
        let names = ["h100-80gb", "h200", "a100-80gb"];
        assert_eq!(nearest("h100-80g", names), Some("h100-80gb"));
        assert_eq!(nearest("tpu-v5", names), None);
    }
}
