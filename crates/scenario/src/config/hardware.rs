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
    ("b200", include_str!("../../../../hardware/b200.yml")),
    ("b300", include_str!("../../../../hardware/b300.yml")),
    ("gb200", include_str!("../../../../hardware/gb200.yml")),
    ("h20", include_str!("../../../../hardware/h20.yml")),
    ("h100-80gb", include_str!("../../../../hardware/h100-80gb.yml")),
    ("h200", include_str!("../../../../hardware/h200.yml")),
    ("l4", include_str!("../../../../hardware/l4.yml")),
    ("l40s", include_str!("../../../../hardware/l40s.yml")),
    ("mi300x", include_str!("../../../../hardware/mi300x.yml")),
    ("mi325x", include_str!("../../../../hardware/mi325x.yml")),
    ("mi355x", include_str!("../../../../hardware/mi355x.yml")),
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

#[cfg(test)]
mod tests {
    use crate::config::{ByGpus, Interconnect, load_scenario};

    /// A profile's figures as its file transcribes them from the sources its
    /// comments cite.
    struct Expected {
        name: &'static str,
        hbm_gib: f64,
        memory_bandwidth_gbps: f64,
        peak_tflops: f64,
        peak_tflops_fp8: Option<f64>,
        peak_tflops_fp4: Option<f64>,
        /// (GPUs, bus bandwidth GB/s, latency us).
        interconnect: &'static [(u32, f64, f64)],
    }

    const DATACENTER_PROFILES: &[Expected] = &[
        Expected {
            name: "b200",
            hbm_gib: 180.0,
            memory_bandwidth_gbps: 7700.0,
            peak_tflops: 2250.0,
            peak_tflops_fp8: Some(4500.0),
            peak_tflops_fp4: Some(9000.0),
            interconnect: &[(2, 443.0, 10.9), (4, 513.0, 16.5), (8, 495.0, 28.0)],
        },
        Expected {
            name: "b300",
            hbm_gib: 270.0,
            memory_bandwidth_gbps: 7700.0,
            peak_tflops: 2250.0,
            peak_tflops_fp8: Some(4500.0),
            peak_tflops_fp4: Some(14000.0),
            interconnect: &[(2, 450.0, 11.0), (4, 515.0, 16.2), (8, 497.0, 27.7)],
        },
        Expected {
            name: "gb200",
            hbm_gib: 186.0,
            memory_bandwidth_gbps: 8000.0,
            peak_tflops: 2500.0,
            peak_tflops_fp8: Some(5000.0),
            peak_tflops_fp4: Some(10000.0),
            interconnect: &[(2, 450.0, 11.7), (4, 516.0, 17.3)],
        },
        Expected {
            name: "h20",
            hbm_gib: 96.0,
            memory_bandwidth_gbps: 4000.0,
            peak_tflops: 148.0,
            peak_tflops_fp8: Some(296.0),
            peak_tflops_fp4: None,
            interconnect: &[(2, 242.0, 7.2), (4, 293.0, 10.7), (8, 298.0, 17.5)],
        },
        Expected {
            name: "mi300x",
            hbm_gib: 192.0,
            memory_bandwidth_gbps: 5300.0,
            peak_tflops: 1307.4,
            peak_tflops_fp8: Some(2614.9),
            peak_tflops_fp4: None,
            interconnect: &[(8, 288.0, 55.8)],
        },
        Expected {
            name: "mi325x",
            hbm_gib: 256.0,
            memory_bandwidth_gbps: 6000.0,
            peak_tflops: 1307.4,
            peak_tflops_fp8: Some(2614.9),
            peak_tflops_fp4: None,
            interconnect: &[(8, 288.0, 55.8)],
        },
        Expected {
            name: "mi355x",
            hbm_gib: 288.0,
            memory_bandwidth_gbps: 8000.0,
            peak_tflops: 2500.0,
            peak_tflops_fp8: Some(5000.0),
            peak_tflops_fp4: Some(10100.0),
            interconnect: &[(8, 344.0, 55.8)],
        },
    ];

    #[test]
    fn the_blackwell_h20_and_instinct_profiles_load_with_their_transcribed_figures() {
        // A scenario outside the repository, so the built-in copy is found.
        let dir = tempfile::tempdir().unwrap();
        for e in DATACENTER_PROFILES {
            let file = dir.path().join(format!("{}.yml", e.name));
            let text = format!(
                "hardware: {}\nmodel:\n  context_length: 4096\n  weights: {{ parameters_billions: 7 }}\n  \
                 kv_cache: {{ bytes_per_token: 524288 }}\n\
                 workload: {{ arrivals: {{ poisson: {{ rate: 1 }} }}, requests: 10, prompt_tokens: 100, output_tokens: 10 }}\n",
                e.name
            );
            std::fs::write(&file, text).unwrap();
            let s = load_scenario(&file).unwrap_or_else(|err| panic!("{}: {err}", e.name));
            let hw = &s.hardware;
            assert_eq!(hw.name, e.name);
            assert_eq!(hw.hbm_gib, e.hbm_gib, "{}", e.name);
            assert_eq!(hw.memory_bandwidth_gbps, e.memory_bandwidth_gbps, "{}", e.name);
            assert_eq!(hw.peak_tflops, e.peak_tflops, "{}", e.name);
            assert_eq!(hw.peak_tflops_fp8, e.peak_tflops_fp8, "{}", e.name);
            assert_eq!(hw.peak_tflops_fp4, e.peak_tflops_fp4, "{}", e.name);
            let by_gpus = |pick: fn(&(u32, f64, f64)) -> f64| {
                ByGpus::ByCount(e.interconnect.iter().map(|row| (row.0, pick(row))).collect())
            };
            let expected = Interconnect { bandwidth_gbps: by_gpus(|row| row.1), latency_us: by_gpus(|row| row.2) };
            assert_eq!(hw.interconnect.as_ref(), Some(&expected), "{}", e.name);
        }
    }
}
