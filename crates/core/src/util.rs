//! Small helpers shared by the config, the CLI and the reports: typo
//! suggestions, the short forms numbers and text take in messages and
//! tables, and the pretty JSON of every file llmsim writes. This
//! module is the bottom layer: it imports nothing from the crate.

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

/// A SplitMix64 stream: the seeded choices of the server's made-up
/// content (scripted variants, tool-call arguments, structured output),
/// the same on every machine and Rust release.
pub struct Stream(pub u64);

impl Stream {
    pub fn draw(&mut self) -> u64 {
        let z = self.0;
        self.0 = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(z)
    }

    /// A value in `[0, n)` (multiply-shift; the bias is below 2^-50 for
    /// the n used); 0 when `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.draw()) * n as u128) >> 64) as usize
    }
}

/// The proleptic Gregorian date `(year, month, day)` of a day counted
/// from 1970-01-01 (Howard Hinnant's days-to-civil algorithm).
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// FNV-1a 64 over `bytes`: the one string hash of the crate (content
/// names, token ids, session keys, call ids), spelled out so it is the same
/// on every machine and Rust release.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// A uniform number in [0, 1) from a hash's top 53 bits.
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A file or folder that could not be read, written or created:
/// `cannot write results/README.md: <the OS's reason>`.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", .path.display())]
pub struct FileError {
    /// `read`, `write`, `create`.
    pub action: &'static str,
    pub path: std::path::PathBuf,
    pub source: std::io::Error,
}

impl FileError {
    pub fn new(action: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        FileError { action, path: path.to_path_buf(), source }
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A real number as a message shows it: short, never 300 digits.
pub fn short_float(v: f64) -> String {
    if v.is_nan() {
        ".nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { ".inf".into() } else { "-.inf".into() }
    } else if v != 0.0 && (v.abs() >= 1e15 || v.abs() < 1e-6) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A whole number as a message shows it: digits up to 20 of them, else
/// scientific notation.
pub fn short_int(v: i128) -> String {
    let s = v.to_string();
    if s.len() <= 21 { s } else { format!("{:e}", v as f64) }
}

/// Text for a message: at most 40 characters, the rest counted.
pub fn short_text(s: &str) -> String {
    const KEEP: usize = 40;
    let n = s.chars().count();
    if n <= KEEP {
        s.to_string()
    } else {
        let head: String = s.chars().take(KEEP).collect();
        format!("{head}... ({n} characters)")
    }
}

/// Pretty JSON with a trailing newline: every JSON file llmsim writes.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// An optional figure with the given decimals, or `-`.
pub fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(121_744), "121,744");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }

    #[test]
    fn opt_is_a_dash_without_a_figure() {
        assert_eq!(opt(None, 2), "-");
        assert_eq!(opt(Some(1.236), 2), "1.24");
    }

    #[test]
    fn to_json_is_pretty_and_ends_with_a_newline() {
        assert_eq!(to_json(&serde_json::json!({"a": [1]})), "{\n  \"a\": [\n    1\n  ]\n}\n");
    }

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
