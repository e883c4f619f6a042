//! Stop-string planning speed: the answer a request with 10,000 stop
//! strings gets on a 1 MB answer (the case that used to cost 12.9 s of CPU
//! on a request thread), planned as the server plans it (`Stops` built from
//! the request's list, then `openai::plan` over the built-in tokenizer's
//! tokens), against a plain search of every stop string over the whole
//! answer (the old way, run once). Two stop lists: strings that share no
//! prefix with the answer ("zq00042x"), which a substring search skips
//! fast, and strings that start like its words ("alpha00042"), which make
//! it stop at every word.
//!
//! `cargo bench --bench stop_match` prints the median of 9 runs of each
//! step. It asserts nothing: speed is measured here, never in a test.

use std::time::Instant;

use llmsim_content::tokenizer;
use llmsim_server::openai::{Lengths, plan};
use llmsim_server::stop::Stops;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let answer = format!("{}stop here {}", "alpha ".repeat(150_000), "omega ".repeat(20_000));
    for prefix in ["zq", "alpha"] {
        let mut stops: Vec<String> = (0..10_000).map(|i| format!("{prefix}{i:05}x")).collect();
        stops.push("op he".into());
        measure(&answer, &stops);
    }
}

fn measure(answer: &str, stops: &[String]) {
    let (mut build, mut scan) = (Vec::new(), Vec::new());
    let mut tokens = 0;
    for _ in 0..9 {
        let t = Instant::now();
        let s = Stops::new(stops.to_vec()).expect("within the limits").expect("non-empty");
        build.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let p = plan(tokenizer::tokens(answer), |_| Vec::new(), Some(&s), Lengths::cap(u32::MAX));
        scan.push(t.elapsed().as_secs_f64() * 1e3);
        tokens = p.output;
    }
    println!(
        "answer {} bytes, {} stop strings like {:?}, {tokens} tokens planned",
        answer.len(),
        stops.len(),
        stops[42]
    );
    println!("  build the automaton: {:.1} ms (median of 9)", median(build));
    println!("  plan the answer:     {:.1} ms (median of 9)", median(scan));
    let t = Instant::now();
    let first = stops.iter().filter_map(|s| answer.find(s.as_str())).min();
    println!(
        "  old way, every stop string searched over the whole answer: {:.0} ms (once; first match at {first:?})",
        t.elapsed().as_secs_f64() * 1e3
    );
}
