//! NVIDIA AIConfigurator's measured kernel tables, as CSV, turned into a
//! hardware profile's `kernels:` (docs/calibration.md, "Measured kernel
//! tables").
//!
//! AIConfigurator keeps one table per operator, system and engine version
//! (`systems/data/<system>/<family>/<backend>/<version>/<table>.parquet`
//! since 2026-05; CSV with the same columns before, and as its
//! `tools/perf_database/parquet_textconv.py` prints them). Columns are read
//! by name, so their order and the optional ones (`power`, `backend`,
//! `implementation`, ...) do not matter. Latencies are milliseconds;
//! all-reduce message sizes are elements (2 bytes for `half` and
//! `bfloat16`).
//!
//! * `gemm_perf`: `gemm_dtype, m, n, k, latency`: one GEMM of `m` tokens,
//!   `n` outputs and `k` inputs on one GPU. `bfloat16` -> `bf16`, `fp8` ->
//!   `fp8`, `int4_wo` -> `int4`; other precisions are skipped.
//! * `custom_allreduce_perf`: `num_gpus, message_size, latency`, the
//!   engine's own all-reduce; rows whose `kernel_source` or `backend` ends
//!   in `_eager` are skipped (steps run as CUDA graphs).
//! * `nccl_perf`: `op_name, nccl_dtype, num_gpus, message_size, latency`;
//!   the `all_reduce` rows of `half`.
//!
//! A repeated key keeps its first row, as AIConfigurator's loader does.

use std::collections::BTreeMap;
use std::path::Path;

use llmsim_core::engine::cost::{Curve, GemmTable, KernelTables};
use llmsim_scenario::config::ConfigError;

/// Which table a CSV is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Table {
    Gemm,
    CustomAllreduce,
    Nccl,
}

/// A GEMM's outputs, inputs and precision.
type Shape = (u64, u64, &'static str);

/// The precision names of a GEMM table and llmsim's.
const GEMM_DTYPES: [(&str, &str); 3] = [("bfloat16", "bf16"), ("fp8", "fp8"), ("int4_wo", "int4")];

struct Csv<'a> {
    file: &'a Path,
    headers: Vec<String>,
    rows: Vec<(usize, csv::StringRecord)>,
}

impl Csv<'_> {
    fn col(&self, name: &str) -> Result<usize, ConfigError> {
        self.headers.iter().position(|h| h == name).ok_or_else(|| {
            ConfigError::new(self.file, "header", format!("no `{name}` column (columns: {})", self.headers.join(", ")))
        })
    }
}

fn read<'a>(text: &str, file: &'a Path) -> Result<Csv<'a>, ConfigError> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).comment(Some(b'#')).from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| ConfigError::new(file, "header", format!("unreadable CSV header: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    let mut rows = Vec::new();
    for (i, r) in reader.records().enumerate() {
        let r = r.map_err(|e| ConfigError::new(file, format!("row {}", i + 2), e.to_string()))?;
        let line = r.position().map_or(i + 2, |p| p.line() as usize);
        rows.push((line, r));
    }
    Ok(Csv { file, headers, rows })
}

fn number(c: &Csv<'_>, line: usize, r: &csv::StringRecord, col: usize, name: &str) -> Result<f64, ConfigError> {
    let v = r.get(col).unwrap_or("");
    v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0).ok_or_else(|| {
        ConfigError::new(c.file, format!("line {line}, column {name}"), format!("`{v}` is not a number >= 0"))
    })
}

/// Adds the rows of one AIConfigurator CSV to `out`.
pub fn import(text: &str, file: &Path, table: Table, out: &mut KernelTables) -> Result<usize, ConfigError> {
    let c = read(text, file)?;
    let latency = c.col("latency")?;
    let mut added = 0;
    match table {
        Table::Gemm => {
            let (dt, m, n, k) = (c.col("gemm_dtype")?, c.col("m")?, c.col("n")?, c.col("k")?);
            let mut curves: BTreeMap<Shape, Vec<(f64, f64)>> = BTreeMap::new();
            for (line, r) in &c.rows {
                let Some(&(_, dtype)) = GEMM_DTYPES.iter().find(|(a, _)| Some(*a) == r.get(dt)) else { continue };
                let whole = |col, name| -> Result<u64, ConfigError> {
                    let x = number(&c, *line, r, col, name)?;
                    (x.fract() == 0.0 && x >= 1.0 && x <= f64::from(u32::MAX)).then_some(x as u64).ok_or_else(|| {
                        ConfigError::new(
                            c.file,
                            format!("line {line}, column {name}"),
                            format!("{x} is not a whole count"),
                        )
                    })
                };
                let (mm, nn, kk) = (whole(m, "m")?, whole(n, "n")?, whole(k, "k")?);
                let ms = number(&c, *line, r, latency, "latency")?;
                let points = curves.entry((nn, kk, dtype)).or_default();
                if !points.iter().any(|(x, _)| *x == mm as f64) {
                    points.push((mm as f64, us(ms)));
                    added += 1;
                }
            }
            for ((n, k, dtype), mut points) in curves {
                if out.gemm.iter().any(|g| g.n == n && g.k == k && g.dtype == dtype) {
                    continue;
                }
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                out.gemm.push(GemmTable { n, k, dtype: dtype.into(), us: monotone(points) });
            }
        }
        Table::CustomAllreduce | Table::Nccl => {
            let (g, size) = (c.col("num_gpus")?, c.col("message_size")?);
            let filter = match table {
                Table::Nccl => Some((c.col("op_name")?, c.col("nccl_dtype")?)),
                _ => None,
            };
            let eager: Vec<usize> = ["kernel_source", "backend"].iter().filter_map(|n| c.col(n).ok()).collect();
            let mut curves: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
            for (line, r) in &c.rows {
                if let Some((op, dtype)) = filter
                    && (r.get(op) != Some("all_reduce") || r.get(dtype) != Some("half"))
                {
                    continue;
                }
                if eager.iter().any(|&e| r.get(e).is_some_and(|v| v.ends_with("_eager"))) {
                    continue;
                }
                let gpus = number(&c, *line, r, g, "num_gpus")?;
                if !(gpus.fract() == 0.0 && (2.0..=4096.0).contains(&gpus)) {
                    return Err(ConfigError::new(
                        c.file,
                        format!("line {line}, column num_gpus"),
                        format!("{gpus} is not a GPU count from 2 to 4096"),
                    ));
                }
                let bytes = number(&c, *line, r, size, "message_size")? * 2.0;
                let ms = number(&c, *line, r, latency, "latency")?;
                let points = curves.entry(gpus as u32).or_default();
                if !points.iter().any(|(x, _)| *x == bytes) {
                    points.push((bytes, us(ms)));
                    added += 1;
                }
            }
            for (gpus, mut points) in curves {
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                out.allreduce.entry(gpus).or_insert_with(|| monotone(points));
            }
        }
    }
    Ok(added)
}

/// Times made non-decreasing (a dip is noise), and none at zero: the
/// profile's reader refuses a time that is not positive.
fn monotone(points: Vec<(f64, f64)>) -> Curve {
    let mut top = 0.0f64;
    Curve {
        points: points
            .into_iter()
            .map(|(x, y)| {
                top = top.max(y).max(1e-3);
                (x, top)
            })
            .collect(),
    }
}

/// The YAML a hardware profile takes under `kernels:`.
pub fn render(t: &KernelTables) -> String {
    let mut out = String::from("kernels:\n");
    if let Some(s) = &t.source {
        out.push_str(&format!("  source: {}\n", llmsim_scenario::yaml::to_string(s).unwrap_or_default().trim()));
    }
    let pts = |c: &Curve| {
        let cells: Vec<String> = c.points.iter().map(|(x, y)| format!("[{x}, {y}]")).collect();
        format!("[{}]", cells.join(", "))
    };
    if !t.allreduce.is_empty() {
        out.push_str("  allreduce:\n");
        for (g, c) in &t.allreduce {
            out.push_str(&format!("    {g}: {}\n", pts(c)));
        }
    }
    if !t.gemm.is_empty() {
        out.push_str("  gemm:\n");
        for g in &t.gemm {
            out.push_str(&format!("    - {{ n: {}, k: {}, dtype: {}, us: {} }}\n", g.n, g.k, g.dtype, pts(&g.us)));
        }
    }
    out
}

/// Milliseconds as microseconds, to 6 significant digits (beyond what a
/// kernel timing resolves).
fn us(ms: f64) -> f64 {
    let us = ms * 1e3;
    format!("{us:.5e}").parse().unwrap_or(us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_and_allreduce_tables_convert_to_a_profile_that_reads_back() {
        let gemm = "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n\
            TRTLLM,1.3,NVIDIA H200,gemm,torch_flow,bfloat16,512,4096,4096,0.025344\n\
            TRTLLM,1.3,NVIDIA H200,gemm,torch_flow,bfloat16,1,4096,4096,0.013272\n\
            TRTLLM,1.3,NVIDIA H200,gemm,torch_flow,bfloat16,1,4096,4096,0.9\n\
            TRTLLM,1.3,NVIDIA H200,gemm,torch_flow,nvfp4,1,4096,4096,0.01\n\
            TRTLLM,1.3,NVIDIA H200,gemm,torch_flow,fp8,8192,4096,4096,0.27035\n";
        let ar = "framework,version,device,op_name,kernel_source,allreduce_dtype,num_gpus,message_size,latency,backend\n\
            vLLM,0.24.0,NVIDIA H200,all_reduce,vLLM_custom_graph,bfloat16,8,1048576,0.018106,vllm_graph\n\
            vLLM,0.24.0,NVIDIA H200,all_reduce,vLLM_custom_eager,bfloat16,8,1048576,0.0363,vllm_eager\n\
            vLLM,0.24.0,NVIDIA H200,all_reduce,vLLM_custom_graph,bfloat16,8,128,0.004,vllm_graph\n";
        let nccl = "framework,version,device,op_name,kernel_source,nccl_dtype,num_gpus,message_size,latency\n\
            TRTLLM,2.29.2,NVIDIA H200,all_gather,NCCL,half,2,256,0.00536\n\
            TRTLLM,2.29.2,NVIDIA H200,all_reduce,NCCL,half,4,65536,0.02145\n\
            TRTLLM,2.29.2,NVIDIA H200,all_reduce,NCCL,int8,4,65536,0.01\n";
        let mut t = KernelTables { source: Some("test: AIC tables".into()), ..KernelTables::default() };
        assert_eq!(import(gemm, Path::new("g.csv"), Table::Gemm, &mut t).unwrap(), 3);
        assert_eq!(import(ar, Path::new("a.csv"), Table::CustomAllreduce, &mut t).unwrap(), 2);
        assert_eq!(import(nccl, Path::new("n.csv"), Table::Nccl, &mut t).unwrap(), 1);
        // bf16 4096 x 4096: m 1 (the first row of it) and 512, sorted, in us
        let bf16 = t.gemm(4096, 4096, "bf16").unwrap();
        assert_eq!(bf16.points, vec![(1.0, 13.272), (512.0, 25.344)]);
        assert!(t.gemm(4096, 4096, "fp8").is_some());
        // elements x 2 bytes, ms x 1000; the eager row is skipped
        assert_eq!(t.allreduce[&8].points, vec![(256.0, 4.0), (2_097_152.0, 18.106)]);
        assert_eq!(t.allreduce[&4].points, vec![(131_072.0, 21.45)]);
        // what render writes is a hardware profile's kernels: that reads back the same
        let yaml = render(&t);
        let v: llmsim_scenario::yaml::Value = llmsim_scenario::yaml::from_str(&yaml).unwrap();
        let ck = llmsim_scenario::config::check::Check { file: Path::new("hw.yml") };
        let back = llmsim_scenario::config::kernels::parse(&ck, v.get("kernels").unwrap(), "kernels").unwrap();
        assert_eq!(back.gemm(4096, 4096, "bf16").unwrap().points, bf16.points);
        assert_eq!(back.allreduce, t.allreduce);
    }

    #[test]
    fn bad_rows_name_the_file_line_and_column() {
        let mut t = KernelTables::default();
        let e = import("gemm_dtype,m,n,k\nbfloat16,1,2,3\n", Path::new("g.csv"), Table::Gemm, &mut t).unwrap_err();
        assert!(e.to_string().contains("no `latency` column"), "{e}");
        let e = import("gemm_dtype,m,n,k,latency\nbfloat16,1.5,2,3,0.1\n", Path::new("g.csv"), Table::Gemm, &mut t)
            .unwrap_err();
        assert!(e.to_string().contains("g.csv") && e.to_string().contains("line 2, column m"), "{e}");
        let e =
            import("num_gpus,message_size,latency\n8,128,NaN\n", Path::new("a.csv"), Table::CustomAllreduce, &mut t)
                .unwrap_err();
        assert!(e.to_string().contains("column latency"), "{e}");
        let e =
            import("num_gpus,message_size,latency\n1,128,0.1\n", Path::new("a.csv"), Table::CustomAllreduce, &mut t)
                .unwrap_err();
        assert!(e.to_string().contains("GPU count"), "{e}");
    }
}
