//! Whether the runs identify each fitted key (docs/calibration.md,
//! "Identified keys and priors").
//!
//! Around the fit, each key is moved by 2% of its bounds each way and the
//! runs are predicted again: the Jacobian `J` of the residuals. Every
//! residual row counts as a figure whose log error has the same spread
//! `c` (that is how the loss weighs them, and how a prior row is scaled),
//! so the keys' covariance is `c^2 (J^T J + P)^-1`, `P` the priors'
//! precisions. A key is **identified** when the runs narrow its prior to
//! half its width or less (posterior standard deviation at most half the
//! prior's); a key without a prior, when its 95% interval spans at most a
//! tenth of its bounds. A key within 0.1% of a bound is said to be **at a
//! bound**: its value is the bound's, not the runs'.

use super::keys::{FitKey, PRIOR_WEIGHT_LOG_ERROR, Prior};
use super::{Error, Memo, Run, Setup, residuals_with};

/// What the runs say of one fitted key.
#[derive(Clone, Debug, PartialEq)]
pub struct Identification {
    pub key: String,
    pub fitted: f64,
    pub prior: Option<Prior>,
    /// Posterior standard deviation, in the key's units (`None`: the
    /// runs and priors leave it unbounded).
    pub std: Option<f64>,
    pub identified: bool,
    pub at_bound: bool,
}

impl Identification {
    /// `x +- 1.96 std`, kept within the bounds.
    pub fn interval(&self, k: &FitKey) -> Option<(f64, f64)> {
        self.std.map(|s| ((self.fitted - 1.96 * s).max(k.lo), (self.fitted + 1.96 * s).min(k.hi)))
    }

    /// One word for reports.
    pub fn verdict(&self) -> &'static str {
        match (self.identified, self.at_bound, self.prior.is_some()) {
            (_, true, _) => "at a bound",
            (true, false, _) => "identified",
            (false, false, true) => "not identified: held by its prior",
            (false, false, false) => "not identified",
        }
    }
}

/// The residual spread every row (data and prior) is scaled to:
/// `PRIOR_WEIGHT_LOG_ERROR / sqrt(runs * mean metrics a run)`.
pub fn row_scale(runs: &[&Run], setup: &Setup) -> f64 {
    let figures: usize = runs.iter().map(|r| setup.metrics.for_run(r).len().max(1)).sum();
    PRIOR_WEIGHT_LOG_ERROR / (figures.max(1) as f64).sqrt()
}

/// The prior rows at `x`: `(x - mean) / sigma * scale` for each key with a prior.
pub fn prior_rows(setup: &Setup, scale: f64, x: &[f64]) -> Vec<f64> {
    setup.priors.iter().zip(x).filter_map(|(p, x)| p.map(|p| (x - p.mean) / p.sigma * scale)).collect()
}

/// How far each key is moved each way, as a share of its bounds.
pub const SPAN: f64 = 0.02;

/// Judges every key of `setup` at the fitted `x`.
pub fn identify(memo: &Memo, runs: &[&Run], setup: &Setup, x: &[f64]) -> Result<Vec<Identification>, Error> {
    let keys = &setup.keys;
    let at = |v: &[f64]| residuals_with(memo, runs, &setup.metrics, setup.loss, keys, v);
    let mut cols: Vec<Vec<f64>> = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        let h = SPAN * (k.hi - k.lo);
        let (lo, hi) = ((x[i] - h).max(k.lo), (x[i] + h).min(k.hi));
        let mut v = x.to_vec();
        v[i] = lo;
        let rl = at(&v)?;
        v[i] = hi;
        let rh = at(&v)?;
        let span = if k.integer { hi.round() - lo.round() } else { hi - lo };
        cols.push(rh.iter().zip(&rl).map(|(a, b)| if span > 0.0 { (a - b) / span } else { 0.0 }).collect());
    }
    Ok(judge(runs, setup, x, &cols))
}

/// [`identify`] from a Jacobian the fit already simulated at `x` with a
/// difference step of [`SPAN`] in the unit box (the same points, each key
/// `SPAN` of its bounds each way): `cols` are the objective's columns
/// (the runs' rows, then a row for each prior), one a key. `None` when
/// they cannot stand in for it (another step, an integer key, another
/// shape); the caller then simulates them.
pub fn identify_from(
    runs: &[&Run],
    setup: &Setup,
    x: &[f64],
    h: f64,
    cols: &[Vec<f64>],
) -> Option<Vec<Identification>> {
    let keys = &setup.keys;
    let priors = setup.priors.iter().filter(|p| p.is_some()).count();
    if h != SPAN || cols.len() != keys.len() || keys.iter().any(|k| k.integer || k.hi <= k.lo) {
        return None;
    }
    let rows = cols.first().map_or(0, Vec::len).checked_sub(priors)?;
    let cols: Vec<Vec<f64>> =
        cols.iter().zip(keys).map(|(c, k)| c[..rows].iter().map(|v| v / (k.hi - k.lo)).collect()).collect();
    Some(judge(runs, setup, x, &cols))
}

/// The verdicts from the Jacobian of the runs' residuals in the keys' units.
fn judge(runs: &[&Run], setup: &Setup, x: &[f64], cols: &[Vec<f64>]) -> Vec<Identification> {
    let keys = &setup.keys;
    let scale = row_scale(runs, setup);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    let mut h: Vec<Vec<f64>> = cols.iter().map(|ci| cols.iter().map(|cj| dot(ci, cj)).collect()).collect();
    let prior = |i: usize| setup.priors.get(i).copied().flatten();
    for (i, row) in h.iter_mut().enumerate() {
        if let Some(p) = prior(i) {
            row[i] += (scale / p.sigma).powi(2);
        }
    }
    let inverse = invert(&h);
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            let std = inverse.as_ref().map(|m| (m[i][i].max(0.0)).sqrt() * scale).filter(|s| s.is_finite());
            let u = k.to_unit(x[i]);
            let at_bound = k.hi > k.lo && !(1e-3..=1.0 - 1e-3).contains(&u);
            let identified = match (prior(i), std) {
                (Some(p), Some(s)) => s <= 0.5 * p.sigma,
                (None, Some(s)) => 2.0 * 1.96 * s <= 0.1 * (k.hi - k.lo),
                (_, None) => false,
            };
            Identification { key: k.key.clone(), fitted: x[i], prior: prior(i), std, identified, at_bound }
        })
        .collect()
}

/// The inverse of a symmetric matrix by Gauss-Jordan elimination with
/// partial pivoting; `None` when it is singular.
pub fn invert(m: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let n = m.len();
    let mut a: Vec<Vec<f64>> = m
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut r = row.clone();
            r.extend((0..n).map(|j| if i == j { 1.0 } else { 0.0 }));
            r
        })
        .collect();
    let norm = m.iter().flatten().fold(0.0f64, |acc, v| acc.max(v.abs()));
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs().partial_cmp(&(1e-13 * norm)) != Some(std::cmp::Ordering::Greater) {
            return None;
        }
        a.swap(col, pivot);
        let p = a[col][col];
        for v in &mut a[col] {
            *v /= p;
        }
        for row in 0..n {
            if row != col {
                let f = a[row][col];
                if f != 0.0 {
                    let pivot_row = a[col].clone();
                    for (v, pv) in a[row].iter_mut().zip(&pivot_row) {
                        *v -= f * pv;
                    }
                }
            }
        }
    }
    let out: Vec<Vec<f64>> = a.into_iter().map(|r| r[n..].to_vec()).collect();
    out.iter().flatten().all(|v| v.is_finite()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invert_gives_the_inverse_and_refuses_a_singular_matrix() {
        let m = vec![vec![4.0, 2.0], vec![2.0, 3.0]];
        let inv = invert(&m).unwrap();
        // det 8: [[3, -2], [-2, 4]] / 8
        assert!(
            (inv[0][0] - 0.375).abs() < 1e-12 && (inv[0][1] + 0.25).abs() < 1e-12 && (inv[1][1] - 0.5).abs() < 1e-12
        );
        assert!(invert(&[vec![1.0, 2.0], vec![2.0, 4.0]]).is_none());
    }
}
