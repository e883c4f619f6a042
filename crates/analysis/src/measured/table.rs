//! A measured table: a CSV shaped like a `sweep` CSV, one row per measured
//! run. Columns named by scenario keys (`workload.arrivals.constant.rate`,
//! `parallelism.tensor`, `model.preset`, ...) are the run's settings;
//! columns named by sweep metrics (`ttft_mean_ms`, `tpot_mean_ms`,
//! `e2e_p90_ms`, `output_tokens_per_s`, ...) are what was measured. So a
//! published table of (concurrency, lengths, TP) -> (TTFT, TPOT) can be
//! used as it is.
//!
//! Besides those, a few columns describe a row: `run` (its name), `group`
//! (runs that share a group are left out together in leave-one-out),
//! `failed` (requests that failed: any marks the run saturated),
//! `saturated` (any non-empty text marks it saturated, the text saying
//! why), `excluded` (any non-empty text: a run the engine cannot
//! represent, listed with the text as the reason and never simulated; its
//! settings are still checked as key paths) and `source`, `note` (kept,
//! not read). Lines starting with `#`
//! are comments (for provenance). An empty cell is a setting left as the
//! scenario has it, or a figure not measured. Any other column is an
//! error naming the nearest valid name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::sweep::metric::Metric;
use llmsim_scenario::config::{ConfigError, Override, keys};

/// The descriptive columns, besides keys and metrics.
pub const LABELS: [&str; 7] = ["run", "group", "failed", "saturated", "excluded", "source", "note"];

/// One row: a measured run.
#[derive(Clone, Debug, PartialEq)]
pub struct TableRow {
    /// 1-based line in the file.
    pub line: usize,
    pub name: String,
    pub group: Option<String>,
    /// The settings, in column order.
    pub settings: Vec<Override>,
    pub measured: BTreeMap<Metric, f64>,
    pub failed: Option<u64>,
    pub saturated: Option<String>,
    /// Why the run is not simulated at all (the engine cannot represent it).
    pub excluded: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredTable {
    pub file: PathBuf,
    pub rows: Vec<TableRow>,
}

/// What a header names.
enum Column {
    Key(String),
    Metric(Metric),
    Label(&'static str),
}

/// Whether CSV header fields look like a measured table: no `arrival_s`
/// (that is a trace) and at least one metric column.
pub fn looks_like_table(headers: &[&str]) -> bool {
    !headers.contains(&"arrival_s") && headers.iter().any(|h| Metric::parse(h.trim()).is_some())
}

/// Reads a measured table.
pub fn load(file: &Path) -> Result<MeasuredTable, ConfigError> {
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Measured, file)?;
    parse(&text, file)
}

/// Parses measured-table text; `file` names it in errors.
pub fn parse(text: &str, file: &Path) -> Result<MeasuredTable, ConfigError> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).comment(Some(b'#')).from_reader(text.as_bytes());
    let headers =
        reader.headers().map_err(|e| ConfigError::new(file, "header", format!("unreadable CSV header: {e}")))?.clone();
    let columns = headers
        .iter()
        .map(|h| column(h).map_err(|m| ConfigError::new(file, "header", m)))
        .collect::<Result<Vec<_>, _>>()?;
    if !columns.iter().any(|c| matches!(c, Column::Metric(_))) {
        return Err(ConfigError::new(
            file,
            "header",
            "no measured column: name at least one sweep metric (ttft_mean_ms, e2e_p90_ms, ...)",
        ));
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            ConfigError::new(file, format!("line {line}"), format!("unreadable CSV row: {e}"))
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        rows.push(row(&columns, &headers, &record, line, file)?);
    }
    if rows.is_empty() {
        return Err(ConfigError::new(file, "", "the table has no rows: add one row per measured run"));
    }
    Ok(MeasuredTable { file: file.to_path_buf(), rows })
}

fn column(h: &str) -> Result<Column, String> {
    if let Some(m) = Metric::parse(h) {
        return Ok(Column::Metric(m));
    }
    if let Some(l) = LABELS.iter().find(|l| **l == h) {
        return Ok(Column::Label(l));
    }
    match keys::check_path(h) {
        Ok(_) => Ok(Column::Key(h.to_string())),
        Err(_) => {
            let metrics: Vec<String> = Metric::all().iter().map(|m| m.name()).collect();
            let names = metrics.iter().map(String::as_str).chain(LABELS).chain(keys::all().keys().map(String::as_str));
            let hint =
                llmsim_core::util::nearest(h, names).map(|n| format!(" (did you mean `{n}`?)")).unwrap_or_default();
            Err(format!(
                "column `{h}` is neither a scenario key, a sweep metric nor one of {}{hint}",
                LABELS.join(", ")
            ))
        }
    }
}

fn row(
    columns: &[Column],
    headers: &csv::StringRecord,
    record: &csv::StringRecord,
    line: usize,
    file: &Path,
) -> Result<TableRow, ConfigError> {
    let at = |h: &str| format!("line {line}, column {h}");
    let mut out = TableRow {
        line,
        name: format!("row {}", line.saturating_sub(1)),
        group: None,
        settings: Vec::new(),
        measured: BTreeMap::new(),
        failed: None,
        saturated: None,
        excluded: None,
    };
    for ((col, h), cell) in columns.iter().zip(headers.iter()).zip(record.iter()) {
        if cell.is_empty() {
            continue;
        }
        match col {
            Column::Key(key) => {
                let o =
                    Override::parse_checked(&format!("{key}={cell}")).map_err(|m| ConfigError::new(file, at(h), m))?;
                out.settings.push(o);
            }
            Column::Metric(m) => {
                let x: f64 = cell.parse().ok().filter(|x: &f64| x.is_finite() && *x > 0.0).ok_or_else(|| {
                    ConfigError::new(
                        file,
                        at(h),
                        format!("`{cell}` is not allowed: a measured figure is a number greater than 0"),
                    )
                })?;
                out.measured.insert(*m, x);
            }
            Column::Label("run") => out.name = cell.to_string(),
            Column::Label("group") => out.group = Some(cell.to_string()),
            Column::Label("failed") => {
                out.failed = Some(cell.parse().map_err(|_| {
                    ConfigError::new(file, at(h), format!("`{cell}` is not a whole number of failed requests"))
                })?);
            }
            Column::Label("saturated") => out.saturated = Some(cell.to_string()),
            Column::Label("excluded") => out.excluded = Some(cell.to_string()),
            Column::Label(_) => {}
        }
    }
    Ok(out)
}

impl TableRow {
    /// Why the row counts as saturated, if it does.
    pub fn saturation(&self) -> Option<String> {
        if let Some(why) = &self.saturated {
            return Some(format!("marked saturated in the table: {why}"));
        }
        match self.failed {
            Some(n) if n > 0 => Some(format!("{n} requests failed")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::metric::{Family, Stat};

    fn parse_str(text: &str) -> Result<MeasuredTable, String> {
        parse(text, Path::new("t.csv")).map_err(|e| e.to_string())
    }

    #[test]
    fn settings_figures_and_labels_are_read_by_column_name() {
        let t = parse_str(
            "# from a paper\nrun,group,workload.arrivals.constant.rate,parallelism.tensor,ttft_mean_ms,e2e_p90_ms,failed\n\
             a,g1,5,2,25.5,1800,0\nb,g1,10,,30,,2\n",
        )
        .unwrap();
        assert_eq!(t.rows.len(), 2);
        let a = &t.rows[0];
        assert_eq!((a.name.as_str(), a.group.as_deref(), a.line), ("a", Some("g1"), 3));
        assert_eq!(a.settings.len(), 2);
        assert_eq!(a.settings[0].key(), "workload.arrivals.constant.rate");
        assert_eq!(a.measured[&Metric::Latency(Family::Ttft, Stat::Mean)], 25.5);
        assert_eq!(a.saturation(), None);
        let b = &t.rows[1];
        assert_eq!(b.settings.len(), 1, "an empty cell leaves the scenario's value");
        assert!(!b.measured.contains_key(&Metric::Latency(Family::E2e, Stat::P90)));
        assert_eq!(b.saturation().as_deref(), Some("2 requests failed"));
    }

    #[test]
    fn an_excluded_row_keeps_its_reason_and_figures() {
        let t =
            parse_str("run,model.preset,excluded,ttft_mean_ms\na,llama-3.1-8b,,10\nb,,\"MoE, expert parallel\",20\n")
                .unwrap();
        assert_eq!(t.rows[0].excluded, None, "an empty cell excludes nothing");
        let b = &t.rows[1];
        assert_eq!(b.excluded.as_deref(), Some("MoE, expert parallel"));
        assert_eq!(b.measured[&Metric::Latency(Family::Ttft, Stat::Mean)], 20.0);
        assert_eq!(b.saturation(), None, "excluded is not saturated: it is not simulated at all");
    }

    #[test]
    fn a_stranger_column_gets_the_nearest_name() {
        let e = parse_str("ttft_mean_ms,ttft_p90ms\n1,2\n").unwrap_err();
        assert!(e.contains("column `ttft_p90ms`") && e.contains("did you mean `ttft_p90_ms`"), "{e}");
        let e = parse_str("workload.arrivals.constant.rat,ttft_mean_ms\n1,2\n").unwrap_err();
        assert!(e.contains("did you mean `workload.arrivals.constant.rate`"), "{e}");
    }

    #[test]
    fn bad_cells_name_their_line_and_column() {
        let e = parse_str("parallelism.tensor,ttft_mean_ms\nlots,2\n").unwrap_err();
        assert!(e.contains("line 2, column parallelism.tensor") && e.contains("whole number"), "{e}");
        let e = parse_str("ttft_mean_ms\n0\n").unwrap_err();
        assert!(e.contains("greater than 0"), "{e}");
        let e = parse_str("run,parallelism.tensor\na,2\n").unwrap_err();
        assert!(e.contains("no measured column"), "{e}");
        let e = parse_str("ttft_mean_ms\n").unwrap_err();
        assert!(e.contains("no rows"), "{e}");
    }

    #[test]
    fn a_trace_is_not_a_table() {
        assert!(!looks_like_table(&["arrival_s", "prompt_tokens", "output_tokens", "ttft_ms"]));
        assert!(looks_like_table(&["rate", "ttft_mean_ms"]));
    }
}
