use std::path::Path;

use super::*;
use llmsim_scenario::config::{self, Scenario};
use llmsim_scenario::trace;

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
    src.keep_rows();
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
    src.keep_rows();
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

#[test]
fn without_keep_rows_a_source_keeps_nothing_per_request() {
    // A shared prefix: no group per request unless asked.
    let w = "  arrivals: {poisson: {rate: 5}}\n  requests: 20\n  prompt_tokens: 10\n  output_tokens: 3\n";
    let shared = scenario(&format!("{w}  shared_prefix: {{groups: 2, tokens: 16}}\n"));
    let (mut quiet, mut kept) = (AnySource::new(&shared), AnySource::new(&shared));
    kept.keep_rows();
    let mut groups = Vec::new();
    while let Some(r) = quiet.pop() {
        kept.pop().expect("the same requests");
        assert_eq!(kept.segments(), quiet.segments(), "keeping rows changes no draw");
        groups
            .push(format!("sys:{}", (0..2).find(|&g| quiet.segments()[0] == Segment::new(group_key(g), 16)).unwrap()));
        quiet.done(r.id, secs(1.0));
        kept.done(r.id, secs(1.0));
    }
    assert!(quiet.row_content().is_none(), "nothing kept");
    let AnySource::Prefixed(p) = &quiet else { panic!("a shared prefix") };
    assert!(p.drawn.is_none());
    let rows = kept.row_content().expect("kept");
    let ids: Vec<_> = rows.iter().map(|r| r.prefix.as_ref().unwrap().id.clone()).collect();
    assert_eq!(ids, groups, "each request's group, in order");
}

#[test]
fn sessions_hold_only_the_span_of_requests_in_flight() {
    let s = scenario(
        "  arrivals: {closed: {concurrency: 2}}
  requests: 6
  prompt_tokens: 10
  output_tokens: 5
  sessions: {turns: 2}
",
    );
    let mut src = AnySource::new(&s);
    let span = |src: &AnySource| match src {
        AnySource::Sessions(s) => (s.first_open(), s.conversation_of.len(), s.log.is_some()),
        _ => panic!("sessions"),
    };
    let (a, b) = (src.pop().unwrap(), src.pop().unwrap());
    assert_eq!((a.id, b.id), (0, 1));
    assert_eq!(span(&src), (0, 2, false), "two in flight, no rows kept");
    // The second ends first: the front (request 0) is still in flight.
    src.done(1, secs(1.0));
    assert_eq!(span(&src), (0, 2, false));
    src.done(0, secs(2.0));
    assert_eq!(span(&src), (2, 0, false), "both ended: nothing held");
    // A second call for an ended request finds nothing (no turn pushed
    // twice): the two next turns are requests 2 and 3, then none is due
    // until they end.
    src.done(0, secs(3.0));
    let (c, d) = (src.pop().unwrap(), src.pop().unwrap());
    assert_eq!((c.id, d.id, c.prompt, d.prompt), (2, 3, 25, 25), "each conversation's second turn");
    assert!(src.pop().is_none(), "both users wait for their answers");
    assert_eq!(span(&src), (2, 2, false));
    // A rejected turn ends its request too.
    src.rejected(3, secs(4.0));
    src.done(2, secs(4.0));
    assert_eq!(span(&src), (4, 0, false));
}
