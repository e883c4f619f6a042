use std::path::Path;

use super::*;
use crate::config::{self, Scenario};
use crate::trace;

fn scenario(workload: &str) -> Scenario {
    let text = format!(
        "hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: 4096
  weights: {{parameters_billions: 7}}
  kv_cache: {{bytes_per_token: 131072, prefix_caching: true}}
workload:
{workload}"
    );
    let file = Path::new("content-test.yml");
    let raw = config::parse_str(&text, file).unwrap_or_else(|e| panic!("{e}"));
    config::validate::scenario(raw, file).unwrap_or_else(|e| panic!("{e}"))
}

fn secs(s: f64) -> SimTime {
    SimTime::from_secs_f64(s)
}

#[test]
fn a_shared_prefix_adds_its_tokens_and_changes_no_other_draw() {
    let w = "  seed: 3\n  arrivals: {poisson: {rate: 5}}\n  requests: 50\n  prompt_tokens: {uniform: [10, 90]}\n  output_tokens: 7\n";
    let plain = scenario(w);
    let shared = scenario(&format!("{w}  shared_prefix: {{groups: 3, tokens: 100}}\n"));
    let (mut a, mut b) = (AnySource::new(&plain), AnySource::new(&shared));
    let mut groups = [0u32; 3];
    while let Some(x) = a.pop() {
        let y = b.pop().expect("as many requests");
        assert_eq!((y.id, y.arrival, y.output), (x.id, x.arrival, x.output));
        assert_eq!(y.prompt, x.prompt + 100, "prompt_tokens is the unique rest");
        let segs = b.segments();
        assert_eq!(segs.len(), 2);
        assert_eq!(segs[1], Segment::new(prompt_key(x.id), x.prompt));
        let g = (0..3).find(|&g| segs[0] == Segment::new(named_key(&format!("sys:{g}")), 100)).expect("a sys key");
        groups[g as usize] += 1;
        assert!(a.segments().is_empty(), "a plain request is unique");
    }
    assert!(b.pop().is_none());
    assert!(groups.iter().all(|&n| n > 5), "all three groups drawn: {groups:?}");
}

#[test]
fn a_session_turn_repeats_the_previous_prompt_and_answer() {
    let s = scenario(
        "  arrivals: {closed: {concurrency: 1, think_time_s: 2}}
  requests: 4
  prompt_tokens: 10
  output_tokens: 5
  sessions: {turns: 3, think_s: 0.5}
",
    );
    let mut src = AnySource::new(&s);
    let t0 = src.pop().unwrap();
    assert_eq!((t0.arrival, t0.prompt), (SimTime::ZERO, 10));
    assert_eq!(src.segments(), [Segment::new(prompt_key(0), 10)]);
    assert_eq!(src.peek(), None, "the next turn waits for this one's answer");
    src.done(0, secs(1.0));
    assert_eq!(src.peek(), Some(secs(1.5)), "think_s after the last token");
    let t1 = src.pop().unwrap();
    assert_eq!(t1.prompt, 10 + 5 + 10);
    assert_eq!(
        src.segments(),
        [Segment::new(prompt_key(0), 10), Segment::new(generated_key(0), 5), Segment::new(prompt_key(1), 10)]
    );
    src.done(1, secs(3.0));
    let t2 = src.pop().unwrap();
    assert_eq!((t2.arrival, t2.prompt), (secs(3.5), 25 + 5 + 10));
    assert_eq!(src.segments().len(), 5);
    // The third turn was the last: the user starts a new conversation
    // think_time_s (2 s) after it ends.
    src.done(2, secs(4.0));
    let t3 = src.pop().unwrap();
    assert_eq!((t3.arrival, t3.prompt), (secs(6.0), 10));
    assert_eq!(src.segments(), [Segment::new(prompt_key(3), 10)]);
    assert!(src.pop().is_none(), "requests counts turns: 4");
    let rows = src.row_content().unwrap();
    let sessions: Vec<_> = rows.iter().map(|r| r.session.clone().unwrap()).collect();
    assert_eq!(sessions, ["0", "0", "0", "1"]);
}

#[test]
fn a_rejected_turn_ends_its_session() {
    let s = scenario(
        "  arrivals: {closed: {concurrency: 1}}
  requests: 3
  prompt_tokens: 10
  output_tokens: 5
  sessions: {turns: 5}
",
    );
    let mut src = AnySource::new(&s);
    src.pop().unwrap();
    src.rejected(0, secs(1.0));
    let next = src.pop().unwrap();
    assert_eq!((next.arrival, next.prompt), (secs(1.0), 10), "a new conversation, not turn 2");
    assert_eq!(src.row_content().unwrap()[1].session.as_deref(), Some("1"));
}

#[test]
fn open_loop_sessions_start_at_the_arrival_process_and_interleave() {
    let s = scenario(
        "  arrivals: {constant: {rate: 1}}
  requests: 5
  prompt_tokens: 10
  output_tokens: 5
  shared_prefix: {groups: 1, tokens: 20}
  sessions: {turns: 2, think_s: 0.25}
",
    );
    let mut src = AnySource::new(&s);
    let a = src.pop().unwrap();
    assert_eq!((a.arrival, a.prompt), (SimTime::ZERO, 30));
    assert_eq!(src.segments()[0], Segment::new(group_key(0), 20));
    src.done(0, secs(0.5));
    let b = src.pop().unwrap();
    assert_eq!((b.id, b.arrival, b.prompt), (1, secs(0.75), 30 + 5 + 10), "turn 2 of the first conversation");
    assert_eq!(src.segments()[0], Segment::new(group_key(0), 20), "the history keeps the system prompt");
    let c = src.pop().unwrap();
    assert_eq!((c.arrival, c.prompt), (secs(1.0), 30), "the second conversation");
}

#[test]
fn group_keys_are_the_named_keys_a_written_trace_uses() {
    for g in [0, 7, 12345, u32::MAX] {
        assert_eq!(group_key(g), named_key(&group_name(g)));
    }
}

#[test]
fn trace_rows_build_their_sessions_and_prefixes() {
    let csv = "arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens,session_id
0,30,5,sys,20,a
0.1,12,4,,,
1,45,2,other,99,a
";
    let (rows, content) = trace::parse_with_content(csv, Path::new("t.csv")).unwrap();
    let mut segs = TraceSegments::new(Arc::new(content.unwrap()));
    segs.build(0, &rows);
    assert_eq!(segs.current(), [Segment::new(named_key("sys"), 20), Segment::new(prompt_key(0), 10)]);
    segs.build(1, &rows);
    assert_eq!(segs.current(), [Segment::new(prompt_key(1), 12)]);
    segs.build(2, &rows);
    // Row 2 continues row 0 (its own prefix columns are ignored): 30 + 5
    // tokens of history, then 10 new.
    assert_eq!(
        segs.current(),
        [
            Segment::new(named_key("sys"), 20),
            Segment::new(prompt_key(0), 10),
            Segment::new(generated_key(0), 5),
            Segment::new(prompt_key(2), 10)
        ]
    );
}

#[test]
fn hash_ids_become_one_segment_per_block() {
    let jsonl = "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 3, \"hash_ids\": [4, 5, 6]}\n";
    let (rows, content) = trace::parse_jsonl(jsonl, Path::new("t.jsonl"), 512).unwrap();
    let mut segs = TraceSegments::new(Arc::new(content));
    segs.build(0, &rows);
    let want = [Segment::new(hash_id_key(4), 512), Segment::new(hash_id_key(5), 512), Segment::new(hash_id_key(6), 76)];
    assert_eq!(segs.current(), want);
}
