//! The trace CSV: `arrival_s,prompt_tokens,output_tokens`, one request a
//! row, extra columns ignored. `llmsim trace` writes it; a `trace:` workload
//! and any other tool read it.

use std::io::Write;
use std::path::Path;

use crate::config::num::{short_float, short_text};
use crate::config::{ConfigError, limits};
use crate::time::SimTime;

/// One request of a trace.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TraceRow {
    pub arrival: SimTime,
    pub prompt: u32,
    pub output: u32,
}

pub const COLUMNS: [&str; 3] = ["arrival_s", "prompt_tokens", "output_tokens"];

/// Reads and checks a trace file: the columns exist, every value is a
/// number of the right kind, arrivals lie in [`limits::ARRIVAL_S`] and never
/// decrease, and there are 1 to [`limits::MAX_REQUESTS`] rows in at most
/// [`limits::MAX_TRACE_BYTES`] bytes.
pub fn read(file: &Path) -> Result<Vec<TraceRow>, ConfigError> {
    let text = crate::config::read_text_limited(file, limits::MAX_TRACE_BYTES)?;
    parse(&text, file)
}

/// Parses trace CSV text; `file` names it in errors.
pub fn parse(text: &str, file: &Path) -> Result<Vec<TraceRow>, ConfigError> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(text.as_bytes());
    let headers =
        reader.headers().map_err(|e| ConfigError::new(file, "line 1", format!("unreadable CSV header: {e}")))?.clone();
    let mut index = [0usize; 3];
    for (slot, name) in index.iter_mut().zip(COLUMNS) {
        *slot = headers.iter().position(|h| h == name).ok_or_else(|| {
            ConfigError::new(
                file,
                "line 1",
                format!(
                    "missing column `{name}`: the header must name arrival_s, prompt_tokens and \
                     output_tokens (found: {})",
                    headers.iter().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
    }
    let mut rows = Vec::new();
    let mut last = SimTime::ZERO;
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            ConfigError::new(file, format!("line {line}"), format!("unreadable CSV row: {e}"))
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let at = |col: usize| format!("line {line}, column {}", COLUMNS[col]);
        let field = |col: usize| record.get(index[col]).unwrap_or("");
        let secs: f64 = field(0).parse().ok().filter(|s: &f64| !s.is_nan()).ok_or_else(|| {
            ConfigError::new(file, at(0), format!("`{}` is not a number of seconds", short_text(field(0))))
        })?;
        if secs < 0.0 {
            return Err(ConfigError::new(
                file,
                at(0),
                format!("{} is not allowed: arrivals must be >= 0", short_float(secs)),
            ));
        }
        if !limits::ARRIVAL_S.contains(secs) {
            return Err(ConfigError::new(
                file,
                at(0),
                format!("{} is not allowed: arrivals must be in {}", short_float(secs), limits::ARRIVAL_S),
            ));
        }
        if rows.len() as u64 >= limits::MAX_REQUESTS {
            return Err(ConfigError::new(
                file,
                format!("line {line}"),
                format!(
                    "more than {} rows: a run may issue at most {} requests",
                    crate::report::thousands(limits::MAX_REQUESTS),
                    crate::report::thousands(limits::MAX_REQUESTS)
                ),
            ));
        }
        let arrival = SimTime::from_secs_f64(secs);
        if arrival < last {
            return Err(ConfigError::new(
                file,
                at(0),
                format!("{} is earlier than the row before ({last}): arrivals must not decrease", short_float(secs)),
            ));
        }
        last = arrival;
        let tokens = |col: usize| -> Result<u32, ConfigError> {
            let v = field(col);
            match v.parse::<u64>() {
                Ok(n) if (1..=u64::from(u32::MAX)).contains(&n) => Ok(n as u32),
                _ => Err(ConfigError::new(
                    file,
                    at(col),
                    format!("`{}` is not allowed: must be a whole number of tokens >= 1", short_text(v)),
                )),
            }
        };
        rows.push(TraceRow { arrival, prompt: tokens(1)?, output: tokens(2)? });
    }
    if rows.is_empty() {
        return Err(ConfigError::new(file, "", "the trace has no requests: add at least one row"));
    }
    Ok(rows)
}

/// Writes rows in the trace format, arrivals with nine decimals (exact ns).
pub fn write<W: Write>(out: W, rows: &[TraceRow]) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(COLUMNS)?;
    for r in rows {
        w.write_record([r.arrival.to_string(), r.prompt.to_string(), r.output.to_string()])?;
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
