//! `llmsim run --trace-events FILE`: the run as a Chrome trace-event JSON
//! file, to open in Perfetto (ui.perfetto.dev) or chrome://tracing.
//!
//! # What is in it
//!
//! Process 1, "engine": one complete slice (`ph: "X"`) per step on the
//! "steps" track, with args `batch`, `tokens`, `prefill_tokens`,
//! `kv_blocks`, `running`, `waiting`, `preempted`; and counter tracks
//! (`ph: "C"`) "kv blocks used" and "waiting requests".
//!
//! Process 2, "requests": one track per request, named `request N` (its
//! thread id is the request id plus one), holding slices `queued` (from
//! arrival, or from a preemption, to the start of the step that schedules
//! it), `prefill` (one per chunk: a step computing part of a fresh prompt),
//! `recompute` (a chunk rebuilding KV lost to preemption) and `decode`
//! (consecutive one-token steps merged into one slice, arg `tokens`), and
//! instant events (`ph: "i"`) `first token`, `preempted`, `finished`,
//! `rejected` and `aborted`.
//!
//! With `cluster:` ([`TraceEvents::render_placed`]), process 1 is replaced
//! by one process per replica, `replica N` (with pools `prefill N` and
//! `decode N`), pid 3 onwards, each with its own "steps" track and
//! counters.
//!
//! Times are microseconds of simulated time (`ts`, `dur`), as the format
//! wants. Events are written in the order the engine reports them, one per
//! line.

use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::{Observer, RejectReason, RequestId, StepRecord};
use crate::time::SimTime;

const ENGINE: u32 = 1;
const REQUESTS: u32 = 2;

#[derive(Serialize)]
struct Event {
    name: String,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u64,
    /// Scope of an instant event: its thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Value::is_null")]
    args: Value,
}

fn us(t: SimTime) -> f64 {
    t.as_nanos() as f64 / 1e3
}

/// What a request is doing in a step.
#[derive(Copy, Clone, PartialEq)]
enum Work {
    Prefill,
    Recompute,
    Decode,
}

#[derive(Default)]
struct Req {
    prompt: u32,
    generated: u32,
    /// Waiting since, and whether because of a preemption.
    queued: Option<(SimTime, bool)>,
    /// An open run of decode steps: start, end, tokens.
    decode: Option<(SimTime, SimTime, u32)>,
}

/// An [`Observer`] that records the trace.
#[derive(Default)]
pub struct TraceEvents {
    events: Vec<Event>,
    reqs: Vec<Req>,
    /// (request, tokens, kind) scheduled in the step being built.
    batch: Vec<(RequestId, u32, Work)>,
    /// Requests that finished at the end of the step being built.
    finished: Vec<RequestId>,
    last_end: SimTime,
    /// `(event index, step number)` of every event on a step track, so a
    /// cluster's steps can be put on their replica's process at the end.
    step_events: Vec<(usize, u64)>,
    steps: u64,
}

/// The first replica's process id in a cluster's trace.
const FIRST_REPLICA: u32 = 3;

impl TraceEvents {
    pub fn new() -> TraceEvents {
        TraceEvents::default()
    }

    fn push(
        &mut self,
        name: &str,
        ph: &'static str,
        (pid, tid): (u32, u64),
        at: SimTime,
        end: Option<SimTime>,
        args: Value,
    ) {
        self.events.push(Event {
            name: name.to_string(),
            ph,
            ts: us(at),
            dur: end.map(|e| e.nanos_since(at) as f64 / 1e3),
            pid,
            tid,
            s: (ph == "i").then_some("t"),
            args,
        });
    }

    fn track(id: RequestId) -> (u32, u64) {
        (REQUESTS, id + 1)
    }

    fn instant(&mut self, id: RequestId, name: &str, at: SimTime, args: Value) {
        self.push(name, "i", Self::track(id), at, None, args);
    }

    /// Closes the request's open queue slice at `at`.
    fn close_queue(&mut self, id: RequestId, at: SimTime) {
        if let Some((since, preempted)) = self.reqs.get_mut(id as usize).and_then(|r| r.queued.take()) {
            let args = json!({ "after_preemption": preempted });
            self.push("queued", "X", Self::track(id), since, Some(at), args);
        }
    }

    /// Closes the request's open decode slice.
    fn close_decode(&mut self, id: RequestId) {
        if let Some((start, end, tokens)) = self.reqs.get_mut(id as usize).and_then(|r| r.decode.take()) {
            self.push("decode", "X", Self::track(id), start, Some(end), json!({ "tokens": tokens }));
        }
    }

    /// The trace file's text. Requests still open are closed at the end
    /// of the last step.
    pub fn render(self) -> String {
        self.render_placed(None)
    }

    /// [`TraceEvents::render`] of a cluster run: every step on its
    /// replica's process, by `placement.steps` (the replica of every step,
    /// in order; the run must keep steps).
    pub fn render_placed(mut self, placement: Option<&crate::metrics::Placement>) -> String {
        for id in 0..self.reqs.len() as u64 {
            self.close_decode(id);
            self.close_queue(id, self.last_end);
        }
        let mut head = Vec::new();
        match placement.filter(|p| !p.steps.is_empty()) {
            None => {
                head.push(meta("process_name", (ENGINE, 0), json!({ "name": "engine" })));
                head.push(meta("process_sort_index", (ENGINE, 0), json!({ "sort_index": 1 })));
                head.push(meta("thread_name", (ENGINE, 0), json!({ "name": "steps" })));
            }
            Some(p) => {
                for &(event, step) in &self.step_events {
                    if let Some(&r) = p.steps.get(step as usize) {
                        self.events[event].pid = FIRST_REPLICA + r;
                    }
                }
                let replicas = p.steps.iter().copied().max().map_or(0, |m| m + 1);
                for r in 0..replicas {
                    let name = match p.decode_base {
                        Some(b) if r >= b => format!("decode {}", r - b),
                        Some(_) => format!("prefill {r}"),
                        None => format!("replica {r}"),
                    };
                    let pid = FIRST_REPLICA + r;
                    head.push(meta("process_name", (pid, 0), json!({ "name": name })));
                    head.push(meta("process_sort_index", (pid, 0), json!({ "sort_index": pid })));
                    head.push(meta("thread_name", (pid, 0), json!({ "name": "steps" })));
                }
            }
        }
        head.push(meta("process_name", (REQUESTS, 0), json!({ "name": "requests" })));
        head.push(meta("process_sort_index", (REQUESTS, 0), json!({ "sort_index": 2 })));
        for id in 0..self.reqs.len() as u64 {
            head.push(meta("thread_name", Self::track(id), json!({ "name": format!("request {id}") })));
            head.push(meta("thread_sort_index", Self::track(id), json!({ "sort_index": id })));
        }
        let mut out = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        let lines: Vec<String> =
            head.iter().chain(&self.events).map(|e| serde_json::to_string(e).unwrap_or_default()).collect();
        out.push_str(&lines.join(",\n"));
        out.push_str("\n]}\n");
        out
    }
}

/// A metadata event naming or ordering a process or track.
fn meta(name: &str, (pid, tid): (u32, u64), args: Value) -> Event {
    Event { name: name.to_string(), ph: "M", ts: 0.0, dur: None, pid, tid, s: None, args }
}

impl Observer for TraceEvents {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, _output: u32) {
        let i = id as usize;
        if self.reqs.len() <= i {
            self.reqs.resize_with(i + 1, Req::default);
        }
        self.reqs[i] = Req { prompt, generated: 0, queued: Some((at, false)), decode: None };
    }

    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.close_queue(id, at);
        let Some(r) = self.reqs.get(id as usize) else { return };
        let kind = match r.generated {
            0 => Work::Prefill,
            g if computed + 1 == r.prompt + g => Work::Decode,
            _ => Work::Recompute,
        };
        self.batch.push((id, tokens, kind));
    }

    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.close_decode(id);
        self.instant(id, "preempted", at, Value::Null);
        if let Some(r) = self.reqs.get_mut(id as usize) {
            r.queued = Some((at, true));
        }
    }

    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        if let Some(r) = self.reqs.get_mut(id as usize) {
            r.generated = index;
        }
        if index == 1 {
            self.instant(id, "first token", at, Value::Null);
        }
    }

    fn finished(&mut self, id: RequestId, _at: SimTime) {
        // The step's slices are written when the step ends; the instant
        // follows them in `step`.
        self.finished.push(id);
    }

    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        self.close_queue(id, at);
        self.instant(id, "rejected", at, json!({ "reason": reason.as_str() }));
    }

    fn aborted(&mut self, id: RequestId, at: SimTime) {
        self.close_decode(id);
        self.close_queue(id, at);
        self.instant(id, "aborted", at, Value::Null);
    }

    fn step(&mut self, s: &StepRecord) {
        let args = json!({
            "batch": s.batch_size, "tokens": s.tokens, "prefill_tokens": s.prefill_tokens,
            "kv_blocks": s.kv_blocks_used, "running": s.running, "waiting": s.waiting, "preempted": s.preempted,
        });
        let first = self.events.len();
        self.push("step", "X", (ENGINE, 0), s.start, Some(s.end), args);
        self.push("kv blocks used", "C", (ENGINE, 0), s.start, None, json!({ "blocks": s.kv_blocks_used }));
        self.push("waiting requests", "C", (ENGINE, 0), s.start, None, json!({ "requests": s.waiting }));
        let step = self.steps;
        self.step_events.extend((first..self.events.len()).map(|e| (e, step)));
        self.steps += 1;
        for (id, tokens, kind) in std::mem::take(&mut self.batch) {
            self.work(id, tokens, kind, s);
        }
        for id in std::mem::take(&mut self.finished) {
            self.close_decode(id);
            self.instant(id, "finished", s.end, Value::Null);
        }
        self.last_end = s.end;
    }
}

impl TraceEvents {
    /// One request's part of a step.
    fn work(&mut self, id: RequestId, tokens: u32, kind: Work, s: &StepRecord) {
        if kind != Work::Decode {
            self.close_decode(id);
            let name = if kind == Work::Prefill { "prefill" } else { "recompute" };
            self.push(name, "X", Self::track(id), s.start, Some(s.end), json!({ "tokens": tokens }));
            return;
        }
        let Some(r) = self.reqs.get_mut(id as usize) else { return };
        match &mut r.decode {
            Some((_, end, n)) if *end == s.start => {
                *end = s.end;
                *n += 1;
            }
            _ => {
                self.close_decode(id);
                if let Some(r) = self.reqs.get_mut(id as usize) {
                    r.decode = Some((s.start, s.end, 1));
                }
            }
        }
    }
}
