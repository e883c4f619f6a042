//! Trace files: one request a row.
//!
//! * The trace CSV: `arrival_s,prompt_tokens,output_tokens`, extra columns
//!   ignored. `llmsim trace` writes it; a `trace:` workload and any other
//!   tool read it. Optional content columns (docs/prefix-caching.md):
//!   `prefix_id,prefix_tokens` (the first `prefix_tokens` of the prompt are
//!   the content named `prefix_id`, shared by every row naming it) and
//!   `session_id` (a row continues the latest earlier row of the same
//!   session: its prompt begins with that row's prompt and output, so its
//!   `prompt_tokens` must be at least their sum; its prefix columns are then
//!   ignored and its `arrival_s` stands as given).
//! * A Mooncake-style JSONL trace (sniffed: the first character is `{`):
//!   `timestamp` (milliseconds), `input_length`, `output_length` and
//!   `hash_ids`, one id per block of `hash_block_size` tokens (512 in
//!   Mooncake's traces), so `ceil(input_length / hash_block_size)` ids. Each
//!   id names the content of its block of the prompt: rows that share
//!   leading ids share a prefix. The same id in another position is the
//!   same tokens there too (Mooncake ids are prefix hashes, so that does not
//!   happen in practice).

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

pub mod time;

use crate::input::{self, Input, InputError, Kind};
use crate::limits;
use llmsim_core::time::SimTime;
use llmsim_core::util::{short_float, short_text, thousands};

/// A trace file that cannot be used as written: the file, where in it
/// (`line 3, column arrival_s`, or empty), and what is wrong. Shown as a
/// [`crate::config::ConfigError`] is (`file: where: message`), into which
/// it converts.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{}{}{}: {message}", file.display(), if at.is_empty() { "" } else { ": " }, at)]
pub struct TraceError {
    pub file: PathBuf,
    pub at: String,
    pub message: String,
}

impl TraceError {
    pub fn new(file: &Path, at: impl Into<String>, message: impl Into<String>) -> Self {
        TraceError { file: file.to_path_buf(), at: at.into(), message: message.into() }
    }
}

impl From<InputError> for TraceError {
    fn from(e: InputError) -> Self {
        TraceError::new(&e.file, "", e.message())
    }
}

/// One request of a trace.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TraceRow {
    pub arrival: SimTime,
    pub prompt: u32,
    pub output: u32,
}

pub const COLUMNS: [&str; 3] = ["arrival_s", "prompt_tokens", "output_tokens"];

/// A column of wall-clock times standing for `arrival_s` when that is
/// absent ([`time`]): arrivals are each row's time less the
/// first row's.
pub const TIMESTAMP_COLUMN: &str = "timestamp";

/// The latest arrival a trace may have: [`limits::ARRIVAL_S`]'s end in
/// nanoseconds, exactly.
const MAX_ARRIVAL_NS: u64 = limits::MAX_SIM_SECONDS as u64 * 1_000_000_000;

/// The optional content columns, in the order `llmsim trace` writes them.
pub const CONTENT_COLUMNS: [&str; 3] = ["prefix_id", "prefix_tokens", "session_id"];

/// The optional column naming each row's class (`workload.classes`,
/// docs/priorities.md).
pub const CLASS_COLUMN: &str = "class";

/// A trace's `class` column: the names in order of first appearance, and
/// each row's, as an index into them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassColumn {
    pub names: Vec<String>,
    pub of_row: Vec<u16>,
}

/// The most distinct names a `class` column may hold.
pub const MAX_CLASS_NAMES: usize = 1024;

/// Tokens per `hash_ids` entry in Mooncake's published traces.
pub const MOONCAKE_BLOCK_SIZE: u32 = 512;

/// A named shared prefix: the first `tokens` of the prompt are content `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prefix {
    pub id: String,
    pub tokens: u32,
}

/// What a trace says about one row's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowContent {
    pub prefix: Option<Prefix>,
    pub session: Option<String>,
    /// The latest earlier row of the same session (its index), if any.
    pub parent: Option<u32>,
    /// A JSONL trace's `hash_ids`, one per block of `hash_block_size` tokens.
    pub hash_ids: Vec<u64>,
    /// The `block_ids,block_size` columns (a `llmsim serve --record` file).
    pub blocks: Option<Blocks>,
}

/// A row's content as the ids of its full KV blocks, prompt then answer,
/// as `llmsim serve --record` writes it with prefix caching on: every
/// block the engine can compute (`floor((P + N - 1) / block_size)` of
/// them) gets an id, and two blocks have the same id exactly when their
/// tokens, from the first token of the request on, are the same. Written
/// as ranges (`0-61 62 70-75`: ids 0 to 61, 62, 70 to 75).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Blocks {
    pub ids: Vec<u64>,
    pub block_size: u32,
}

/// The optional columns of block ids and their block size.
pub const BLOCK_COLUMNS: [&str; 2] = ["block_ids", "block_size"];

impl Blocks {
    /// The ids as ranges of consecutive ids, space-separated.
    pub fn ranges(&self) -> String {
        let mut out = String::new();
        let mut i = 0;
        while i < self.ids.len() {
            let mut j = i;
            while j + 1 < self.ids.len() && self.ids[j + 1] == self.ids[j].wrapping_add(1) {
                j += 1;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            match j > i {
                true => out.push_str(&format!("{}-{}", self.ids[i], self.ids[j])),
                false => out.push_str(&self.ids[i].to_string()),
            }
            i = j + 1;
        }
        out
    }

    /// Reads [`Blocks::ranges`] text; the error says what is wrong.
    pub fn parse_ranges(text: &str, limit: u64) -> Result<Vec<u64>, String> {
        let mut ids = Vec::new();
        for part in text.split_whitespace() {
            let num = |t: &str| {
                t.parse::<u64>().map_err(|_| format!("`{}` is not an id (a whole number >= 0)", short_text(t)))
            };
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => (num(part)?, num(part)?),
            };
            if b < a {
                return Err(format!("`{}` is not a range: the end is below the start", short_text(part)));
            }
            if (ids.len() as u64).saturating_add(b - a + 1) > limit {
                return Err(format!("more ids than the row's {limit} full blocks"));
            }
            ids.extend(a..=b);
        }
        Ok(ids)
    }
}

/// The content of every row of a trace that has content columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContent {
    pub rows: Vec<RowContent>,
    /// Set for a JSONL trace: tokens per hash id.
    pub hash_block_size: Option<u32>,
}

/// Reads and checks a trace file: the columns exist, every value is a
/// number of the right kind, arrivals lie in [`limits::ARRIVAL_S`] and never
/// decrease, and there are 1 to [`limits::MAX_REQUESTS`] rows in at most
/// [`limits::MAX_TRACE_BYTES`] bytes.
pub fn read(file: &Path) -> Result<Vec<TraceRow>, TraceError> {
    Ok(read_with_content(file, None)?.0)
}

/// Reads a trace CSV or a Mooncake-style JSONL trace (`hash_block_size`
/// tokens per hash id, default 512), with its content if it has any. The
/// file is parsed as it is read ([`crate::input`]).
pub fn read_with_content(
    file: &Path,
    hash_block_size: Option<u32>,
) -> Result<(Vec<TraceRow>, Option<TraceContent>), TraceError> {
    read_input(input::open(Kind::Trace, file)?, hash_block_size)
}

/// [`read_with_content`] of a file already open (a trace given as a
/// measured file to `run --trace-from`).
pub fn read_input(
    input: Input,
    hash_block_size: Option<u32>,
) -> Result<(Vec<TraceRow>, Option<TraceContent>), TraceError> {
    read_input_classes(input, hash_block_size).map(|(rows, content, _)| (rows, content))
}

/// [`read_with_content`] with the trace's `class` column, if it has one
/// (a CSV trace's; a JSONL trace has none).
pub fn read_with_classes(file: &Path, hash_block_size: Option<u32>) -> Result<Parsed, TraceError> {
    read_input_classes(input::open(Kind::Trace, file)?, hash_block_size)
}

/// A trace's rows, content and `class` column.
pub type Parsed = (Vec<TraceRow>, Option<TraceContent>, Option<ClassColumn>);

fn read_input_classes(mut input: Input, hash_block_size: Option<u32>) -> Result<Parsed, TraceError> {
    if input.first_non_space()? == Some(b'{') {
        let bs = hash_block_size.unwrap_or(MOONCAKE_BLOCK_SIZE);
        let (file, kind) = (input.file().to_path_buf(), input.kind());
        return parse_jsonl_from(input, &file, kind, bs).map(|(rows, content)| (rows, Some(content), None));
    }
    let (file, kind) = (input.file().to_path_buf(), input.kind());
    parse_csv_from(input, &file, kind)
}

/// Parses trace CSV text; `file` names it in errors.
pub fn parse(text: &str, file: &Path) -> Result<Vec<TraceRow>, TraceError> {
    Ok(parse_with_content(text, file)?.0)
}

/// Parses trace CSV text with its optional content columns (`None` when it
/// has none of them).
pub fn parse_with_content(text: &str, file: &Path) -> Result<(Vec<TraceRow>, Option<TraceContent>), TraceError> {
    parse_csv_from(text.as_bytes(), file, Kind::Trace).map(|(rows, content, _)| (rows, content))
}

/// Parses trace CSV text with its content and `class` columns.
pub fn parse_with_classes(text: &str, file: &Path) -> Result<Parsed, TraceError> {
    parse_csv_from(text.as_bytes(), file, Kind::Trace)
}

/// A CSV error: an IO error is the input's (the limit, UTF-8), any other
/// the CSV's own at `at`.
fn csv_error(file: &Path, kind: Kind, at: String, what: &str, e: &csv::Error) -> TraceError {
    match e.kind() {
        csv::ErrorKind::Io(io) => InputError::from_io(file, kind, io).into(),
        _ => TraceError::new(file, at, format!("unreadable CSV {what}: {e}")),
    }
}

/// Parses a trace CSV as it is read from `reader`; `kind` is the file's,
/// for the message of a read that passes its limit.
fn parse_csv_from<R: Read>(reader: R, file: &Path, kind: Kind) -> Result<Parsed, TraceError> {
    // Names and fields are trimmed as `csv::Trim::All` trims them, but one
    // field at a time as it is read: the reader's trim copies every row.
    let mut reader = csv::ReaderBuilder::new().from_reader(reader);
    let raw = reader.headers().map_err(|e| csv_error(file, kind, "line 1".into(), "header", &e))?.clone();
    let headers: Vec<&str> = raw.iter().map(str::trim).collect();
    let (index, stamped) = required_columns(&headers, file)?;
    let optional = CONTENT_COLUMNS.map(|name| headers.iter().position(|h| *h == name));
    if optional[0].is_some() != optional[1].is_some() {
        return Err(TraceError::new(
            file,
            "line 1",
            "columns prefix_id and prefix_tokens go together: give both or neither",
        ));
    }
    let blocks = BLOCK_COLUMNS.map(|name| headers.iter().position(|h| *h == name));
    if blocks[0].is_some() != blocks[1].is_some() {
        return Err(TraceError::new(
            file,
            "line 1",
            "columns block_ids and block_size go together: give both or neither",
        ));
    }
    let any = optional.iter().chain(&blocks).any(Option::is_some);
    let mut content = any.then(|| ContentReader::new(file));
    let class_at = headers.iter().position(|h| *h == CLASS_COLUMN);
    let mut classes = class_at.map(|_| ClassColumn::default());
    // Each name's index (looked up, never iterated).
    let mut class_index: HashMap<String, u16> = HashMap::new();
    let mut rows = Vec::new();
    let mut last = SimTime::ZERO;
    // The first row's timestamp (nanoseconds, and whether it had a date).
    let mut first_stamp: Option<(u64, bool)> = None;
    // One record, read into again and again: no allocation a row.
    let mut record = csv::StringRecord::new();
    loop {
        let more = reader.read_record(&mut record).map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            csv_error(file, kind, format!("line {line}"), "row", &e)
        })?;
        if !more {
            break;
        }
        let line = record.position().map_or(0, |p| p.line());
        let at = |col: usize| {
            let name = if stamped && col == 0 { TIMESTAMP_COLUMN } else { COLUMNS[col] };
            format!("line {line}, column {name}")
        };
        let field = |col: usize| record.get(index[col]).map_or("", str::trim);
        let stamp_text;
        let sent = match stamped {
            false => field(0),
            true => {
                stamp_text = stamp_arrival(field(0), &mut first_stamp).map_err(|m| TraceError::new(file, at(0), m))?;
                stamp_text.as_str()
            }
        };
        let secs: f64 = sent.parse().ok().filter(|s: &f64| !s.is_nan()).ok_or_else(|| {
            TraceError::new(file, at(0), format!("`{}` is not a number of seconds", short_text(sent)))
        })?;
        if secs < 0.0 {
            return Err(TraceError::new(
                file,
                at(0),
                format!("{} is not allowed: arrivals must be >= 0", short_text(sent)),
            ));
        }
        // Decimal seconds are read exactly (`llmsim trace` writes nine
        // decimals); other spellings (`1e400`, `inf`) through f64, whose
        // range check refuses them.
        let arrival = SimTime::from_decimal_secs(sent).unwrap_or_else(|| SimTime::from_secs_f64(secs));
        if !limits::ARRIVAL_S.contains(secs) || arrival.as_nanos() > MAX_ARRIVAL_NS {
            return Err(TraceError::new(
                file,
                at(0),
                format!("{} is not allowed: arrivals must be in {}", short_text(sent), limits::ARRIVAL_S),
            ));
        }
        if rows.len() as u64 >= limits::MAX_REQUESTS {
            return Err(TraceError::new(
                file,
                format!("line {line}"),
                format!(
                    "more than {} rows: a run may issue at most {} requests",
                    thousands(limits::MAX_REQUESTS),
                    thousands(limits::MAX_REQUESTS)
                ),
            ));
        }
        if arrival < last {
            return Err(TraceError::new(
                file,
                at(0),
                format!("{} is earlier than the row before ({last}): arrivals must not decrease", short_text(sent)),
            ));
        }
        last = arrival;
        let tokens = |col: usize| -> Result<u32, TraceError> {
            let v = field(col);
            match v.parse::<u64>() {
                Ok(n) if (1..=u64::from(u32::MAX)).contains(&n) => Ok(n as u32),
                _ => Err(TraceError::new(
                    file,
                    at(col),
                    format!("`{}` is not allowed: must be a whole number of tokens >= 1", short_text(v)),
                )),
            }
        };
        let row = TraceRow { arrival, prompt: tokens(1)?, output: tokens(2)? };
        if let Some(c) = &mut content {
            let cell = |col: Option<usize>| col.and_then(|i| record.get(i)).map_or("", str::trim);
            c.add(line, &row, [cell(optional[0]), cell(optional[1]), cell(optional[2])], &rows)?;
            c.add_blocks(line, &row, [cell(blocks[0]), cell(blocks[1])])?;
        }
        if let (Some(col), Some(classes)) = (class_at, &mut classes) {
            let name = record.get(col).map_or("", str::trim);
            let at = || format!("line {line}, column {CLASS_COLUMN}");
            if name.is_empty() {
                return Err(TraceError::new(file, at(), "empty: every row of a class column names its class"));
            }
            let index = match class_index.get(name) {
                Some(&i) => i,
                None if classes.names.len() >= MAX_CLASS_NAMES => {
                    return Err(TraceError::new(
                        file,
                        at(),
                        format!(
                            "more than {MAX_CLASS_NAMES} distinct classes: a trace names at most {MAX_CLASS_NAMES}"
                        ),
                    ));
                }
                None => {
                    let i = classes.names.len() as u16;
                    classes.names.push(name.to_string());
                    class_index.insert(name.to_string(), i);
                    i
                }
            };
            classes.of_row.push(index);
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(TraceError::new(file, "", "the trace has no requests: add at least one row"));
    }
    Ok((rows, content.map(|c| TraceContent { rows: c.rows, hash_block_size: None }), classes))
}

/// Where the three required columns are (`timestamp` standing for
/// `arrival_s` when that is absent, which the second value says).
fn required_columns(headers: &[&str], file: &Path) -> Result<([usize; 3], bool), TraceError> {
    let mut index = [0usize; 3];
    // A `timestamp` column stands for `arrival_s` when that is absent.
    let stamped = !headers.contains(&COLUMNS[0]) && headers.contains(&TIMESTAMP_COLUMN);
    for (slot, name) in index.iter_mut().zip(COLUMNS) {
        let name = if stamped && name == COLUMNS[0] { TIMESTAMP_COLUMN } else { name };
        *slot = headers.iter().position(|h| *h == name).ok_or_else(|| {
            TraceError::new(
                file,
                "line 1",
                format!(
                    "missing column `{name}`: the header must name arrival_s (or timestamp), prompt_tokens \
                     and output_tokens (found: {})",
                    headers.join(", ")
                ),
            )
        })?;
    }
    Ok((index, stamped))
}

/// A `timestamp` cell as decimal seconds since the first row's (which
/// `first` keeps: its nanoseconds and whether it had a date).
fn stamp_arrival(cell: &str, first: &mut Option<(u64, bool)>) -> Result<String, String> {
    let (ns, dated) = time::parse(cell)?;
    let (start, start_dated) = *first.get_or_insert((ns, dated));
    if dated != start_dated {
        return Err("mixes dates and times of day: give every row a date, or none".to_string());
    }
    if ns < start {
        return Err(format!("`{}` is earlier than the first row: times must not decrease", short_text(cell)));
    }
    Ok(SimTime::from_nanos(ns - start).to_string())
}

/// Reads the content columns row by row, linking sessions.
struct ContentReader<'a> {
    file: &'a Path,
    rows: Vec<RowContent>,
    /// The CSV line of each row, for errors that name an earlier row.
    lines: Vec<u64>,
    /// Each session's latest row (looked up, never iterated).
    latest: HashMap<String, u32>,
    /// The block size of the `block_ids` read so far.
    block_size: Option<u32>,
}

impl<'a> ContentReader<'a> {
    fn new(file: &'a Path) -> Self {
        ContentReader { file, rows: Vec::new(), lines: Vec::new(), latest: HashMap::new(), block_size: None }
    }

    /// `cells`: the row's `prefix_id`, `prefix_tokens` and `session_id`
    /// (empty when absent); `before`: the rows read so far.
    fn add(&mut self, line: u64, row: &TraceRow, cells: [&str; 3], before: &[TraceRow]) -> Result<(), TraceError> {
        let err = |col: &str, msg: String| TraceError::new(self.file, format!("line {line}, column {col}"), msg);
        let [id, tokens, session] = cells;
        let session = (!session.is_empty()).then(|| session.to_string());
        let parent = session.as_ref().and_then(|s| self.latest.get(s).copied());
        let prefix = match (id.is_empty(), tokens) {
            (true, "" | "0") => None,
            (true, t) => {
                return Err(err(
                    "prefix_tokens",
                    format!("`{t}` without a prefix_id: name the prefix or leave both empty"),
                ));
            }
            (false, t) => match t.parse::<u64>() {
                Ok(n) if (1..=u64::from(u32::MAX)).contains(&n) => {
                    Some(Prefix { id: id.to_string(), tokens: n as u32 })
                }
                _ => {
                    return Err(err(
                        "prefix_tokens",
                        format!("`{t}` is not allowed: prefix `{id}` needs a whole number of tokens >= 1"),
                    ));
                }
            },
        };
        match (parent, &prefix) {
            (Some(p), _) => {
                let prev = before[p as usize];
                let history = u64::from(prev.prompt) + u64::from(prev.output);
                if u64::from(row.prompt) < history {
                    return Err(err(
                        "prompt_tokens",
                        format!(
                            "{} is shorter than the history it continues: session `{}` was last at line {} \
                             with prompt_tokens {} + output_tokens {} = {history}, and a continuation's \
                             prompt is that history plus its new tokens",
                            row.prompt,
                            session.as_deref().unwrap_or_default(),
                            self.lines[p as usize],
                            prev.prompt,
                            prev.output
                        ),
                    ));
                }
            }
            (None, Some(pre)) if pre.tokens > row.prompt => {
                return Err(err(
                    "prefix_tokens",
                    format!(
                        "{} is larger than prompt_tokens {}: the prefix is part of the prompt",
                        pre.tokens, row.prompt
                    ),
                ));
            }
            _ => {}
        }
        let index = self.rows.len() as u32;
        if let Some(s) = &session {
            self.latest.insert(s.clone(), index);
        }
        self.rows.push(RowContent { prefix, session, parent, ..RowContent::default() });
        self.lines.push(line);
        Ok(())
    }

    /// The row's `block_ids` and `block_size` cells (empty when absent),
    /// after [`ContentReader::add`] took its other columns.
    fn add_blocks(&mut self, line: u64, row: &TraceRow, cells: [&str; 2]) -> Result<(), TraceError> {
        let err = |col: &str, msg: String| TraceError::new(self.file, format!("line {line}, column {col}"), msg);
        let [ids, size] = cells;
        if size.is_empty() {
            if !ids.is_empty() {
                return Err(err("block_size", "empty: block_ids need the block size they were counted in".into()));
            }
            return Ok(());
        }
        let block_size = match size.parse::<u64>() {
            Ok(n) if limits::BLOCK_SIZE.contains(n as f64) => n as u32,
            _ => {
                return Err(err(
                    "block_size",
                    format!("`{}` is not allowed: must be a whole number in {}", short_text(size), limits::BLOCK_SIZE),
                ));
            }
        };
        if let Some(first) = self.block_size.filter(|&b| b != block_size) {
            return Err(err(
                "block_size",
                format!("{block_size} differs from the {first} of the rows before: a trace has one block size"),
            ));
        }
        self.block_size = Some(block_size);
        let full = (u64::from(row.prompt) + u64::from(row.output) - 1) / u64::from(block_size);
        let parsed = Blocks::parse_ranges(ids, full).map_err(|m| err("block_ids", m))?;
        if parsed.len() as u64 != full {
            return Err(err(
                "block_ids",
                format!(
                    "{} ids for a row whose first prompt_tokens + output_tokens - 1 = {} tokens hold {full} \
                     full blocks of {block_size}: give one id per full block",
                    parsed.len(),
                    u64::from(row.prompt) + u64::from(row.output) - 1
                ),
            ));
        }
        let Some(own) = self.rows.last_mut() else { return Ok(()) };
        if own.prefix.is_some() || own.session.is_some() {
            return Err(err(
                "block_ids",
                "given with prefix_id or session_id: block ids describe the whole content, leave the others empty"
                    .into(),
            ));
        }
        own.blocks = Some(Blocks { ids: parsed, block_size });
        Ok(())
    }
}

/// One line of a Mooncake-style trace; other keys are ignored.
#[derive(serde::Deserialize)]
struct JsonRow {
    /// Kept as sent: whole milliseconds convert to nanoseconds exactly.
    timestamp: serde_json::Number,
    input_length: i64,
    output_length: i64,
    #[serde(default)]
    hash_ids: Option<Vec<i64>>,
}

/// A JSONL `timestamp` (milliseconds) as an arrival, if it lies in
/// [`limits::ARRIVAL_S`]: whole milliseconds exactly, others rounded to
/// the nanosecond.
fn timestamp_arrival(ms: &serde_json::Number) -> Option<SimTime> {
    let ns = match ms.as_u64() {
        Some(whole) => whole.checked_mul(1_000_000)?,
        None => {
            let x = ms.as_f64().filter(|x| *x >= 0.0 && *x <= limits::MAX_SIM_SECONDS * 1e3)?;
            llmsim_core::time::secs_to_nanos(x / 1e3)
        }
    };
    (ns <= MAX_ARRIVAL_NS).then_some(SimTime::from_nanos(ns))
}

/// A JSON number as a message shows it: whole numbers in full, others
/// short (`1e15`, not `1000000000000000.0`).
fn as_sent(n: &serde_json::Number) -> String {
    match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => u.to_string(),
        (_, Some(i)) => i.to_string(),
        _ => short_float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// Parses Mooncake-style JSONL trace text with `block_size` tokens per hash id.
pub fn parse_jsonl(text: &str, file: &Path, block_size: u32) -> Result<(Vec<TraceRow>, TraceContent), TraceError> {
    parse_jsonl_from(text.as_bytes(), file, Kind::Trace, block_size)
}

/// Parses a Mooncake-style JSONL trace line by line as it is read.
fn parse_jsonl_from<R: BufRead>(
    mut reader: R,
    file: &Path,
    kind: Kind,
    block_size: u32,
) -> Result<(Vec<TraceRow>, TraceContent), TraceError> {
    let mut rows = Vec::new();
    let mut content = Vec::new();
    let mut last = SimTime::ZERO;
    let mut text = String::new();
    for line in 1.. {
        text.clear();
        let n = reader.read_line(&mut text).map_err(|e| {
            let e = InputError::from_io(file, kind, &e);
            TraceError::new(file, format!("line {line}"), e.message())
        })?;
        if n == 0 {
            break;
        }
        if text.trim().is_empty() {
            continue;
        }
        let at = |key: &str| format!("line {line}, {key}");
        let r: JsonRow = serde_json::from_str(&text).map_err(|e| {
            TraceError::new(
                file,
                format!("line {line}"),
                format!("not a trace record ({e}); each line must be a JSON object with timestamp (ms), input_length, output_length and hash_ids"),
            )
        })?;
        let arrival = timestamp_arrival(&r.timestamp).ok_or_else(|| {
            TraceError::new(
                file,
                at("timestamp"),
                format!(
                    "{} is not allowed: milliseconds in [0, {}] (the simulated-time limit, {} s)",
                    as_sent(&r.timestamp),
                    limits::number(limits::MAX_SIM_SECONDS * 1e3),
                    limits::number(limits::MAX_SIM_SECONDS)
                ),
            )
        })?;
        if rows.len() as u64 >= limits::MAX_REQUESTS {
            return Err(TraceError::new(
                file,
                format!("line {line}"),
                format!(
                    "more than {} lines: a run may issue at most that many requests",
                    thousands(limits::MAX_REQUESTS)
                ),
            ));
        }
        if arrival < last {
            return Err(TraceError::new(
                file,
                at("timestamp"),
                format!("{} ms is earlier than the line before: timestamps must not decrease", as_sent(&r.timestamp)),
            ));
        }
        last = arrival;
        let tokens = |key: &str, v: i64| -> Result<u32, TraceError> {
            if (1..=i64::from(u32::MAX)).contains(&v) {
                Ok(v as u32)
            } else {
                Err(TraceError::new(
                    file,
                    at(key),
                    format!("{v} is not allowed: must be a whole number of tokens >= 1"),
                ))
            }
        };
        let row = TraceRow {
            arrival,
            prompt: tokens("input_length", r.input_length)?,
            output: tokens("output_length", r.output_length)?,
        };
        let ids = r.hash_ids.unwrap_or_default();
        let want = row.prompt.div_ceil(block_size) as usize;
        if !ids.is_empty() && ids.len() != want {
            return Err(TraceError::new(
                file,
                at("hash_ids"),
                format!(
                    "{} hash ids for {} input tokens: with {block_size} tokens per id (workload.hash_block_size) \
                     there must be ceil({} / {block_size}) = {want}; set workload.hash_block_size to the block \
                     size the trace was made with",
                    ids.len(),
                    row.prompt,
                    row.prompt
                ),
            ));
        }
        if let Some(bad) = ids.iter().find(|&&id| id < 0) {
            return Err(TraceError::new(
                file,
                at("hash_ids"),
                format!("{bad} is not allowed: ids are whole numbers >= 0"),
            ));
        }
        rows.push(row);
        content.push(RowContent { hash_ids: ids.into_iter().map(|id| id as u64).collect(), ..RowContent::default() });
    }
    if rows.is_empty() {
        return Err(TraceError::new(file, "", "the trace has no requests: add at least one line"));
    }
    Ok((rows, TraceContent { rows: content, hash_block_size: Some(block_size) }))
}

/// Writes rows in the trace format, arrivals with nine decimals (exact ns).
pub fn write<W: Write>(out: W, rows: &[TraceRow]) -> csv::Result<()> {
    write_with_content(out, rows, None)
}

/// [`fn@write`], plus the content columns when `content` is given (one entry
/// per row; hash ids have no CSV column and are left out), and the block
/// id columns when a row has block ids.
pub fn write_with_content<W: Write>(out: W, rows: &[TraceRow], content: Option<&[RowContent]>) -> csv::Result<()> {
    write_with_classes(out, rows, content, None)
}

/// [`write_with_content`], plus the [`CLASS_COLUMN`] when `classes` (each
/// row's class name) is given.
pub fn write_with_classes<W: Write>(
    out: W,
    rows: &[TraceRow],
    content: Option<&[RowContent]>,
    classes: Option<&[&str]>,
) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let with_blocks = content.is_some_and(|c| c.iter().any(|r| r.blocks.is_some()));
    let mut header: Vec<&str> = COLUMNS.to_vec();
    if content.is_some() {
        header.extend(CONTENT_COLUMNS);
    }
    if with_blocks {
        header.extend(BLOCK_COLUMNS);
    }
    if classes.is_some() {
        header.push(CLASS_COLUMN);
    }
    w.write_record(&header)?;
    for (i, r) in rows.iter().enumerate() {
        let mut record = vec![r.arrival.to_string(), r.prompt.to_string(), r.output.to_string()];
        let c = content.and_then(|c| c.get(i));
        if let Some(c) = c {
            let (id, tokens) =
                c.prefix.as_ref().map_or((String::new(), String::new()), |p| (p.id.clone(), p.tokens.to_string()));
            record.extend([id, tokens, c.session.clone().unwrap_or_default()]);
        } else if content.is_some() {
            record.extend([String::new(), String::new(), String::new()]);
        }
        if with_blocks {
            match c.and_then(|c| c.blocks.as_ref()) {
                Some(b) => record.extend([b.ranges(), b.block_size.to_string()]),
                None => record.extend([String::new(), String::new()]),
            }
        }
        if let Some(classes) = classes {
            record.push(classes.get(i).copied().unwrap_or_default().to_string());
        }
        w.write_record(&record)?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Vec<TraceRow>, String> {
        parse(text, Path::new("t.csv")).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_rows_and_ignores_extra_columns() {
        let rows = parse_str("id,arrival_s,prompt_tokens,output_tokens\na,0.5,10,2\nb,1.25,3,4\n").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1], TraceRow { arrival: SimTime::from_nanos(1_250_000_000), prompt: 3, output: 4 });
    }

    #[test]
    fn names_and_fields_are_trimmed_of_whitespace() {
        // Spaces and tabs around header names and values (and a content
        // column) read as if they were not there.
        let text = " arrival_s ,\tprompt_tokens, output_tokens , session_id\n 0.5 , 10\t, 2 , s1 \n1.25,30,4, s1\n";
        let (rows, content) = parse_with_content(text, Path::new("t.csv")).unwrap();
        assert_eq!(rows[0], TraceRow { arrival: SimTime::from_nanos(500_000_000), prompt: 10, output: 2 });
        assert_eq!(rows[1], TraceRow { arrival: SimTime::from_nanos(1_250_000_000), prompt: 30, output: 4 });
        let content = content.expect("a session column");
        assert_eq!(content.rows[1].session.as_deref(), Some("s1"));
        assert_eq!(content.rows[1].parent, Some(0));
        let e = parse_str("arrival_s,prompt_tokens,output_tokens\n0, x ,1\n").unwrap_err();
        assert!(e.contains("line 2, column prompt_tokens") && e.contains("`x`"), "{e}");
    }

    #[test]
    fn written_traces_read_back_identically() {
        let rows = vec![
            TraceRow { arrival: SimTime::from_nanos(123_456_789), prompt: 5, output: 6 },
            TraceRow { arrival: SimTime::from_nanos(7_000_000_001), prompt: 1, output: 1 },
        ];
        let mut buf = Vec::new();
        write(&mut buf, &rows).unwrap();
        assert_eq!(parse_str(std::str::from_utf8(&buf).unwrap()).unwrap(), rows);
    }

    #[test]
    fn a_trace_at_the_edge_of_the_time_range_reads_back_to_the_nanosecond() {
        // Issue 34: arrivals near 1.5e8 s lost nanoseconds through f64.
        let edge = MAX_ARRIVAL_NS;
        let rows: Vec<TraceRow> = [150_000_000_123_456_789, 150_000_000_123_456_790, edge - 1, edge]
            .into_iter()
            .map(|ns| TraceRow { arrival: SimTime::from_nanos(ns), prompt: 3, output: 2 })
            .collect();
        let mut buf = Vec::new();
        write(&mut buf, &rows).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("\n1000000000.000000000,3,2\n"), "{text}");
        assert_eq!(parse_str(&text).unwrap(), rows);
        // One nanosecond past the limit is refused, as written.
        let e = parse_str("arrival_s,prompt_tokens,output_tokens\n1000000000.000000001,1,1\n").unwrap_err();
        assert!(
            e.contains("line 2, column arrival_s: 1000000000.000000001 is not allowed: arrivals must be in"),
            "{e}"
        );
    }

    #[test]
    fn a_trace_file_is_read_as_a_stream_up_to_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.csv");
        std::fs::write(&f, "arrival_s,prompt_tokens,output_tokens\n0.5,10,2\n").unwrap();
        assert_eq!(read(&f).unwrap().len(), 1);
        std::fs::File::create(&f).unwrap().set_len(limits::MAX_TRACE_BYTES + 1).unwrap();
        let e = read(&f).unwrap_err().to_string();
        assert!(
            e.ends_with("the file is larger than 1,073,741,824 bytes (1 GiB), the most llmsim reads for a trace"),
            "{e}"
        );
    }

    #[test]
    fn a_mooncake_timestamp_past_the_time_limit_is_refused_as_sent() {
        // Issue 34: 1e15 ms was reported as a saturated 18,446,744,073 s.
        let line = |ts: &str| format!("{{\"timestamp\": {ts}, \"input_length\": 10, \"output_length\": 2}}\n");
        let e = parse_jsonl(&line("1e15"), Path::new("m.jsonl"), 512).unwrap_err().to_string();
        assert!(e.contains("line 1, timestamp: 1e15 is not allowed: milliseconds in [0, 1,000,000,000,000]"), "{e}");
        assert!(!e.contains("18,446,744,073"), "{e}");
        let e = parse_jsonl(&line("-3"), Path::new("m.jsonl"), 512).unwrap_err().to_string();
        assert!(e.contains("-3 is not allowed"), "{e}");
        // Whole milliseconds up to the limit convert exactly.
        let text = format!("{}{}", line("999999999999"), line("1000000000000"));
        let (rows, _) = parse_jsonl(&text, Path::new("m.jsonl"), 512).unwrap();
        assert_eq!(rows[0].arrival, SimTime::from_nanos(999_999_999_999_000_000));
        assert_eq!(rows[1].arrival, SimTime::from_nanos(MAX_ARRIVAL_NS));
        assert!(parse_jsonl(&line("1000000000000.001"), Path::new("m.jsonl"), 512).is_err());
    }

    #[test]
    fn a_timestamp_column_is_replayed_from_its_first_row() {
        let text = "timestamp,prompt_tokens,output_tokens\n2026-12-05T23:59:59.5Z,10,2\n\
                    2026-12-06 00:00:01+00:00,3,4\n2026-12-06T01:00:01.25+01:00,5,6\n";
        let rows = parse_str(text).unwrap();
        // 0.5 s to midnight and 1 s past it; 01:00:01.25+01:00 is 00:00:01.25 UTC.
        let at: Vec<u64> = rows.iter().map(|r| r.arrival.as_nanos()).collect();
        assert_eq!(at, [0, 1_500_000_000, 1_750_000_000]);
        let rows =
            parse_str("timestamp,prompt_tokens,output_tokens\n09:00:00,1,1\n09:00:00.25,1,1\n10:00,1,1\n").unwrap();
        let at: Vec<u64> = rows.iter().map(|r| r.arrival.as_nanos()).collect();
        assert_eq!(at, [0, 250_000_000, 3_600_000_000_000]);
        // arrival_s wins when both are given.
        let rows = parse_str("timestamp,arrival_s,prompt_tokens,output_tokens\n09:00,7,1,1\n").unwrap();
        assert_eq!(rows[0].arrival.as_nanos(), 7_000_000_000);
        let e = parse_str("timestamp,prompt_tokens,output_tokens\n09:00,1,1\n2026-12-05T09:00:00Z,1,1\n").unwrap_err();
        assert!(e.contains("line 3, column timestamp") && e.contains("mixes dates and times of day"), "{e}");
        let e = parse_str("timestamp,prompt_tokens,output_tokens\n09:00,1,1\n08:59,1,1\n").unwrap_err();
        assert!(e.contains("line 3, column timestamp") && e.contains("earlier than the first row"), "{e}");
        let e =
            parse_str("timestamp,prompt_tokens,output_tokens\n09:00,1,1\n09:00:30,1,1\n09:00:10,1,1\n").unwrap_err();
        assert!(e.contains("line 4, column timestamp") && e.contains("must not decrease"), "{e}");
        let e = parse_str("timestamp,prompt_tokens,output_tokens\nnoon,1,1\n").unwrap_err();
        assert!(e.contains("line 2, column timestamp") && e.contains("`noon` is not a timestamp"), "{e}");
    }

    #[test]
    fn bad_rows_name_the_line_and_column() {
        let e = parse_str("arrival_s,prompt_tokens\n0,1\n").unwrap_err();
        assert!(e.contains("missing column `output_tokens`"), "{e}");
        let e = parse_str("arrival_s,prompt_tokens,output_tokens\n0,1,1\nsoon,1,1\n").unwrap_err();
        assert!(e.contains("line 3, column arrival_s") && e.contains("`soon`"), "{e}");
        let e = parse_str("arrival_s,prompt_tokens,output_tokens\n-1,1,1\n").unwrap_err();
        assert!(e.contains("must be >= 0"), "{e}");
        let e = parse_str("arrival_s,prompt_tokens,output_tokens\n2,1,1\n1,1,1\n").unwrap_err();
        assert!(e.contains("line 3") && e.contains("must not decrease"), "{e}");
        let e = parse_str("arrival_s,prompt_tokens,output_tokens\n1,0,1\n").unwrap_err();
        assert!(e.contains("column prompt_tokens"), "{e}");
        let e = parse_str("arrival_s,prompt_tokens,output_tokens\n").unwrap_err();
        assert!(e.contains("no requests"), "{e}");
    }
}
