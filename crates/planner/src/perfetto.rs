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
//! With `cluster:`, process 1 is replaced by one process per replica,
//! `replica N` (with pools `prefill N` and `decode N`), pid 3 onwards,
//! each with its own "steps" track and counters: the cluster's driver
//! names the replica before each of its steps ([`Observer::replica`]).
//!
//! Times are microseconds of simulated time (`ts`, `dur`), as the format
//! wants. Events are written in the order the engine reports them, one per
//! line.
//!
//! # Written as the run goes
//!
//! [`TraceEvents`] writes each event to its writer as it happens and
//! keeps only the requests still open (a window from the oldest one not
//! ended), so its memory does not grow with the run. The metadata events
//! (process and track names) come first in the file but depend on the
//! whole run (a track per request, a process per replica that stepped):
//! [`TraceEvents::finish`] says what they are ([`TraceHead`]), and the
//! caller writes the file as [`TraceHead::write`], then the events, then
//! [`END`]. `llmsim run` writes the events to a scratch file beside the
//! output and puts the three together at the end (docs/results.md).

use std::collections::VecDeque;
use std::io::{self, Write};

use serde::Serialize;
use serde_json::{Value, json};

use llmsim_core::engine::{Observer, RejectReason, RequestId, StepRecord};
use llmsim_core::time::SimTime;

const ENGINE: u32 = 1;
const REQUESTS: u32 = 2;

/// The file's last bytes, after the events.
pub const END: &str = "\n]}\n";

#[derive(Serialize)]
struct Event {
    name: &'static str,
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
    /// It finished, was rejected or aborted: nothing of it is open, and
    /// no event of it comes later.
    ended: bool,
}

/// An [`Observer`] that writes the trace's events to `out` as they
/// happen, each as `,\n` and its JSON (see the module docs for the file).
pub struct TraceEvents<W> {
    out: W,
    /// The first write error; nothing is written after it.
    error: Option<io::Error>,
    /// Requests `base..base + reqs.len()`: from the oldest one not ended.
    reqs: VecDeque<Req>,
    base: u64,
    /// Requests seen arriving (ids `0..requests`): each has a track.
    requests: u64,
    /// (request, tokens, kind) scheduled in the step being built.
    batch: Vec<(RequestId, u32, Work)>,
    /// Requests that finished at the end of the step being built.
    finished: Vec<RequestId>,
    last_end: SimTime,
    /// The replica whose steps come next ([`Observer::replica`]), and the
    /// replicas seen on a step (the highest plus one).
    replica: Option<u32>,
    replicas: u32,
}

/// The first replica's process id in a cluster's trace.
const FIRST_REPLICA: u32 = 3;

/// What the metadata events at the head of the file name: a track per
/// request and the engine's process, or a process per replica.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TraceHead {
    /// Requests `0..requests`, a track each.
    pub requests: u64,
    /// Replicas `0..replicas` stepped (a cluster run): a process each;
    /// 0 for one engine's process.
    pub replicas: u32,
}

impl<W: Write> TraceEvents<W> {
    pub fn new(out: W) -> TraceEvents<W> {
        TraceEvents {
            out,
            error: None,
            reqs: VecDeque::new(),
            base: 0,
            requests: 0,
            batch: Vec::new(),
            finished: Vec::new(),
            last_end: SimTime::ZERO,
            replica: None,
            replicas: 0,
        }
    }

    fn push(
        &mut self,
        name: &'static str,
        ph: &'static str,
        (pid, tid): (u32, u64),
        at: SimTime,
        end: Option<SimTime>,
        args: Value,
    ) {
        let event = Event {
            name,
            ph,
            ts: us(at),
            dur: end.map(|e| e.nanos_since(at) as f64 / 1e3),
            pid,
            tid,
            s: (ph == "i").then_some("t"),
            args,
        };
        if self.error.is_none()
            && let Err(e) = write_event(&mut self.out, &event)
        {
            self.error = Some(e);
        }
    }

    fn req(&mut self, id: RequestId) -> Option<&mut Req> {
        let i = id.checked_sub(self.base)?;
        self.reqs.get_mut(usize::try_from(i).ok()?)
    }

    /// Request `id` ended: the window moves past the ended requests at its front.
    fn end(&mut self, id: RequestId) {
        if let Some(r) = self.req(id) {
            r.ended = true;
        }
        while self.reqs.front().is_some_and(|r| r.ended) {
            self.reqs.pop_front();
            self.base += 1;
        }
    }

    fn instant(&mut self, id: RequestId, name: &'static str, at: SimTime, args: Value) {
        self.push(name, "i", track(id), at, None, args);
    }

    /// Closes the request's open queue slice at `at`.
    fn close_queue(&mut self, id: RequestId, at: SimTime) {
        if let Some((since, preempted)) = self.req(id).and_then(|r| r.queued.take()) {
            let args = json!({ "after_preemption": preempted });
            self.push("queued", "X", track(id), since, Some(at), args);
        }
    }

    /// Closes the request's open decode slice.
    fn close_decode(&mut self, id: RequestId) {
        if let Some((start, end, tokens)) = self.req(id).and_then(|r| r.decode.take()) {
            self.push("decode", "X", track(id), start, Some(end), json!({ "tokens": tokens }));
        }
    }

    /// Ends the events: slices of requests still open are closed at the
    /// end of the last step. Gives back the writer (flushed) and what the
    /// head names, or the first write error.
    pub fn finish(mut self) -> io::Result<(W, TraceHead)> {
        for id in self.base..self.base + self.reqs.len() as u64 {
            self.close_decode(id);
            self.close_queue(id, self.last_end);
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok((self.out, TraceHead { requests: self.requests, replicas: self.replicas }))
    }
}

impl TraceEvents<Vec<u8>> {
    /// The whole file's text, for a run small enough to hold it
    /// (`decode_base`: a cluster's first decode replica, with pools).
    pub fn render(self, decode_base: Option<u32>) -> String {
        let mut out = Vec::new();
        if let Ok((events, head)) = self.finish() {
            let _ = head.write(&mut out, decode_base);
            out.extend_from_slice(&events);
            out.extend_from_slice(END.as_bytes());
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl TraceHead {
    /// The file's first bytes: its opening and the metadata events, each
    /// on its line (the events follow, each after `,\n`). With a cluster
    /// (`replicas > 0`) each replica is a process, named `replica N`, or
    /// with pools (`decode_base`, the first decode replica) `prefill N`
    /// and `decode N`.
    pub fn write(&self, out: &mut dyn Write, decode_base: Option<u32>) -> io::Result<()> {
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        let mut first = true;
        let mut meta = |name: &'static str, (pid, tid): (u32, u64), args: Value| -> io::Result<()> {
            if !std::mem::take(&mut first) {
                out.write_all(b",\n")?;
            }
            let e = Event { name, ph: "M", ts: 0.0, dur: None, pid, tid, s: None, args };
            serde_json::to_writer(&mut *out, &e).map_err(io::Error::other)
        };
        if self.replicas == 0 {
            meta("process_name", (ENGINE, 0), json!({ "name": "engine" }))?;
            meta("process_sort_index", (ENGINE, 0), json!({ "sort_index": 1 }))?;
            meta("thread_name", (ENGINE, 0), json!({ "name": "steps" }))?;
        }
        for r in 0..self.replicas {
            let name = match decode_base {
                Some(b) if r >= b => format!("decode {}", r - b),
                Some(_) => format!("prefill {r}"),
                None => format!("replica {r}"),
            };
            let pid = FIRST_REPLICA + r;
            meta("process_name", (pid, 0), json!({ "name": name }))?;
            meta("process_sort_index", (pid, 0), json!({ "sort_index": pid }))?;
            meta("thread_name", (pid, 0), json!({ "name": "steps" }))?;
        }
        meta("process_name", (REQUESTS, 0), json!({ "name": "requests" }))?;
        meta("process_sort_index", (REQUESTS, 0), json!({ "sort_index": 2 }))?;
        for id in 0..self.requests {
            let track = track(id);
            meta("thread_name", track, json!({ "name": format!("request {id}") }))?;
            meta("thread_sort_index", track, json!({ "sort_index": id }))?;
        }
        Ok(())
    }
}

/// A request's track: its thread id is its id plus one.
fn track(id: RequestId) -> (u32, u64) {
    (REQUESTS, id + 1)
}

/// `,\n` and the event's JSON.
fn write_event(out: &mut impl Write, e: &Event) -> io::Result<()> {
    out.write_all(b",\n")?;
    serde_json::to_writer(&mut *out, e).map_err(io::Error::other)
}

impl<W: Write> Observer for TraceEvents<W> {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, _output: u32) {
        let Some(i) = id.checked_sub(self.base).and_then(|i| usize::try_from(i).ok()) else { return };
        // Ids come in order; a gap (never seen) has nothing open.
        while self.reqs.len() <= i {
            self.reqs.push_back(Req { ended: true, ..Req::default() });
        }
        self.reqs[i] = Req { prompt, generated: 0, queued: Some((at, false)), decode: None, ended: false };
        self.requests = self.requests.max(id + 1);
    }

    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.close_queue(id, at);
        let Some(r) = self.req(id) else { return };
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
        if let Some(r) = self.req(id) {
            r.queued = Some((at, true));
        }
    }

    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        if let Some(r) = self.req(id) {
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
        self.end(id);
    }

    fn aborted(&mut self, id: RequestId, at: SimTime) {
        self.close_decode(id);
        self.close_queue(id, at);
        self.instant(id, "aborted", at, Value::Null);
        self.end(id);
    }

    fn replica(&mut self, replica: u32) {
        self.replica = Some(replica);
    }

    fn step(&mut self, s: &StepRecord) {
        let args = json!({
            "batch": s.batch_size, "tokens": s.tokens, "prefill_tokens": s.prefill_tokens,
            "kv_blocks": s.kv_blocks_used, "running": s.running, "waiting": s.waiting, "preempted": s.preempted,
        });
        // A cluster's step goes on its replica's process.
        let pid = match self.replica {
            Some(r) => {
                self.replicas = self.replicas.max(r + 1);
                FIRST_REPLICA + r
            }
            None => ENGINE,
        };
        self.push("step", "X", (pid, 0), s.start, Some(s.end), args);
        self.push("kv blocks used", "C", (pid, 0), s.start, None, json!({ "blocks": s.kv_blocks_used }));
        self.push("waiting requests", "C", (pid, 0), s.start, None, json!({ "requests": s.waiting }));
        let mut batch = std::mem::take(&mut self.batch);
        for &(id, tokens, kind) in &batch {
            self.work(id, tokens, kind, s);
        }
        batch.clear();
        self.batch = batch;
        let mut finished = std::mem::take(&mut self.finished);
        for &id in &finished {
            self.close_decode(id);
            self.instant(id, "finished", s.end, Value::Null);
            self.end(id);
        }
        finished.clear();
        self.finished = finished;
        self.last_end = s.end;
    }
}

impl<W: Write> TraceEvents<W> {
    /// One request's part of a step.
    fn work(&mut self, id: RequestId, tokens: u32, kind: Work, s: &StepRecord) {
        if kind != Work::Decode {
            self.close_decode(id);
            let name = if kind == Work::Prefill { "prefill" } else { "recompute" };
            self.push(name, "X", track(id), s.start, Some(s.end), json!({ "tokens": tokens }));
            return;
        }
        let Some(r) = self.req(id) else { return };
        match &mut r.decode {
            Some((_, end, n)) if *end == s.start => {
                *end = s.end;
                *n += 1;
            }
            _ => {
                self.close_decode(id);
                if let Some(r) = self.req(id) {
                    r.decode = Some((s.start, s.end, 1));
                }
            }
        }
    }
}
