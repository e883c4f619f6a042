use std::path::Path;

use super::*;
use crate::config::{Override, load_scenario, load_scenario_with};

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

const SCENARIO: &str = "
hardware: { hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989 }
model:
  context_length: 4096
  weights: { parameters_billions: 7 }
  kv_cache: { bytes_per_token: 524288 }
workload: { arrivals: { poisson: { rate: 1 } }, requests: 10, prompt_tokens: 100, output_tokens: 10 }
";

const PROFILE: &str = "
name: lab
efficiency: { compute: 0.5, memory: 0.8 }
latency: { step_overhead_ms: 2, request_overhead_ms: 7 }
fit: { anything: [1, 2, 3] }
";

#[test]
fn a_named_profile_fills_only_the_keys_the_scenario_leaves_unset() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "hardware/calibrations/lab.yml", PROFILE);
    let text = format!("calibration: lab\nefficiency: {{ memory: 0.9 }}\n{SCENARIO}");
    let file = write(dir.path(), "s/x.yml", &text);
    let s = load_scenario(&file).unwrap();
    assert_eq!(s.efficiency.compute, 0.5);
    assert_eq!(s.efficiency.memory, 0.9, "the scenario's own value wins");
    assert_eq!(s.latency.step_overhead_ms, 2.0);
    assert_eq!(s.latency.request_overhead_ms, 7.0);
    let used = s.calibration.as_ref().unwrap();
    assert_eq!(used.keys.len(), 4);
    assert_eq!(used.keys[1], CalibratedKey { key: "efficiency.memory", calibrated: 0.8, scenario: Some(0.9) });
    let lines = explain(used);
    assert!(lines.contains("efficiency.memory") && lines.contains("set by the scenario, which wins"), "{lines}");
    assert!(lines.contains("0.5 (from the calibration)"), "{lines}");
}

#[test]
fn a_set_on_the_command_line_counts_as_the_scenario_s_own() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cal.yml", PROFILE);
    let file = write(dir.path(), "x.yml", &format!("calibration: cal.yml\n{SCENARIO}"));
    let s = load_scenario_with(&file, &[Override::parse("latency.step_overhead_ms=3").unwrap()]).unwrap();
    assert_eq!(s.latency.step_overhead_ms, 3.0);
    assert_eq!(s.efficiency.compute, 0.5);
}

#[test]
fn the_shipped_profile_is_built_in() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "x.yml", &format!("calibration: h100-vllm\n{SCENARIO}"));
    let s = load_scenario(&file).unwrap();
    let used = s.calibration.clone().unwrap();
    assert!(used.file.display().to_string().contains("built-in"), "{}", used.file.display());
    let (_, text) = BUILTIN.iter().find(|(n, _)| *n == "h100-vllm").unwrap();
    let profile = parse(text, Path::new("h100-vllm.yml")).unwrap();
    // This model is two numbers, no architecture: the profile's
    // per-operator keys are left out (and named), the others used.
    let per_operator = profile
        .values()
        .iter()
        .filter(|(k, _)| {
            crate::config::scenario::PER_OPERATOR_KEYS.contains(k) || *k == "latency.per_layer_overhead_us"
        })
        .count();
    assert!(per_operator > 0, "the shipped profile is per-operator");
    assert_eq!(used.keys.len() + used.unused.len(), profile.values().len());
    assert_eq!(used.unused.len(), per_operator);
    assert!(s.per_operator().is_none());
    assert!(explain(&used).contains("not used: efficiency.gemm_half_tokens"), "{}", explain(&used));
    // With an architecture every key is used and steps are priced per operator.
    let file = write(
        dir.path(),
        "y.yml",
        "calibration: h100-vllm\nhardware: h100-80gb\nmodel: llama-3.1-8b\n\
        workload: { arrivals: { poisson: { rate: 1 } }, requests: 10, prompt_tokens: 100, output_tokens: 10 }\n",
    );
    let s = load_scenario(&file).unwrap();
    assert_eq!(s.calibration.as_ref().unwrap().keys.len(), profile.values().len());
    assert!(s.per_operator().is_some());
}

#[test]
fn per_operator_keys_a_scenario_sets_itself_without_an_architecture_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "x.yml", &format!("efficiency: {{ attention_compute: 0.5 }}\n{SCENARIO}"));
    let e = load_scenario(&file).unwrap_err().to_string();
    assert!(e.contains("efficiency.attention_compute") && e.contains("needs a model architecture"), "{e}");
}

#[test]
fn a_profile_naming_keys_outside_efficiency_and_latency_is_refused() {
    let e =
        parse("scheduler: { max_batch_tokens: 2 }\nefficiency: { compute: 0.5 }\n", Path::new("c.yml")).unwrap_err();
    assert_eq!(e.path, "scheduler");
    assert!(e.message.contains("only keys under efficiency and latency"), "{e}");
    let e = parse("latency: { tensor: 2 }\n", Path::new("c.yml")).unwrap_err();
    assert!(e.to_string().contains("latency") && e.message.contains("unknown field"), "{e}");
    let e = parse("name: empty\n", Path::new("c.yml")).unwrap_err();
    assert!(e.message.contains("sets no key"), "{e}");
}

#[test]
fn an_unknown_profile_names_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "x.yml", &format!("calibration: h100-vlm\n{SCENARIO}"));
    let e = load_scenario(&file).unwrap_err().to_string();
    assert!(e.contains("unknown calibration `h100-vlm` (did you mean `h100-vllm`?)"), "{e}");
    let file = write(dir.path(), "y.yml", &format!("calibration: missing.yml\n{SCENARIO}"));
    let e = load_scenario(&file).unwrap_err().to_string();
    assert!(e.contains("cannot read the calibration file"), "{e}");
}

#[test]
fn calibrated_values_are_validated_like_the_scenario_s_own() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bad.yml", "efficiency: { compute: 1.5 }\n");
    let file = write(dir.path(), "x.yml", &format!("calibration: bad.yml\n{SCENARIO}"));
    let e = load_scenario(&file).unwrap_err().to_string();
    assert!(e.contains("efficiency.compute") && e.contains("1.5"), "{e}");
}

#[test]
#[cfg(target_os = "linux")]
fn a_calibration_pipe_is_read_to_its_limit_plus_one_byte_and_no_further() {
    // Issue 34: `calibration: /dev/zero` read 2 GB before failing. A FIFO
    // whose writer offers 64 MiB shows how much is taken from it.
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("endless.yml");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            let chunk = vec![b'#'; 64 << 10];
            let mut written = 0u64;
            while written < 64 << 20 {
                match f.write(&chunk) {
                    Ok(n) => written += n as u64,
                    Err(_) => break,
                }
            }
            written
        })
    };
    let file = write(dir.path(), "x.yml", &format!("calibration: endless.yml\n{SCENARIO}"));
    let e = load_scenario(&file).unwrap_err().to_string();
    // Should the reader never have opened it, let the writer go (O_NONBLOCK:
    // an open for reading that does not wait for a writer).
    drop(std::fs::OpenOptions::new().read(true).custom_flags(0o4000).open(&fifo));
    let written = writer.join().unwrap();
    assert!(e.contains("calibration: the calibration file"), "{e}");
    assert!(e.contains("larger than 4,194,304 bytes (4 MiB), the most llmsim reads for a calibration profile"), "{e}");
    assert!(written < 5 << 20, "the reader took {written} bytes, far past the limit");
}

#[test]
fn a_calibration_file_one_byte_over_its_limit_is_refused_naming_it_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yml");
    std::fs::write(&big, vec![b'#'; (4 << 20) + 1]).unwrap();
    let file = write(dir.path(), "x.yml", &format!("calibration: big.yml\n{SCENARIO}"));
    let e = load_scenario(&file).unwrap_err().to_string();
    assert!(e.contains("big.yml: the file is larger than 4,194,304 bytes (4 MiB)"), "{e}");
    let file = write(dir.path(), "z.yml", &format!("calibration: /dev/zero\n{SCENARIO}"));
    let e = load_scenario(&file).unwrap_err().to_string();
    assert!(e.contains("/dev/zero: the file is not text: it has a NUL byte at byte 0"), "{e}");
}

#[test]
fn a_named_profile_that_cannot_be_read_is_an_error_not_a_fallback_to_the_built_in_one() {
    // hardware/calibrations/h100-vllm.yml beside the scenario shadows the
    // built-in profile: when it is unreadable, say so.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "hardware/calibrations/h100-vllm.yml", "efficiency: {compute: \0}\n");
    let file = write(dir.path(), "x.yml", &format!("calibration: h100-vllm\n{SCENARIO}"));
    let e = load_scenario(&file).unwrap_err().to_string();
    assert!(e.contains("h100-vllm.yml: the file is not text"), "{e}");
}
