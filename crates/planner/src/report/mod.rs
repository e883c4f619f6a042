//! Exporters: pure functions from results to bytes, and ([`stream`]) the
//! steps CSV as an observer writing each row to a writer as its step
//! ends. The CLI decides where the bytes go.

pub mod cluster;
pub mod csv_out;
pub mod stream;
pub mod summary;

/// Pretty JSON with a trailing newline.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// `1234567` as `1,234,567` (it lives in [`llmsim_core::util`], below the config).
pub use llmsim_core::util::thousands;

/// An optional millisecond figure with the given decimals, or `-`.
pub fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_groups_digits() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(121_744), "121,744");
        assert_eq!(super::thousands(1_000_000), "1,000,000");
    }
}
