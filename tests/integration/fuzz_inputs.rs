//! Fuzzing the input layer (issue 34; docs/development.md, "Fuzzing"):
//! every kind of file a command reads, given as it should be, cut short,
//! as garbage, as binary, empty, one byte past its limit, or as a folder,
//! and the measured files mutated, each through the binary under the
//! fuzz guard. Every case ends with exit 0, 1 (a comparison that fails)
//! or 2, never a panic or a kill; a refusal names the file, and a file
//! past its limit is refused with the limit of its kind.

use std::path::{Path, PathBuf};

use llmsim_scenario::input::Kind;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::fuzz::{LEAKS, cases, mutate, seed};
use crate::support::*;

/// One kind of file and a command that reads it.
struct Target {
    kind: Kind,
    /// The file under test, relative to the case's folder.
    file: &'static str,
    /// A valid file of the kind.
    valid: fn() -> Vec<u8>,
    /// Writes what the command needs beside the file; gives its arguments.
    setup: fn(&Path) -> Vec<String>,
}

fn copy(d: &Path, name: &str, from: &str) -> PathBuf {
    write(d, name, &std::fs::read_to_string(repo(from)).unwrap())
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(repo(rel)).unwrap()
}

/// An `llmsim run --json` result.
fn made_prediction() -> Vec<u8> {
    let d = tempdir();
    prediction(d.path());
    std::fs::read(d.path().join("pred.json")).unwrap()
}

/// A shard of a small sweep (`llmsim sweep --shard 0/1`).
fn made_shard() -> Vec<u8> {
    let d = tempdir();
    let out = d.path().join("s0.json");
    TestCommand::new(&[
        "sweep",
        "scenarios/sweeps/rate-by-budget.yml",
        "--set",
        "workload.requests=20",
        "--shard",
        "0/1",
    ])
    .arg("-o")
    .arg(&out)
    .ok();
    std::fs::read(out).unwrap()
}

/// An AIConfigurator GEMM table (`llmsim kernels --gemm`).
fn gemm_table() -> Vec<u8> {
    b"framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n\
      TRTLLM,1.3,NVIDIA H200,gemm,torch_flow,bfloat16,512,4096,4096,0.025344\n\
      TRTLLM,1.3,NVIDIA H200,gemm,torch_flow,bfloat16,1,4096,4096,0.013272\n"
        .to_vec()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `scenarios/base.yml` with its `hardware:` line replaced.
fn base_with(d: &Path, line: &str) {
    let base = std::fs::read_to_string(repo("scenarios/base.yml")).unwrap();
    let (start, end) = (base.find("hardware:").unwrap(), base.find("model:").unwrap());
    write(d, "s.yml", &format!("{}{line}\n{}", &base[..start], &base[end..]));
}

/// A prediction to compare measured files with (`llmsim run --json`).
fn prediction(d: &Path) {
    let pred = d.join("pred.json");
    TestCommand::new(&["run", "scenarios/base.yml", "-q", "--set", "workload.requests=50", "--json"]).arg(&pred).ok();
}

const TARGETS: &[Target] = &[
    Target {
        kind: Kind::Scenario,
        file: "s.yml",
        valid: || read("scenarios/base.yml"),
        setup: |_| args(&["explain", "s.yml"]),
    },
    Target {
        kind: Kind::Hardware,
        file: "hardware/fuzzhw.yml",
        valid: || read("hardware/h100-80gb.yml"),
        setup: |d| {
            base_with(d, "hardware: fuzzhw");
            args(&["explain", "s.yml"])
        },
    },
    Target {
        kind: Kind::Calibration,
        file: "c.yml",
        valid: || read("hardware/calibrations/h100-vllm.yml"),
        setup: |d| {
            base_with(d, "hardware: h100-80gb\ncalibration: c.yml");
            args(&["explain", "s.yml"])
        },
    },
    Target {
        kind: Kind::Model,
        file: "models/fuzzm.yml",
        valid: || read("scenarios/models/llama-3.1-8b.yml"),
        setup: |d| {
            let text = std::fs::read_to_string(repo("scenarios/deployments/llama-3.1-8b-h100.yml")).unwrap();
            write(d, "s.yml", &text.replace("model: llama-3.1-8b", "model: fuzzm"));
            args(&["explain", "s.yml"])
        },
    },
    Target {
        kind: Kind::HfConfig,
        file: "config.json",
        valid: || read("scenarios/deployments/mixtral-8x7b/config.json"),
        setup: |d| {
            let text = std::fs::read_to_string(repo("scenarios/deployments/mixtral-8x7b-tp2-h100.yml")).unwrap();
            write(d, "s.yml", &text.replace("mixtral-8x7b/config.json", "config.json"));
            args(&["explain", "s.yml"])
        },
    },
    Target {
        kind: Kind::Sweep,
        file: "sw.yml",
        valid: || read("scenarios/sweeps/rate-by-budget.yml"),
        setup: |d| {
            copy(d, "chat-h100.yml", "scenarios/sweeps/chat-h100.yml");
            args(&["sweep", "sw.yml", "--set", "workload.requests=40"])
        },
    },
    Target {
        kind: Kind::Trace,
        file: "trace-replay.csv",
        valid: || read("scenarios/workloads/trace-replay.csv"),
        setup: |d| {
            copy(d, "s.yml", "scenarios/workloads/trace-replay.yml");
            args(&["run", "-q", "s.yml"])
        },
    },
    Target {
        kind: Kind::Trace,
        file: "mooncake-trace.jsonl",
        valid: || read("scenarios/workloads/mooncake-trace.jsonl"),
        setup: |d| {
            copy(d, "s.yml", "scenarios/workloads/mooncake.yml");
            args(&["run", "-q", "s.yml"])
        },
    },
    Target {
        kind: Kind::Measured,
        file: "m.json",
        valid: || read("tests/integration/fixtures/vllm-bench-serve.json"),
        setup: |d| {
            prediction(d);
            args(&["diff", "pred.json", "m.json"])
        },
    },
    Target {
        kind: Kind::Measured,
        file: "m.json",
        valid: || read("tests/integration/fixtures/vllm-bench-serve-append.json"),
        setup: |d| {
            prediction(d);
            args(&["diff", "pred.json", "m.json", "--level", "1"])
        },
    },
    Target {
        kind: Kind::Measured,
        file: "m.json",
        valid: || read("tests/integration/fixtures/vllm-bench-serve.json"),
        setup: |_| args(&["run", "-q", "base.yml", "--trace-from", "m.json"]),
    },
    Target {
        kind: Kind::Measured,
        file: "m.json",
        valid: || read("tests/integration/fixtures/vllm-bench-serve.json"),
        setup: |_| args(&["calibrate", "base.yml", "m.json", "--no-fit"]),
    },
    Target {
        kind: Kind::Measured,
        file: "m.jsonl",
        valid: || read("tests/integration/fixtures/aiperf-profile_export.jsonl"),
        setup: |_| args(&["run", "-q", "base.yml", "--trace-from", "m.jsonl"]),
    },
    Target {
        kind: Kind::Measured,
        file: "m.csv",
        valid: || read("scenarios/workloads/trace-replay.csv"),
        setup: |_| args(&["run", "-q", "base.yml", "--trace-from", "m.csv"]),
    },
    Target {
        kind: Kind::Prediction,
        file: "pred.json",
        valid: made_prediction,
        setup: |d| {
            copy(d, "m.json", "tests/integration/fixtures/vllm-bench-serve.json");
            args(&["diff", "pred.json", "m.json"])
        },
    },
    Target { kind: Kind::Shard, file: "s0.json", valid: made_shard, setup: |_| args(&["merge", "s0.json"]) },
    Target {
        kind: Kind::KernelTable,
        file: "g.csv",
        valid: gemm_table,
        setup: |_| args(&["kernels", "--gemm", "g.csv", "-o", "k.yml"]),
    },
];

/// The variants of a file: (name, bytes; `None` for a folder). The
/// oversized one is made in place, sparse (one byte past the limit costs
/// no disk).
fn variants(valid: &[u8], rng: &mut ChaCha8Rng) -> Vec<(&'static str, Option<Vec<u8>>)> {
    let cut = rng.random_range(0..valid.len().max(1));
    let garbage: Vec<u8> = (0..rng.random_range(1..400)).map(|_| rng.random_range(1..=255u8)).collect();
    let mut binary = valid.to_vec();
    binary.insert(rng.random_range(0..valid.len().clamp(1, 4096)), 0);
    vec![
        ("valid", Some(valid.to_vec())),
        ("cut", Some(valid[..cut].to_vec())),
        ("garbage", Some(garbage)),
        ("binary", Some(binary)),
        ("empty", Some(Vec::new())),
        ("oversized", Some(Vec::new())),
        ("folder", None),
    ]
}

/// What went wrong with a case, if anything.
fn judge(out: &Out, file: &str, variant: &str, kind: Kind) -> Option<String> {
    let (code, err) = (out.code(), out.stderr());
    if err.contains("panicked") || !(0..=2).contains(&code) {
        return Some(format!("exit {code}"));
    }
    for leak in LEAKS {
        if err.contains(leak) {
            return Some(format!("message leaks {leak:?}"));
        }
    }
    let must_refuse = matches!(variant, "binary" | "oversized" | "folder" | "garbage" | "empty");
    if must_refuse && code != 2 {
        return Some(format!("exit {code}, expected 2"));
    }
    if variant == "valid" && code == 2 {
        return Some("the valid file is refused".into());
    }
    let name = Path::new(file).file_stem().unwrap().to_string_lossy().to_string();
    if code == 2 && !err.contains(&name) {
        return Some(format!("the message does not name {name}"));
    }
    let limit = llmsim_scenario::input::bytes(kind.limit());
    if variant == "oversized" && !err.contains(&format!("larger than {limit}, the most llmsim reads for a {kind}")) {
        return Some(format!("the message does not give the limit {limit}"));
    }
    if variant == "binary" && !err.contains("not text") && !err.contains("NUL") {
        return Some("a NUL byte is not called out".into());
    }
    None
}

#[test]
fn every_kind_of_input_file_cut_garbled_binary_empty_oversized_or_a_folder_is_refused_by_name() {
    let mut rng = ChaCha8Rng::seed_from_u64(seed());
    let mut failures = Vec::new();
    let mut ran = 0;
    for t in TARGETS {
        let valid = (t.valid)();
        for (variant, bytes) in variants(&valid, &mut rng) {
            let dir = tempdir();
            let d = dir.path();
            copy(d, "base.yml", "scenarios/base.yml");
            let args = (t.setup)(d);
            let path = d.join(t.file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            match (variant, bytes) {
                ("oversized", _) => std::fs::File::create(&path).unwrap().set_len(t.kind.limit() + 1).unwrap(),
                (_, Some(b)) => std::fs::write(&path, b).unwrap(),
                (_, None) => std::fs::create_dir_all(&path).unwrap(),
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = TestCommand::new(&refs).current_dir(d).bounded(60, 4096);
            ran += 1;
            if let Some(why) = judge(&out, t.file, variant, t.kind) {
                failures.push(format!("{} {variant}: llmsim {}: {why}\n{}", t.file, args.join(" "), out.stderr()));
            }
        }
    }
    assert!(ran >= 100, "{ran} cases");
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n---\n"));
}

#[test]
fn mutated_measured_files_end_with_exit_0_1_or_2_under_the_guard() {
    let fixtures = [
        "tests/integration/fixtures/vllm-bench-serve.json",
        "tests/integration/fixtures/vllm-bench-serve-append.json",
        "tests/integration/fixtures/sglang-bench-serving.jsonl",
        "tests/integration/fixtures/guidellm-report.json",
        "tests/integration/fixtures/aiperf-profile_export_aiperf.json",
        "tests/integration/fixtures/aiperf-profile_export.jsonl",
        "tests/integration/fixtures/genai-perf-profile_export_genai_perf.json",
        "tests/integration/fixtures/llmperf-summary.json",
        "tests/integration/fixtures/inference-perf-stage_1_lifecycle_metrics.json",
    ];
    let pred_dir = tempdir();
    prediction(pred_dir.path());
    let n = u64::from(cases(40));
    let mut failures = Vec::new();
    for i in 0..n {
        let mut rng = ChaCha8Rng::seed_from_u64(seed() ^ 0x34 ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let src = fixtures[rng.random_range(0..fixtures.len())];
        let (mutated, how) = mutate(&std::fs::read_to_string(repo(src)).unwrap(), &mut rng, false);
        let dir = tempdir();
        let d = dir.path();
        write(d, "m.json", &mutated);
        std::fs::copy(pred_dir.path().join("pred.json"), d.join("pred.json")).unwrap();
        let args: &[&str] = match rng.random_range(0..3) {
            0 => &["diff", "pred.json", "m.json", "--level", "1"],
            1 => &["run", "-q", "base.yml", "--trace-from", "m.json", "--trace-level", "1"],
            _ => &["calibrate", "base.yml", "m.json", "--no-fit"],
        };
        copy(d, "base.yml", "scenarios/base.yml");
        let out = TestCommand::new(args).current_dir(d).bounded(60, 4096);
        let (code, err) = (out.code(), out.stderr());
        let bad = err.contains("panicked") || !(0..=2).contains(&code) || LEAKS.iter().any(|l| err.contains(l));
        if bad || (code == 2 && !err.contains("llmsim: error: ")) {
            failures.push(format!("case {i} ({src}: {how}): llmsim {}: exit {code}\n{err}", args.join(" ")));
        }
    }
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n---\n"));
}
