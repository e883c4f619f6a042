//! A deterministic bounded least-squares minimiser: Levenberg-Marquardt in
//! the unit box with a central-difference Jacobian, run with ever smaller
//! difference steps, then a coordinate search that halves its step.
//!
//! The loss is a sum of squares (one log error a run and metric), so a
//! Gauss-Newton step uses what a simplex method throws away: how each
//! residual moves with each key. Most figures are close to linear in the
//! overhead terms and in the inverse efficiencies, so a fit of four keys
//! takes a couple of hundred evaluations; Nelder-Mead, tried first, took
//! its whole budget and stalled when keys sit on very different scales
//! (an efficiency near 1, an overhead of a few ms in a range of 500).
//!
//! The simulation is flat at fine scales with small jumps (a request joins
//! one step or the next), so the loss carries noise of about 1e-5 around a
//! smooth bowl. Differences are therefore taken over wide steps first
//! (2% of the box, then 0.5%, then 0.1%), each side averaged into the
//! centre's residuals so the jumps average out, and a step is accepted only
//! if the loss itself goes down. Where two keys trade off (memory
//! efficiency against a per-step overhead, when every run reads about the
//! same bytes a step) the data, not the minimiser, limits the precision:
//! runs that differ in batch and context pin them apart.
//!
//! **Stopping rule.** A Levenberg-Marquardt step that lowers the loss by
//! less than `tolerance` of it (0.1% by default) ends that difference
//! step's stage, and the coordinate search stops halving once a whole
//! step size gained less than that: below it the simulation's own jumps
//! decide which point is lower, and the keys move by a fraction of their
//! 95% interval (docs/calibration.md, "How it fits"). With the rule of
//! before (a millionth of the loss) the shipped H100 fit took 226
//! evaluations for a loss 0.3% below this rule's alone; tests hold the
//! stated tolerance (`calibrate/tests.rs`). The budget
//! (`Settings::max_evals`) is a cap, not the rule: a fit it ends first is
//! reported as not converged (`Minimum::converged`), since along a flat
//! valley another budget stops it at other values.
//!
//! **Secant steps** (`Settings::secant`, used where a fit walks far, as
//! the sample of a sampled fit does): after an accepted step the
//! Jacobian is carried on by Broyden's rank-one update (the least change
//! that makes it predict the step just seen) and the next step solved
//! with it, one evaluation instead of `2n + 1`; a step that fails, or
//! gains less than the tolerance, has the Jacobian simulated again first.
//! Along a curved valley, where each Gauss-Newton step is short, this
//! takes a fraction of the evaluations. It is off by default: near a
//! minimum the simulation's jumps make a carried Jacobian no better than
//! a fresh one, and a fresh one keeps every fit as it was.
//!
//! Why not a crate: argmin's solvers have no bounds (a cost that clamps
//! leaves flat regions), and bring anyhow, thiserror, web-time and a
//! second `rand`; a Levenberg-Marquardt for a handful of parameters is a
//! few dozen lines with a 4x4 solve. Nothing here draws a random number,
//! so the same inputs give the same path and the same bytes at any thread
//! count.

/// Limits of one minimisation.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Difference steps, in the unit box, widest first: each is used
    /// until Levenberg-Marquardt stops improving, then the next.
    pub diff_steps: Vec<f64>,
    /// Most residual evaluations.
    pub max_evals: usize,
    /// Smallest coordinate-search step, in the unit box.
    pub min_step: f64,
    /// Relative gain of the loss below which a stage stops (see the
    /// module's "Stopping rule").
    pub tolerance: f64,
    /// End with the coordinate search (a fit from far away); a fit that
    /// starts at a neighbouring problem's minimum (a leave-one-out fold)
    /// skips it.
    pub polish: bool,
    /// After an accepted step, carry the Jacobian on by Broyden's secant
    /// update and simulate it again only when a step fails or gains less
    /// than the tolerance (see the module's "Secant steps"); `false`
    /// simulates it before every step.
    pub secant: bool,
    /// Trial steps from one freshly simulated Jacobian that may fail (each
    /// damped four times more) before the stage ends: a model that
    /// mispredicts the loss that often is at the simulation's noise, and
    /// each trial costs a whole evaluation. `usize::MAX`: until the
    /// damping runs out.
    pub max_failures: usize,
}

/// The stopping rule's default relative gain: 0.1% of the loss.
pub const TOLERANCE: f64 = 1e-3;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            diff_steps: vec![0.02, 0.005, 1e-3],
            max_evals: 400,
            min_step: 1e-4,
            tolerance: TOLERANCE,
            polish: true,
            secant: false,
            max_failures: usize::MAX,
        }
    }
}

/// The best point found, its loss (sum of squared residuals) and how many
/// evaluations it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Minimum {
    pub x: Vec<f64>,
    pub f: f64,
    pub evals: usize,
    /// The last Jacobian simulated, when it was simulated at `x`: its
    /// difference step and its columns (one a key, in the unit box).
    pub jacobian: Option<(f64, Vec<Vec<f64>>)>,
    /// Whether every stage ended by the stopping rule; `false` when the
    /// budget (`Settings::max_evals`) ended one first: the fit stopped
    /// short of where the rule would have, and another budget would give
    /// another point (see the module's "Stopping rule").
    pub converged: bool,
}

/// Counts evaluations and remembers the best point seen.
struct Tracked<F> {
    f: F,
    evals: usize,
    max: usize,
    best: Option<(Vec<f64>, f64)>,
    /// Where the last Jacobian was simulated, its difference step and columns.
    jacobian: Option<(Vec<f64>, f64, Vec<Vec<f64>>)>,
    /// Set when the budget refused work a stage wanted ([`Tracked::afford`]).
    starved: bool,
}

impl<F: FnMut(&[f64]) -> Result<Vec<f64>, E>, E> Tracked<F> {
    fn eval(&mut self, x: &[f64]) -> Result<(Vec<f64>, f64), E> {
        let x: Vec<f64> = x.iter().map(|v| v.clamp(0.0, 1.0)).collect();
        let r = (self.f)(&x)?;
        let loss: f64 = r.iter().map(|v| v * v).sum();
        let loss = if loss.is_nan() { f64::INFINITY } else { loss };
        self.evals += 1;
        if self.best.as_ref().is_none_or(|(_, b)| loss < *b) {
            self.best = Some((x, loss));
        }
        Ok((r, loss))
    }

    fn left(&self) -> usize {
        self.max.saturating_sub(self.evals)
    }

    /// Whether `k` more evaluations fit in the budget; when they do not,
    /// the fit is marked as ended by its budget rather than its rule.
    fn afford(&mut self, k: usize) -> bool {
        let ok = self.left() >= k;
        self.starved |= !ok;
        ok
    }
}

/// Minimises the sum of squares of `residuals` over `[0, 1]^n` from `x0`.
pub fn minimize<F, E>(residuals: F, x0: &[f64], s: &Settings) -> Result<Minimum, E>
where
    F: FnMut(&[f64]) -> Result<Vec<f64>, E>,
{
    let mut t = Tracked { f: residuals, evals: 0, max: s.max_evals.max(1), best: None, jacobian: None, starved: false };
    let x: Vec<f64> = x0.iter().map(|v| v.clamp(0.0, 1.0)).collect();
    t.eval(&x)?;
    for h in &s.diff_steps {
        if !t.afford(1) {
            break;
        }
        let Some((x, _)) = t.best.clone() else { break };
        let (r, f) = t.eval(&x)?;
        levenberg_marquardt(&mut t, x, r, f, *h, s)?;
    }
    if s.polish {
        let last = s.diff_steps.last().copied().unwrap_or(1e-3);
        coordinate_search(&mut t, last, s.min_step, s.tolerance)?;
    }
    let (x, f) = t.best.clone().unwrap_or_default();
    let jacobian = t.jacobian.take().filter(|(at, _, _)| *at == x).map(|(_, h, cols)| (h, cols));
    Ok(Minimum { x, f, evals: t.evals, jacobian, converged: !t.starved })
}

fn levenberg_marquardt<F, E>(
    t: &mut Tracked<F>,
    mut x: Vec<f64>,
    mut r: Vec<f64>,
    mut f: f64,
    h: f64,
    s: &Settings,
) -> Result<(), E>
where
    F: FnMut(&[f64]) -> Result<Vec<f64>, E>,
{
    let n = x.len();
    let mut lambda = 1e-3;
    'fresh: while t.afford(2 * n + 1) {
        let (mut jac, mut center) = jacobian(t, &x, &r, h)?;
        t.jacobian = Some((x.clone(), h, jac.clone()));
        // `fresh`: the Jacobian was just simulated at `x`; after an
        // accepted step it is carried on by a secant update instead.
        let mut fresh = true;
        loop {
            let (a, g) = normal_equations(&jac, &center);
            let mut accepted = None;
            let mut failures = 0;
            while t.afford(1) {
                let Some(delta) = bounded_step(&a, &g, &x, lambda) else {
                    lambda *= 4.0;
                    if lambda > 1e10 {
                        return Ok(());
                    }
                    continue;
                };
                let trial: Vec<f64> = x.iter().zip(&delta).map(|(x, d)| (x + d).clamp(0.0, 1.0)).collect();
                if trial.iter().zip(&x).all(|(a, b)| (a - b).abs() < 1e-9) {
                    break;
                }
                let (rt, ft) = t.eval(&trial)?;
                if ft < f {
                    accepted = Some((trial, rt, ft));
                    break;
                }
                if !fresh {
                    // A carried Jacobian that fails is simulated again
                    // before the step is damped further.
                    break;
                }
                failures += 1;
                if failures >= s.max_failures {
                    return Ok(());
                }
                lambda *= 4.0;
                if lambda > 1e10 {
                    return Ok(());
                }
            }
            let Some((trial, rt, ft)) = accepted else {
                if fresh {
                    return Ok(());
                }
                continue 'fresh;
            };
            let gain = f - ft;
            if s.secant {
                secant_update(&mut jac, &x, &trial, &r, &rt, h);
            }
            x = trial;
            r = rt;
            f = ft;
            lambda = (lambda / 3.0).max(1e-9);
            if gain <= s.tolerance * (f + gain) {
                if fresh {
                    return Ok(());
                }
                continue 'fresh;
            }
            if !s.secant {
                continue 'fresh;
            }
            fresh = false;
            center = r.clone();
        }
    }
    Ok(())
}

/// Broyden's rank-one update of the Jacobian's columns `jac` after a step
/// from `x` (residuals `r`) to `y` (residuals `ry`): the least change
/// that makes `J (y - x)` equal `ry - r`. A step shorter than the
/// difference step `h` leaves it as it is (the simulation's jumps would
/// decide the update).
fn secant_update(jac: &mut [Vec<f64>], x: &[f64], y: &[f64], r: &[f64], ry: &[f64], h: f64) {
    let d: Vec<f64> = y.iter().zip(x).map(|(a, b)| a - b).collect();
    let dd: f64 = d.iter().map(|v| v * v).sum();
    if dd.sqrt() < h {
        return;
    }
    for (k, (a, b)) in ry.iter().zip(r).enumerate() {
        let predicted: f64 = jac.iter().zip(&d).map(|(col, di)| col[k] * di).sum();
        let miss = (a - b - predicted) / dd;
        for (col, di) in jac.iter_mut().zip(&d) {
            col[k] += miss * di;
        }
    }
}

/// The damped Gauss-Newton step from `x` with the keys on a bound that it
/// would push outwards held there: the step is solved again without them
/// (an active set), since clamping a step computed with them bends it
/// away from the descent along the free keys.
fn bounded_step(a: &[Vec<f64>], g: &[f64], x: &[f64], lambda: f64) -> Option<Vec<f64>> {
    let n = x.len();
    let mut free: Vec<usize> = (0..n).collect();
    loop {
        let m: Vec<Vec<f64>> = free
            .iter()
            .map(|&i| {
                free.iter().map(|&j| if i == j { a[i][i] + lambda * a[i][i].max(1e-12) } else { a[i][j] }).collect()
            })
            .collect();
        let d = solve(m, free.iter().map(|&i| -g[i]).collect())?;
        let mut delta = vec![0.0; n];
        for (&i, v) in free.iter().zip(&d) {
            delta[i] = *v;
        }
        let before = free.len();
        free.retain(|&i| !((x[i] <= 0.0 && delta[i] < 0.0) || (x[i] >= 1.0 && delta[i] > 0.0)));
        if free.is_empty() {
            // Every key is held on its bound: no step (the caller stops).
            return Some(vec![0.0; n]);
        }
        if free.len() == before {
            return Some(delta);
        }
    }
}

/// Central differences (one-sided at a bound), and the residuals at `x`
/// averaged with those of the `2n` points around it (the simulation's
/// small jumps average out; the curvature's part is of order `h^2`).
fn jacobian<F, E>(t: &mut Tracked<F>, x: &[f64], r: &[f64], h: f64) -> Result<(Vec<Vec<f64>>, Vec<f64>), E>
where
    F: FnMut(&[f64]) -> Result<Vec<f64>, E>,
{
    let mut cols = Vec::with_capacity(x.len());
    let mut sum: Vec<f64> = r.to_vec();
    let mut count = 1.0;
    for i in 0..x.len() {
        let (lo, hi) = difference_span(x[i], h);
        let mut at = |u: f64| -> Result<Vec<f64>, E> {
            if u == x[i] {
                return Ok(r.to_vec());
            }
            let mut v = x.to_vec();
            v[i] = u;
            Ok(t.eval(&v)?.0)
        };
        let (rl, rh) = (at(lo)?, at(hi)?);
        if lo < x[i] && hi > x[i] {
            for ((s, a), b) in sum.iter_mut().zip(&rl).zip(&rh) {
                *s += a + b;
            }
            count += 2.0;
        }
        cols.push(rh.iter().zip(&rl).map(|(a, b)| (a - b) / (hi - lo)).collect());
    }
    Ok((cols, sum.into_iter().map(|s| s / count).collect()))
}

/// The two sides of coordinate `x` a difference step `h` reaches, kept in
/// the box.
fn difference_span(x: f64, h: f64) -> (f64, f64) {
    ((x - h).max(0.0), (x + h).min(1.0))
}

/// The points a Jacobian with difference step `h` at `x` evaluates, the
/// centre first (as [`minimize`] sees it, clamped to the box), so that a
/// caller can simulate them ahead, in parallel, and let every fit that
/// starts there find them done.
pub fn difference_points(x: &[f64], h: f64) -> Vec<Vec<f64>> {
    let x: Vec<f64> = x.iter().map(|v| v.clamp(0.0, 1.0)).collect();
    let mut out = vec![x.clone()];
    for i in 0..x.len() {
        let (lo, hi) = difference_span(x[i], h);
        for u in [lo, hi] {
            if u != x[i] {
                let mut v = x.clone();
                v[i] = u;
                out.push(v);
            }
        }
    }
    out
}

/// `J^T J` and `J^T r`, from the Jacobian's columns.
fn normal_equations(cols: &[Vec<f64>], r: &[f64]) -> (Vec<Vec<f64>>, Vec<f64>) {
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let a = cols.iter().map(|ci| cols.iter().map(|cj| dot(ci, cj)).collect()).collect();
    let g = cols.iter().map(|c| dot(c, r)).collect();
    (a, g)
}

/// Solves `m x = b` by Gaussian elimination with partial pivoting.
fn solve(mut m: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() < 1e-300 || !m[pivot][col].is_finite() {
            return None;
        }
        m.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..n {
            let k = m[row][col] / m[col][col];
            let (above, below) = m.split_at_mut(row);
            for (a, p) in below[0][col..].iter_mut().zip(&above[col][col..]) {
                *a -= k * p;
            }
            b[row] -= k * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let rest: f64 = (row + 1..n).map(|c| m[row][c] * x[c]).sum();
        x[row] = (b[row] - rest) / m[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// From the best point: tries `x +- h` along each axis, keeping
/// improvements; halves `h` when no axis improves, and stops when a step
/// size gained less than `tolerance` of the loss it started from.
fn coordinate_search<F, E>(t: &mut Tracked<F>, mut h: f64, min: f64, tolerance: f64) -> Result<(), E>
where
    F: FnMut(&[f64]) -> Result<Vec<f64>, E>,
{
    let Some((mut x, mut fx)) = t.best.clone() else { return Ok(()) };
    let mut level_start = fx;
    while h >= min && t.afford(1) {
        let mut improved = false;
        for i in 0..x.len() {
            for sign in [1.0, -1.0] {
                if !t.afford(1) {
                    return Ok(());
                }
                let mut v = x.clone();
                v[i] = (v[i] + sign * h).clamp(0.0, 1.0);
                if v[i] == x[i] {
                    continue;
                }
                let (_, fv) = t.eval(&v)?;
                if fv < fx {
                    x = v;
                    fx = fv;
                    improved = true;
                    break;
                }
            }
        }
        if !improved {
            if level_start - fx <= tolerance * level_start {
                return Ok(());
            }
            h /= 2.0;
            level_start = fx;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(f: impl Fn(&[f64]) -> Vec<f64>) -> impl FnMut(&[f64]) -> Result<Vec<f64>, ()> {
        move |x| Ok(f(x))
    }

    #[test]
    fn fits_a_linear_model_in_a_few_evaluations() {
        // y = a + b t observed at t = 0..5 with a = 0.3, b = 0.7.
        let resid = |x: &[f64]| (0..6).map(|t| x[0] + x[1] * f64::from(t) - (0.3 + 0.7 * f64::from(t))).collect();
        let m = minimize(ok(resid), &[0.9, 0.1], &Settings::default()).unwrap();
        assert!((m.x[0] - 0.3).abs() < 1e-5 && (m.x[1] - 0.7).abs() < 1e-5, "{m:?}");
        assert!(m.evals < 100, "{m:?}");
        assert!(m.converged, "the stopping rule ended it, with budget to spare: {m:?}");
    }

    #[test]
    fn keys_on_very_different_scales_are_found() {
        // A step time of 4 ms of memory at efficiency e plus an overhead o,
        // seen at three batch sizes: (4 + 0.05 b) / e + o.
        let truth = (0.62, 0.013);
        let model = |e: f64, o: f64, b: f64| (4.0 + 0.05 * b) / (0.05 + 0.95 * e) + 50.0 * o;
        let resid = |x: &[f64]| {
            [1.0, 32.0, 128.0].iter().map(|b| (model(x[0], x[1], *b) / model(truth.0, truth.1, *b)).ln()).collect()
        };
        let m = minimize(ok(resid), &[1.0, 0.0], &Settings::default()).unwrap();
        assert!((m.x[0] - truth.0).abs() < 1e-4 && (m.x[1] - truth.1).abs() < 1e-5, "{m:?}");
    }

    #[test]
    fn a_minimum_beyond_a_bound_ends_on_the_bound() {
        let resid = |x: &[f64]| vec![x[0] - 1.4, x[1] + 0.2];
        let m = minimize(ok(resid), &[0.5, 0.5], &Settings::default()).unwrap();
        assert_eq!(m.x, vec![1.0, 0.0]);
    }

    #[test]
    fn a_rosenbrock_valley_is_followed() {
        // Minimum at a = b = 1, i.e. x = (0.5, 0.5) with a = 2x, b = 2x.
        let resid = |x: &[f64]| {
            let (a, b) = (2.0 * x[0], 2.0 * x[1]);
            vec![10.0 * (b - a * a), 1.0 - a]
        };
        let m = minimize(ok(resid), &[0.05, 0.9], &Settings { max_evals: 2000, ..Settings::default() }).unwrap();
        assert!((m.x[0] - 0.5).abs() < 1e-3 && (m.x[1] - 0.5).abs() < 2e-3, "{m:?}");
    }

    #[test]
    fn the_same_inputs_take_the_same_path_even_on_a_staircase() {
        let stairs = |x: &[f64]| vec![(x[0] * 1000.0).floor() / 1000.0 - 0.42, (x[1] * 500.0).floor() / 500.0 - 0.077];
        let a = minimize(ok(stairs), &[0.8, 0.8], &Settings::default()).unwrap();
        let b = minimize(ok(stairs), &[0.8, 0.8], &Settings::default()).unwrap();
        assert_eq!(a, b);
        assert!(a.f < 1e-5, "{a:?}");
    }

    #[test]
    fn the_budget_is_respected_and_errors_pass_through() {
        let m = minimize(ok(|x: &[f64]| vec![x[0] - 0.1]), &[0.5], &Settings { max_evals: 7, ..Settings::default() })
            .unwrap();
        assert!(m.evals <= 7, "{m:?}");
        // The first step lands near the minimum, gaining far more than
        // the tolerance, so the rule wants another Jacobian that the
        // budget cannot pay for: not converged, though the point is close.
        assert!(!m.converged && (m.x[0] - 0.1).abs() < 1e-3, "{m:?}");
        // Each stage's budget check: enough for the first stage alone
        // ends in the second, and the coordinate search is cut short.
        let line = |x: &[f64]| vec![x[0] - 0.1, 3.0 * (x[0] - 0.1)];
        let free = minimize(ok(line), &[0.5], &Settings::default()).unwrap();
        assert!(free.converged && free.evals < 40, "{free:?}");
        for max_evals in 1..40 {
            let m = minimize(ok(line), &[0.5], &Settings { max_evals, ..Settings::default() }).unwrap();
            assert_eq!(m.converged, max_evals >= free.evals, "budget {max_evals}: {m:?}, unbounded {free:?}");
        }
        let e = minimize(|_: &[f64]| Err::<Vec<f64>, &str>("boom"), &[0.5], &Settings::default()).unwrap_err();
        assert_eq!(e, "boom");
    }

    #[test]
    fn the_first_jacobian_asks_for_the_difference_points_in_order() {
        // A fit from (0.3, 0.999) with one difference step: it evaluates the
        // centre, the centre again (the stage's start), then the Jacobian's
        // points: 0.3 -+ 0.01, and 0.989 and the box's edge 1 (one-sided).
        let seen = std::cell::RefCell::new(Vec::new());
        let resid = |x: &[f64]| {
            seen.borrow_mut().push(x.to_vec());
            Ok::<_, ()>(vec![x[0] - 0.5, x[1] - 0.5])
        };
        let s = Settings { diff_steps: vec![0.01], polish: false, ..Settings::default() };
        minimize(resid, &[0.3, 0.999], &s).unwrap();
        let points = difference_points(&[0.3, 0.999], 0.01);
        assert_eq!(
            points,
            vec![vec![0.3, 0.999], vec![0.29, 0.999], vec![0.31, 0.999], vec![0.3, 0.989], vec![0.3, 1.0]]
        );
        let seen = seen.into_inner();
        assert_eq!(seen[0], points[0]);
        assert_eq!(seen[1], points[0]);
        assert_eq!(&seen[2..6], &points[1..]);
    }

    #[test]
    fn a_stage_stops_once_a_step_gains_less_than_the_tolerance() {
        // A pure quadratic: Gauss-Newton lands on the minimum at once; every
        // later step gains nothing, so a loose and a strict tolerance end
        // at the same point, the loose one in fewer evaluations.
        let resid = |x: &[f64]| vec![x[0] - 0.25, 2.0 * (x[1] - 0.75)];
        let loose = minimize(ok(resid), &[0.9, 0.1], &Settings::default()).unwrap();
        let strict = minimize(ok(resid), &[0.9, 0.1], &Settings { tolerance: 1e-12, ..Settings::default() }).unwrap();
        assert!(loose.f < 1e-12 && strict.f < 1e-12, "{loose:?} {strict:?}");
        assert!(loose.evals <= strict.evals, "{loose:?} {strict:?}");
        // Without the polish, no coordinate search follows.
        let bare = minimize(ok(resid), &[0.9, 0.1], &Settings { polish: false, ..Settings::default() }).unwrap();
        assert!(bare.evals < loose.evals, "{bare:?} {loose:?}");
    }

    #[test]
    fn a_key_on_a_bound_that_a_step_pushes_out_is_held_and_the_rest_solved_without_it() {
        // J^T J = [[2, 1], [1, 2]], gradient (-1, 0.5), no damping: the
        // full step is (2.5, -2) / 3, pushing key 0 past its bound at 1.
        // Held there, key 1 alone solves 2 d = -0.5: d = -0.25 (a clamped
        // full step would move it by -2/3).
        let a = vec![vec![2.0, 1.0], vec![1.0, 2.0]];
        let d = bounded_step(&a, &[-1.0, 0.5], &[1.0, 0.5], 0.0).unwrap();
        assert_eq!(d, vec![0.0, -0.25]);
        // Inside the box the full step is taken.
        let d = bounded_step(&a, &[-1.0, 0.5], &[0.5, 0.5], 0.0).unwrap();
        assert!((d[0] - 2.5 / 3.0).abs() < 1e-12 && (d[1] + 2.0 / 3.0).abs() < 1e-12, "{d:?}");
        // Every key held: no step.
        assert_eq!(bounded_step(&a, &[-1.0, -1.0], &[1.0, 1.0], 0.0).unwrap(), vec![0.0, 0.0]);
    }

    #[test]
    fn a_secant_update_makes_the_jacobian_match_the_step_it_saw() {
        // J = [[1, 0], [0, 1]] (columns), a step d = (0.3, 0.4) (|d|^2 =
        // 0.25) that moved the residuals by (0.5, 0.1) where J predicted
        // (0.3, 0.4): misses (0.2, -0.3) / 0.25 = (0.8, -1.2), so column i
        // gains d_i times them: (1.24, -0.36) and (0.32, 0.52).
        let mut jac = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        secant_update(&mut jac, &[0.1, 0.1], &[0.4, 0.5], &[0.0, 0.0], &[0.5, 0.1], 0.02);
        let want = [[1.24, -0.36], [0.32, 0.52]];
        for (col, w) in jac.iter().zip(want) {
            for (a, b) in col.iter().zip(w) {
                assert!((a - b).abs() < 1e-12, "{jac:?}");
            }
        }
        // The updated J times the step d = (0.3, 0.4) gives the change the
        // step saw, (0.5, 0.1) (the secant condition).
        let d = [0.3, 0.4];
        for (row, seen) in [0.5, 0.1].into_iter().enumerate() {
            let predicted: f64 = jac.iter().zip(d).map(|(col, di)| col[row] * di).sum();
            assert!((predicted - seen).abs() < 1e-12, "row {row}: J d = {predicted}, the step saw {seen}");
        }
        // A step shorter than the difference step leaves it alone.
        let mut same = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        secant_update(&mut same, &[0.1, 0.1], &[0.101, 0.1], &[0.0, 0.0], &[0.5, 0.1], 0.02);
        assert_eq!(same, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
    }

    #[test]
    fn secant_steps_reach_the_same_minima_in_fewer_evaluations_along_a_valley() {
        // The valley and the two scales of the tests above, with and
        // without the secant update: the same minimum (to the tolerance the
        // tests above allow), and on the valley, where the plain method
        // simulates a Jacobian for each short step, fewer evaluations.
        let valley = |x: &[f64]| {
            let (a, b) = (2.0 * x[0], 2.0 * x[1]);
            vec![10.0 * (b - a * a), 1.0 - a]
        };
        let plain = Settings { max_evals: 2000, ..Settings::default() };
        let secant = Settings { secant: true, ..plain.clone() };
        let (p, s) =
            (minimize(ok(valley), &[0.05, 0.9], &plain).unwrap(), minimize(ok(valley), &[0.05, 0.9], &secant).unwrap());
        assert!((s.x[0] - 0.5).abs() < 1e-3 && (s.x[1] - 0.5).abs() < 2e-3, "{s:?}");
        assert!(s.evals < p.evals, "secant {s:?} plain {p:?}");
        let truth = (0.62, 0.013);
        let model = |e: f64, o: f64, b: f64| (4.0 + 0.05 * b) / (0.05 + 0.95 * e) + 50.0 * o;
        let scales = |x: &[f64]| {
            [1.0, 32.0, 128.0].iter().map(|b| (model(x[0], x[1], *b) / model(truth.0, truth.1, *b)).ln()).collect()
        };
        let m = minimize(ok(scales), &[1.0, 0.0], &secant).unwrap();
        assert!((m.x[0] - truth.0).abs() < 1e-4 && (m.x[1] - truth.1).abs() < 1e-5, "{m:?}");
    }

    #[test]
    fn the_last_jacobian_is_returned_only_where_the_fit_ends() {
        // Started at the minimum of a line: the Jacobian there (column
        // (0.32 - 0.28) / 0.04 = 1) asks for no step, so the fit ends
        // where it was simulated and returns it.
        let line = |x: &[f64]| vec![x[0] - 0.3];
        let one = Settings { diff_steps: vec![0.02], polish: false, ..Settings::default() };
        let m = minimize(ok(line), &[0.3], &one).unwrap();
        let (h, cols) = m.jacobian.expect("ended at its Jacobian");
        assert_eq!(h, 0.02);
        assert!((cols[0][0] - 1.0).abs() < 1e-12, "{cols:?}");
        // Held on a bound that the step pushes outwards, likewise; a line
        // whose minimum is past the bound: (1 - 0.98) / 0.02 = 1 one-sided.
        let m = minimize(ok(|x: &[f64]| vec![x[0] - 1.5]), &[1.0], &one).unwrap();
        assert_eq!(m.x, vec![1.0]);
        assert!(m.jacobian.is_some_and(|(_, c)| (c[0][0] - 1.0).abs() < 1e-12));
    }

    #[test]
    fn a_small_system_is_solved_exactly() {
        let x = solve(vec![vec![2.0, 1.0], vec![1.0, 3.0]], vec![3.0, 5.0]).unwrap();
        assert!((x[0] - 0.8).abs() < 1e-12 && (x[1] - 1.4).abs() < 1e-12);
        assert_eq!(solve(vec![vec![0.0, 0.0], vec![0.0, 0.0]], vec![1.0, 1.0]), None);
    }
}
