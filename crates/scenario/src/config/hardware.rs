//! Hardware profiles: files in `hardware/`, with the shipped ones built in.
//!
//! `hardware: NAME` in a scenario is looked up as `hardware/NAME.yml` in the
//! scenario's directory and each directory above it, then among the profiles
//! compiled into the binary (copies of the repository's `hardware/`), so the
//! binary works from anywhere.

use std::path::{Path, PathBuf};

use super::ConfigError;

/// The shipped profiles, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("a10g", include_str!("../../../../hardware/a10g.yml")),
    ("a100-40gb", include_str!("../../../../hardware/a100-40gb.yml")),
    ("a100-80gb", include_str!("../../../../hardware/a100-80gb.yml")),
    ("h100-80gb", include_str!("../../../../hardware/h100-80gb.yml")),
    ("h200", include_str!("../../../../hardware/h200.yml")),
    ("l4", include_str!("../../../../hardware/l4.yml")),
    ("l40s", include_str!("../../../../hardware/l40s.yml")),
    ("rtx-4090", include_str!("../../../../hardware/rtx-4090.yml")),
    ("rtx-pro-6000", include_str!("../../../../hardware/rtx-pro-6000.yml")),
];

/// Where a profile's text came from.
pub struct Found {
    pub file: PathBuf,
    pub text: String,
}

/// Finds profile `name` for a scenario in `scenario_dir`.
pub fn find(name: &str, scenario_file: &Path) -> Result<Found, ConfigError> {
    let valid_name =
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid_name {
        for dir in search_dirs(scenario_file) {
            let file = dir.join(format!("{name}.yml"));
            if super::is_a_file(&file) {
                let text = crate::input::read_text(crate::input::Kind::Hardware, &file)?;
                return Ok(Found { file, text });
            }
        }
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            return Ok(Found {
                file: PathBuf::from(format!("<built-in hardware/{name}.yml>")),
                text: (*text).to_string(),
            });
        }
    }
    let known = known_names(scenario_file);
    let hint = llmsim_core::util::nearest(name, known.iter().map(String::as_str))
        .map(|n| format!(" (did you mean `{n}`?)"))
        .unwrap_or_default();
    Err(ConfigError::new(
        scenario_file,
        "hardware",
        format!("unknown hardware profile `{name}`{hint}; known profiles: {}", known.join(", ")),
    ))
}

/// `hardware/` in the scenario's directory and every directory above it.
fn search_dirs(scenario_file: &Path) -> Vec<PathBuf> {
    let start = scenario_file.parent().map(Path::to_path_buf).unwrap_or_default();
    let start = std::fs::canonicalize(&start).unwrap_or(start);
    start.ancestors().map(|d| d.join("hardware")).collect()
}

/// Every profile name reachable from this scenario, sorted.
pub fn known_names(scenario_file: &Path) -> Vec<String> {
    super::yml_names(BUILTIN.iter().map(|(n, _)| *n), &search_dirs(scenario_file))
}
