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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_finds_a_typo_and_ignores_strangers() {
        let names = ["h100-80gb", "h200", "a100-80gb"];
        assert_eq!(nearest("h100-80g", names), Some("h100-80gb"));
        assert_eq!(nearest("tpu-v5", names), None);
    }
}
