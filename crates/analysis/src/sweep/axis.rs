//! Sweep axes: a scenario key and the values it takes.
//!
//! On the command line an axis is `--set KEY=a,b,c` (a list; commas inside
//! `[...]`, `{...}` or quotes do not split) or `--set KEY=lo:hi:step` (an
//! inclusive range). `--set KEY=value` with one value is a plain override,
//! not an axis. Range values are `lo + i * step`, never accumulated, and
//! rounded to the decimals the bounds were written with, so
//! `0.1:0.3:0.1` is exactly `0.1, 0.2, 0.3`.

use llmsim_scenario::yaml::Value;

use llmsim_scenario::config::Override;
use llmsim_scenario::config::keys::{KeyError, Kind};

/// A sweep axis (`--set KEY=a,b,c`, `KEY=lo:hi:step`, or an `axes:` entry)
/// that cannot be swept.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AxisError {
    #[error(transparent)]
    Key(#[from] KeyError),
    /// `at`: the key, or the whole `--set` text.
    #[error("`{at}`: the axis is empty; give values (a,b,c) or a range (lo:hi:step)")]
    Empty { at: String },
    #[error("`{text}`: expected KEY.PATH=VALUES")]
    NoValues { text: String },
    #[error("`{text}`: value {n} of the axis is empty")]
    EmptyValue { text: String, n: usize },
    #[error("`{text}`: {source}")]
    BadRange { text: String, source: RangeError },
    #[error(transparent)]
    Range(#[from] RangeError),
}

/// An inclusive range `lo:hi:step` that gives no usable values.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RangeError {
    #[error("range bounds must be finite numbers")]
    NotFinite,
    #[error("the range {lo}:{hi}:{step} has a zero step; the step must be greater than 0")]
    ZeroStep { lo: f64, hi: f64, step: f64 },
    #[error("the range {lo}:{hi}:{step} has a negative step; write it lo:hi:step with lo <= hi")]
    NegativeStep { lo: f64, hi: f64, step: f64 },
    #[error("the range {lo}:{hi}:{step} is empty: lo must be <= hi")]
    Empty { lo: f64, hi: f64, step: f64 },
    #[error("the range {lo}:{hi}:{step} has more than {MAX_RANGE_VALUES} values")]
    TooMany { lo: f64, hi: f64, step: f64 },
    #[error("the range {lo}:{hi}:{step} is not whole numbers, and the key takes a whole number")]
    NotWhole { lo: f64, hi: f64, step: f64 },
}

/// Most values one range may produce.
pub const MAX_RANGE_VALUES: usize = 100_000;

/// One axis of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub key: String,
    pub values: Vec<Value>,
}

/// What one `--set` argument of `llmsim sweep` is.
#[derive(Clone, Debug, PartialEq)]
pub enum SetArg {
    Axis(Axis),
    Fixed(Override),
}

impl Axis {
    /// An axis after checking its key and every value's shape.
    pub fn new(key: &str, values: Vec<Value>) -> Result<Axis, AxisError> {
        let kind = Override::parse_key(key)?;
        if values.is_empty() {
            return Err(AxisError::Empty { at: key.to_string() });
        }
        for v in &values {
            llmsim_scenario::config::keys::check_value(key, kind, v)?;
        }
        Ok(Axis { key: key.trim().to_string(), values })
    }

    /// The override that puts this axis at value `i`.
    pub fn at(&self, i: usize) -> Override {
        // invariant: `i` comes from the plan's coordinates, within the axis.
        Override { path: self.key.split('.').map(str::to_string).collect(), value: self.values[i].clone() }
    }

    pub fn labels(&self) -> Vec<String> {
        self.values.iter().map(label).collect()
    }
}

/// How a value is written in CSV cells, tables and plot labels: scalars
/// plainly, anything else as compact JSON.
pub fn label(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_else(|_| format!("{other:?}")),
    }
}

/// Reads one `--set` argument of `llmsim sweep`.
pub fn parse_set(text: &str) -> Result<SetArg, AxisError> {
    let (key, rhs) = text.split_once('=').ok_or_else(|| AxisError::NoValues { text: text.to_string() })?;
    let kind = Override::parse_key(key)?;
    let rhs = rhs.trim();
    if rhs.is_empty() {
        return Err(AxisError::Empty { at: text.to_string() });
    }
    if let Some(values) = parse_range(rhs, kind).transpose() {
        let values = values.map_err(|source| AxisError::BadRange { text: text.to_string(), source })?;
        return Axis::new(key, values).map(SetArg::Axis);
    }
    let parts = split_top_level(rhs);
    if parts.len() == 1 {
        return Ok(SetArg::Fixed(Override::parse_checked(text)?));
    }
    let mut values = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        if part.trim().is_empty() {
            return Err(AxisError::EmptyValue { text: text.to_string(), n: i + 1 });
        }
        values.push(Override::parse_value(part)?);
    }
    Axis::new(key, values).map(SetArg::Axis)
}

/// Splits at commas that are not inside brackets, braces or quotes.
pub fn split_top_level(s: &str) -> Vec<&str> {
    let (mut depth, mut quote, mut start) = (0i32, None, 0);
    let mut parts = Vec::new();
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// `lo:hi:step` with three numbers is a range; anything else is not.
fn parse_range(s: &str, kind: Kind) -> Result<Option<Vec<Value>>, RangeError> {
    let parts: Vec<&str> = s.split(':').map(str::trim).collect();
    if parts.len() != 3 || parts.iter().any(|p| p.parse::<f64>().is_err()) {
        return Ok(None);
    }
    let whole = parts.iter().all(|p| p.parse::<i64>().is_ok());
    let nums: Vec<f64> = parts.iter().filter_map(|p| p.parse::<f64>().ok()).collect();
    let decimals = parts.iter().map(|p| decimals_of(p)).max().unwrap_or(0);
    // invariant: three parts, each checked above to parse as a number.
    range(nums[0], nums[1], nums[2], whole, decimals, kind).map(Some)
}

/// Digits after the point as written (`0.25` has 2), capped at 12.
fn decimals_of(text: &str) -> usize {
    if text.contains(['e', 'E']) {
        return 12;
    }
    text.split_once('.').map_or(0, |(_, frac)| frac.len().min(12))
}

/// The inclusive range `lo, lo + step, ..., <= hi`.
pub fn range(lo: f64, hi: f64, step: f64, whole: bool, decimals: usize, kind: Kind) -> Result<Vec<Value>, RangeError> {
    if !(lo.is_finite() && hi.is_finite() && step.is_finite()) {
        return Err(RangeError::NotFinite);
    }
    if step == 0.0 {
        return Err(RangeError::ZeroStep { lo, hi, step });
    }
    if step < 0.0 {
        return Err(RangeError::NegativeStep { lo, hi, step });
    }
    if hi < lo {
        return Err(RangeError::Empty { lo, hi, step });
    }
    // A hair of slack so that 0.1:0.3:0.1 reaches 0.3 despite binary fractions.
    let last = ((hi - lo) / step + 1e-9).floor();
    if last >= MAX_RANGE_VALUES as f64 {
        return Err(RangeError::TooMany { lo, hi, step });
    }
    if kind == Kind::Integer && !whole {
        return Err(RangeError::NotWhole { lo, hi, step });
    }
    let scale = 10f64.powi(decimals as i32);
    Ok((0..=last as u64)
        .map(|i| {
            let x = lo + i as f64 * step;
            if whole {
                Value::Number((x.round() as i64).into())
            } else {
                Value::Number(((x * scale).round() / scale).into())
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(text: &str) -> Axis {
        match parse_set(text) {
            Ok(SetArg::Axis(a)) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_list_is_an_axis_in_the_order_written() {
        let a = axis("scheduler.max_batch_tokens=8192,2048, 4096");
        assert_eq!(a.key, "scheduler.max_batch_tokens");
        assert_eq!(a.labels(), ["8192", "2048", "4096"]);
    }

    #[test]
    fn commas_inside_brackets_and_quotes_do_not_split() {
        let a = axis("workload.prompt_tokens={uniform: [256, 1024]},512");
        assert_eq!(a.labels(), [r#"{"uniform":[256,1024]}"#, "512"]);
        assert_eq!(split_top_level(r#""a,b",c"#), [r#""a,b""#, "c"]);
    }

    #[test]
    fn a_range_is_inclusive_and_float_safe() {
        assert_eq!(axis("workload.arrivals.poisson.rate=10:50:10").labels(), ["10", "20", "30", "40", "50"]);
        assert_eq!(axis("workload.arrivals.poisson.rate=0.1:0.7:0.1").labels().len(), 7);
        assert_eq!(
            axis("workload.arrivals.poisson.rate=0.1:0.3:0.1").values,
            [0.1, 0.2, 0.3].map(|x| Value::Number(x.into()))
        );
        assert_eq!(axis("workload.arrivals.poisson.rate=1:2:0.25").labels(), ["1.0", "1.25", "1.5", "1.75", "2.0"]);
        assert_eq!(axis("scheduler.max_batch_tokens=1024:4000:1024").labels(), ["1024", "2048", "3072"]);
    }

    #[test]
    fn a_single_value_is_a_plain_override() {
        assert!(matches!(parse_set("workload.requests=500"), Ok(SetArg::Fixed(_))));
        assert!(matches!(parse_set("hardware=h100-80gb"), Ok(SetArg::Fixed(_))));
        assert_eq!(axis("hardware=h100-80gb,a100-80gb").labels(), ["h100-80gb", "a100-80gb"]);
    }

    #[test]
    fn bad_axes_say_what_is_wrong() {
        let err = |t: &str| parse_set(t).unwrap_err().to_string();
        assert!(err("workload.requests=").contains("the axis is empty"));
        assert!(err("workload.requests=1,,3").contains("value 2 of the axis is empty"));
        assert!(err("workload.arrivals.poisson.rate=10:100:0").contains("zero step"));
        assert!(err("workload.arrivals.poisson.rate=100:10:10").contains("lo must be <= hi"));
        assert!(err("scheduler.max_batch_tokens=1:2:0.5").contains("not whole numbers"));
        assert!(err("scheduler.max_batch_tokens=2048,abc").contains("expects a whole number, got the string \"abc\""));
        assert!(err("sheduler.max_batch_tokens=1,2").contains("did you mean `scheduler.max_batch_tokens`"));
        assert!(err("workload.arrivals.poisson.rate=0:1e9:1").contains("more than 100000 values"));
        assert!(Axis::new("workload.requests", vec![]).unwrap_err().to_string().contains("the axis is empty"));
    }
}
