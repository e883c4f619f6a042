//! Hardware profiles: files in `hardware/`, with the shipped ones built in.
//!
//! `hardware: NAME` in a scenario is looked up as `hardware/NAME.yml` in the
//! scenario's directory and each directory above it, then among the profiles
//! compiled into the binary (copies of the repository's `hardware/`), so the
//! binary works from anywhere: the lookup of [`super::presets`].

use std::path::Path;

use super::ConfigError;
pub use super::presets::Found;
use super::presets::{Shelf, Unknown};
use crate::input::Kind;

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

/// The hardware profiles: `hardware/NAME.yml` ([`super::presets`]).
pub const SHELF: Shelf =
    Shelf { folder: "hardware", shipped_from: "hardware", builtin: BUILTIN, kind: Kind::Hardware, dots: true };

/// Finds profile `name` for a scenario in `scenario_file`.
pub fn find(name: &str, scenario_file: &Path) -> Result<Found, ConfigError> {
    SHELF.find(name, scenario_file)?.map_err(|Unknown { hint, known }| {
        ConfigError::new(
            scenario_file,
            "hardware",
            format!("unknown hardware profile `{name}`{hint}; known profiles: {}", known.join(", ")),
        )
    })
}

/// Every profile name reachable from this scenario, sorted.
pub fn known_names(scenario_file: &Path) -> Vec<String> {
    SHELF.known_names(scenario_file)
}
