//! `kernels:` in a hardware profile: measured operator times the
//! per-operator cost form interpolates (docs/engine.md, "Measured kernel
//! tables"). Read by hand from the YAML value so every bad row is named:
//! the file, the table, the row and the field.
//!
//! ```yaml
//! kernels:
//!   source: where the figures were measured
//!   allreduce:                 # one all-reduce, by GPU count: [message bytes, microseconds]
//!     8: [[0, 14.0], [1024, 15.0], [2048, 16.0]]
//!   gemm:                      # one GEMM of n outputs and k inputs (per GPU): [tokens, microseconds]
//!     - { n: 10240, k: 8192, dtype: fp8, us: [[1, 21.0], [64, 23.5], [512, 60.1]] }
//! ```
//!
//! Times are made non-decreasing as read (a dip is measurement noise).

use std::collections::BTreeMap;

use crate::config::check::Check;
use crate::config::{ConfigError, describe_value};
use crate::yaml::Value;
use llmsim_core::engine::cost::{Curve, GemmTable, KernelTables};

/// The precisions a measured GEMM may name.
pub const DTYPES: [&str; 3] = ["bf16", "fp8", "int4"];

/// Reads `kernels:` at key path `path` (e.g. `kernels` or `hardware.kernels`).
pub fn parse(ck: &Check, value: &Value, path: &str) -> Result<KernelTables, ConfigError> {
    let Value::Mapping(map) = value else {
        return Err(
            ck.err(path, format!("expected a mapping with allreduce and/or gemm; got {}", describe_value(value)))
        );
    };
    let mut out = KernelTables::default();
    for (k, v) in map {
        let name = k.as_str().unwrap_or("");
        let here = format!("{path}.{name}");
        match name {
            "source" => {
                out.source = Some(
                    v.as_str()
                        .ok_or_else(|| ck.err(&here, format!("expected text; got {}", describe_value(v))))?
                        .into(),
                );
            }
            "allreduce" => out.allreduce = allreduce(ck, v, &here)?,
            "gemm" => out.gemm = gemms(ck, v, &here)?,
            _ => {
                return Err(ck.err(&here, "unknown key: a kernels table has source, allreduce and gemm"));
            }
        }
    }
    Ok(out)
}

fn allreduce(ck: &Check, v: &Value, path: &str) -> Result<BTreeMap<u32, Curve>, ConfigError> {
    let Value::Mapping(m) = v else {
        return Err(ck.err(
            path,
            format!("expected a mapping by GPU count ({{8: [[bytes, us], ...]}}); got {}", describe_value(v)),
        ));
    };
    let mut out = BTreeMap::new();
    for (g, rows) in m {
        let gpus = g.as_u64().filter(|g| (2..=4096).contains(g)).ok_or_else(|| {
            ck.err(path, format!("a GPU count is a whole number from 2 to 4096; got {}", describe_value(g)))
        })?;
        let here = format!("{path}.{gpus}");
        out.insert(gpus as u32, curve(ck, rows, &here, "message bytes", 0.0)?);
    }
    Ok(out)
}

fn gemms(ck: &Check, v: &Value, path: &str) -> Result<Vec<GemmTable>, ConfigError> {
    let Value::Sequence(list) = v else {
        return Err(ck.err(path, format!("expected a list of {{n, k, dtype, us}}; got {}", describe_value(v))));
    };
    let mut out: Vec<GemmTable> = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let here = format!("{path}[{i}]");
        let Value::Mapping(m) = entry else {
            return Err(ck.err(&here, format!("expected {{n, k, dtype, us}}; got {}", describe_value(entry))));
        };
        for key in m.keys() {
            let k = key.as_str().unwrap_or("");
            if !["n", "k", "dtype", "us"].contains(&k) {
                return Err(ck.err(&format!("{here}.{k}"), "unknown key: a measured GEMM has n, k, dtype and us"));
            }
        }
        let whole = |key: &str| -> Result<u64, ConfigError> {
            let v = m.get(key).ok_or_else(|| ck.err(&format!("{here}.{key}"), "missing: the GEMM's shape needs it"))?;
            v.as_u64().filter(|x| *x >= 1 && u32::try_from(*x).is_ok()).ok_or_else(|| {
                ck.err(
                    &format!("{here}.{key}"),
                    format!("expected a whole number from 1 to 4,294,967,295; got {}", describe_value(v)),
                )
            })
        };
        let (n, k) = (whole("n")?, whole("k")?);
        let dtype = match m.get("dtype") {
            Some(Value::String(s)) if DTYPES.contains(&s.as_str()) => s.clone(),
            Some(other) => {
                return Err(ck.err(
                    &format!("{here}.dtype"),
                    format!("expected one of {}; got {}", DTYPES.join(", "), describe_value(other)),
                ));
            }
            None => return Err(ck.err(&format!("{here}.dtype"), format!("missing: one of {}", DTYPES.join(", ")))),
        };
        let rows = m.get("us").ok_or_else(|| ck.err(&format!("{here}.us"), "missing: [[tokens, us], ...]"))?;
        let us = curve(ck, rows, &format!("{here}.us"), "tokens", 1.0)?;
        if out.iter().any(|g| g.n == n && g.k == k && g.dtype == dtype) {
            return Err(ck.err(&here, format!("a second table for n {n}, k {k}, {dtype}: give each shape once")));
        }
        out.push(GemmTable { n, k, dtype, us });
    }
    Ok(out)
}

/// `[[x, us], ...]`: `x` at least `min_x`, strictly increasing; times
/// positive and finite.
fn curve(ck: &Check, v: &Value, path: &str, x_name: &str, min_x: f64) -> Result<Curve, ConfigError> {
    let Value::Sequence(rows) = v else {
        return Err(ck.err(path, format!("expected a list of [{x_name}, us] rows; got {}", describe_value(v))));
    };
    if rows.is_empty() {
        return Err(ck.err(path, format!("an empty table: give at least one [{x_name}, us] row")));
    }
    let mut points: Vec<(f64, f64)> = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        let here = format!("{path}, row {}", i + 1);
        let pair = match row {
            Value::Sequence(p) if p.len() == 2 => (p[0].as_f64().filter(|_| p[0].is_number()), p[1].as_f64()),
            _ => (None, None),
        };
        let (Some(x), Some(y)) = pair else {
            return Err(ck.err(&here, format!("expected [{x_name}, us], two numbers; got {}", describe_value(row))));
        };
        if !x.is_finite() || x < min_x || x > 1e15 {
            return Err(ck.err(&here, format!("{x_name} {x} is outside [{min_x}, 1e15]")));
        }
        if !y.is_finite() || y <= 0.0 || y > 1e9 {
            return Err(ck.err(&here, format!("the time {y} us is not a positive number of microseconds up to 1e9")));
        }
        if let Some(&(px, _)) = points.last()
            && x <= px
        {
            return Err(ck.err(
                &here,
                format!("{x_name} {x} does not come after the row before ({px}): sort the rows by {x_name}, each once"),
            ));
        }
        points.push((x, y));
    }
    // A larger message or batch never takes less time; a dip in measured
    // times is noise (apex_plus's A100 table has one), so each time is
    // raised to the largest before it. The cost then grows with the step,
    // which the stretches rely on.
    let mut top = 0.0f64;
    for p in &mut points {
        top = top.max(p.1);
        p.1 = top;
    }
    Ok(Curve { points })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read(yaml: &str) -> Result<KernelTables, String> {
        let v: Value = crate::yaml::from_str(yaml).map_err(|e| e.to_string())?;
        parse(&Check { file: Path::new("hw.yml") }, &v, "kernels").map_err(|e| e.to_string())
    }

    #[test]
    fn a_good_table_reads_and_interpolates() {
        let k = read(
            "{source: test, allreduce: {8: [[0, 14], [1024, 15], [4096, 21]]}, \
             gemm: [{n: 10, k: 20, dtype: fp8, us: [[1, 5], [65, 9]]}]}",
        )
        .unwrap();
        let c = &k.allreduce[&8];
        // below the first point: its time; between: linear; beyond: the last slope
        assert_eq!(c.at(0.0), 14.0);
        assert_eq!(c.at(512.0), 14.5);
        assert_eq!(c.at(2048.0), 17.0); // 15 + (21 - 15) * 1024 / 3072
        assert_eq!(c.at(7168.0), 27.0); // 21 + 2 us per 1024 bytes
        let g = k.gemm(10, 20, "fp8").unwrap();
        assert_eq!(g.at(33.0), 7.0);
        assert!(k.gemm(10, 20, "bf16").is_none());
        // a dip is raised to the time before it
        let dip = read("{allreduce: {4: [[0, 10], [1024, 27], [2048, 25], [4096, 30]]}}").unwrap();
        assert_eq!(dip.allreduce[&4].points[2], (2048.0, 27.0));
    }

    #[test]
    fn bad_rows_are_named() {
        let cases = [
            ("{allreduce: {8: [[0, 14], [0, 15]]}}", "kernels.allreduce.8, row 2"),
            ("{allreduce: {8: [[1024, 14], [512, 15]]}}", "sort the rows"),
            ("{allreduce: {8: [[0, .nan]]}}", "not a positive number"),
            ("{allreduce: {8: [[0, -3]]}}", "not a positive number"),
            ("{allreduce: {8: [[.nan, 3]]}}", "outside"),
            ("{allreduce: {8: []}}", "an empty table"),
            ("{allreduce: {1: [[0, 3]]}}", "GPU count"),
            ("{allreduce: {8: [[0, 3, 4]]}}", "two numbers"),
            ("{gemm: [{n: 10, dtype: fp8, us: [[1, 5]]}]}", "kernels.gemm[0].k: missing"),
            ("{gemm: [{n: 10, k: 2, dtype: fp16, us: [[1, 5]]}]}", "expected one of bf16, fp8, int4"),
            ("{gemm: [{n: 10, k: 2, dtype: fp8}]}", "kernels.gemm[0].us: missing"),
            ("{gemm: [{n: 10, k: 2, dtype: fp8, us: [[0, 5]]}]}", "tokens 0 is outside"),
            (
                "{gemm: [{n: 1, k: 2, dtype: fp8, us: [[1, 5]]}, {n: 1, k: 2, dtype: fp8, us: [[1, 5]]}]}",
                "a second table",
            ),
            ("{gemm: [{n: 1, k: 2, dtype: fp8, us: [[1, 5]], m: 3}]}", "unknown key"),
            ("{gemms: []}", "unknown key"),
            ("[1, 2]", "expected a mapping"),
        ];
        for (yaml, want) in cases {
            let e = read(yaml).unwrap_err();
            assert!(e.contains(want), "{yaml}: {e}");
            assert!(e.contains("hw.yml"), "{e}");
        }
    }
}
