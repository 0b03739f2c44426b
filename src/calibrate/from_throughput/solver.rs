//! The numerical core: which factors the Jacobian identifies (pivoted QR), Levenberg–Marquardt
//! on the log residuals, Huber reweighting and leave-one-out checks.

use super::factors::Factor;
use super::model::Model;
use super::FactorChoice;
use crate::error::Result;
use nalgebra::{DMatrix, DVector};

/// Below this rms change of the predictions for a typical change of the factor (0.1%), no
/// point depends on it.
pub(super) const MIN_SENSITIVITY: f64 = 1e-3;
/// A factor whose effect, once the chosen ones are fitted, keeps less than this share of its
/// own size is collinear with them (|cosine| above 0.995: a variance inflation of 100).
pub(super) const MIN_INDEPENDENT_SHARE: f64 = 0.1;
/// ... or less than this share of the strongest factor's effect: too weak to pin down beside it.
pub(super) const MIN_SHARE_OF_FIRST: f64 = 0.01;

/// Greedy pivoted QR on the Jacobian's columns (each scaled to a typical change of its
/// factor): take the most sensitive column, orthogonalise the others against it, take the
/// largest remainder, and so on, while what remains is independent enough and at most `max`
/// factors. Returns every candidate's row; `chosen` rows in the order picked.
pub(super) fn choose(which: &[Factor], j: &DMatrix<f64>, max: usize) -> Vec<FactorChoice> {
    let mut q = Pivoting::new(which, j);
    let mut first = 0.0;
    loop {
        let open_all: Vec<usize> = (0..which.len())
            .filter(|&c| q.rows[c].why.is_empty())
            .collect();
        // Coarse factors first; the fine splits once no coarse one is open.
        let coarse_open = open_all.iter().any(|&c| !which[c].spec().fine);
        let open: Vec<usize> = open_all
            .iter()
            .copied()
            .filter(|&c| !coarse_open || !which[c].spec().fine)
            .collect();
        // The largest remainder; ties go to the factor listed first.
        let Some(&best) = open.iter().max_by(|&&a, &&b| {
            q.rms(&q.rest[a])
                .total_cmp(&q.rms(&q.rest[b]))
                .then(b.cmp(&a))
        }) else {
            break;
        };
        let left = q.rms(&q.rest[best]);
        if q.picked.is_empty() {
            first = left;
        }
        if !q.picked.is_empty()
            && (left < MIN_INDEPENDENT_SHARE * q.sens[best] || left < MIN_SHARE_OF_FIRST * first)
        {
            // Nothing left is independent enough: say so for every open factor.
            q.refuse_dependent(&open);
            if coarse_open {
                continue;
            }
            break;
        }
        if q.picked.len() >= max {
            q.refuse_beyond(&open_all, max);
            break;
        }
        q.pick(best, left);
    }
    let mut out: Vec<FactorChoice> = q.picked.iter().map(|&c| q.rows[c].clone()).collect();
    out.extend(q.rows.into_iter().filter(|r| !r.chosen));
    out
}

/// The pivoted QR's state: each factor's scaled column, its sensitivity, what is left of it
/// once the picked columns are projected out, and its row of the table.
struct Pivoting<'a> {
    which: &'a [Factor],
    /// Points (the Jacobian's rows).
    n: usize,
    scaled: Vec<DVector<f64>>,
    sens: Vec<f64>,
    rest: Vec<DVector<f64>>,
    picked: Vec<usize>,
    rows: Vec<FactorChoice>,
}

impl<'a> Pivoting<'a> {
    /// Every factor open but those no point depends on.
    fn new(which: &'a [Factor], j: &DMatrix<f64>) -> Self {
        let n = j.nrows();
        let scaled: Vec<DVector<f64>> = which
            .iter()
            .enumerate()
            .map(|(c, k)| j.column(c).into_owned() * k.unit())
            .collect();
        let sens: Vec<f64> = scaled
            .iter()
            .map(|v| v.norm() / (n as f64).sqrt())
            .collect();
        let mut rows: Vec<FactorChoice> = which
            .iter()
            .zip(&sens)
            .map(|(k, s)| FactorChoice {
                factor: *k,
                sensitivity: *s,
                independent: *s,
                chosen: false,
                why: String::new(),
            })
            .collect();
        for (c, r) in rows.iter_mut().enumerate() {
            if sens[c] < MIN_SENSITIVITY {
                r.why = format!(
                    "not identifiable: no point depends on it ({} moves the predictions by {:.3}% rms)",
                    which[c].unit_text(),
                    100.0 * sens[c]
                );
            }
        }
        Pivoting {
            which,
            n,
            rest: scaled.clone(),
            scaled,
            sens,
            picked: Vec::new(),
            rows,
        }
    }

    fn rms(&self, v: &DVector<f64>) -> f64 {
        v.norm() / (self.n as f64).sqrt()
    }

    fn picked_names(&self) -> String {
        self.picked
            .iter()
            .map(|&p| self.which[p].name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The chosen factor `c` looks most like (largest |cosine| of the scaled columns).
    fn twin(&self, c: usize) -> Option<(usize, f64)> {
        let scaled = &self.scaled;
        self.picked
            .iter()
            .map(|&p| {
                let cos = scaled[c].dot(&scaled[p]) / (scaled[c].norm() * scaled[p].norm());
                (p, cos.abs())
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Every `open` factor refused: collinear with a chosen one, or too weak once they are fitted.
    fn refuse_dependent(&mut self, open: &[usize]) {
        for &c in open {
            let l = self.rms(&self.rest[c]);
            let sens = self.sens[c];
            let why = match self.twin(c) {
                Some((p, cos)) if l < MIN_INDEPENDENT_SHARE * sens => format!(
                    "not identifiable: collinear with {} (|cosine| {cos:.4}; only {:.1}% of its effect is its own)",
                    self.which[p],
                    100.0 * l / sens
                ),
                _ => format!(
                    "not identifiable: once {} {} fitted, what is left of its effect ({:.3}% rms) is below 1% of the strongest factor's",
                    self.picked_names(),
                    if self.picked.len() == 1 { "is" } else { "are" },
                    100.0 * l
                ),
            };
            self.rows[c].independent = l;
            self.rows[c].why = why;
        }
    }

    /// Every factor still open refused: the points identify no more than `max`.
    fn refuse_beyond(&mut self, open_all: &[usize], max: usize) {
        let n = self.n;
        for &c in open_all {
            self.rows[c].independent = self.rms(&self.rest[c]);
            self.rows[c].why = format!(
                "not fitted: {n} point(s) identify at most {max} factor(s) with an interval; ranked below {} (give more points, or name the factors with --factors)",
                self.picked_names()
            );
        }
    }

    /// Chooses `best`, `left` of whose effect is its own, and projects it out of the others.
    fn pick(&mut self, best: usize, left: f64) {
        let why = if self.picked.is_empty() {
            "chosen: the most sensitive".to_string()
        } else {
            format!(
                "chosen: {:.0}% of its effect is independent of {}",
                100.0 * left / self.sens[best],
                self.picked_names()
            )
        };
        let row = &mut self.rows[best];
        row.independent = left;
        row.chosen = true;
        row.why = why;
        let q = &self.rest[best] / self.rest[best].norm();
        self.picked.push(best);
        for r in self.rest.iter_mut() {
            let d = r.dot(&q);
            *r -= &q * d;
        }
    }
}

/// Drops the factors the points do not depend on, then, while the columns are nearly
/// collinear, the one most explained by the others (largest variance inflation).
pub(super) fn identifiable(
    which: &mut Vec<Factor>,
    j: &DMatrix<f64>,
    refused: &mut Vec<(Factor, String)>,
) {
    let mut cols: Vec<usize> = (0..which.len()).collect();
    let norm = |c: usize| j.column(c).norm() * which[c].unit();
    let max = cols.iter().map(|&c| norm(c)).fold(0.0, f64::max);
    cols.retain(|&c| {
        let n = norm(c);
        // Changing the factor by a typical amount moves no prediction by 0.1%.
        if n < 1e-3 || n < 1e-4 * max {
            refused.push((
                which[c],
                format!(
                    "not identifiable: no point depends on it (a change of {} moves the predictions by {:.2}% rms)",
                    which[c].unit(),
                    100.0 * n / (j.nrows() as f64).sqrt()
                ),
            ));
            false
        } else {
            true
        }
    });
    loop {
        if cols.len() < 2 {
            break;
        }
        let m = DMatrix::from_fn(j.nrows(), cols.len(), |i, k| {
            let c = cols[k];
            j[(i, c)] / j.column(c).norm()
        });
        let gram = m.transpose() * &m;
        let vif: Vec<f64> = match gram.clone().try_inverse() {
            Some(inv) => (0..cols.len()).map(|k| inv[(k, k)]).collect(),
            None => vec![f64::INFINITY; cols.len()],
        };
        // Among the nearly collinear factors, refuse the one listed last (the caller lists
        // factors in order of preference).
        let (worst, v) = match vif.iter().rposition(|v| !(*v < 100.0)) {
            Some(i) => (i, vif[i]),
            None => break,
        };
        if v.is_finite() && v < 100.0 {
            break;
        }
        // Name the factor whose effect on these points looks most like this one's (the
        // largest |cosine| between their columns).
        let twin = (0..cols.len())
            .filter(|&k| k != worst)
            .max_by(|&x, &y| {
                let c = |k: usize| gram[(worst, k)].abs();
                c(x).total_cmp(&c(y))
            })
            .map(|k| {
                format!(
                    "{} (|cosine| {:.4})",
                    which[cols[k]].name(),
                    gram[(worst, k)].abs()
                )
            })
            .unwrap_or_default();
        let others = [twin];
        refused.push((
            which[cols[worst]],
            format!(
                "not identifiable: these points cannot tell its effect apart from {} (variance inflation {}); measure another setting (context, protocol) that moves one and not the other, or drop one with --factors",
                others.join(", "),
                if v.is_finite() {
                    format!("{v:.0}")
                } else {
                    "infinite".into()
                }
            ),
        ));
        cols.remove(worst);
    }
    *which = cols.iter().map(|&c| which[c]).collect();
}

/// A solve's result: θ, the unweighted residuals, the weighted Jacobian there, the iterations.
pub(super) type LmSolution = (Vec<f64>, Vec<f64>, DMatrix<f64>, usize);

/// Levenberg–Marquardt on the log residuals, point i weighted by `w[i]` (the robust fit's
/// weights, [`huber_weights`]); returns θ, the unweighted residuals, the weighted Jacobian there
/// and the iterations.
pub(super) fn solve(
    model: &Model,
    which: &[Factor],
    mut theta: Vec<f64>,
    meas: &[f64],
    w: &[f64],
) -> Result<LmSolution> {
    let sw: Vec<f64> = w.iter().map(|x| x.sqrt()).collect();
    let weigh = |r: &[f64]| -> Vec<f64> { r.iter().zip(&sw).map(|(a, b)| a * b).collect() };
    let weigh_j = |mut j: DMatrix<f64>| {
        for i in 0..j.nrows() {
            for c in 0..j.ncols() {
                j[(i, c)] *= sw[i];
            }
        }
        j
    };
    let mut ru = model.residuals(which, &theta, meas)?;
    let mut r = weigh(&ru);
    let mut cost: f64 = r.iter().map(|x| x * x).sum();
    let mut lambda = 1e-3;
    let mut it = 0;
    let mut j = weigh_j(model.jacobian(which, &theta, &ru, meas)?);
    while it < 30 {
        it += 1;
        let jt = j.transpose();
        let g = &jt * DVector::from_vec(r.clone());
        let a = &jt * &j;
        let mut improved = false;
        for _ in 0..8 {
            let mut damped = a.clone();
            for d in 0..which.len() {
                damped[(d, d)] += lambda * a[(d, d)].max(1e-12);
            }
            let Some(step) = damped.lu().solve(&(-&g)) else {
                lambda *= 10.0;
                continue;
            };
            let trial: Vec<f64> = theta
                .iter()
                .zip(which)
                .zip(step.iter())
                .map(|((t, k), s)| (t + s).clamp(k.bounds().0, k.bounds().1))
                .collect();
            let rtu = model.residuals(which, &trial, meas)?;
            let rt = weigh(&rtu);
            let ct: f64 = rt.iter().map(|x| x * x).sum();
            if ct < cost {
                let moved = trial
                    .iter()
                    .zip(&theta)
                    .zip(which)
                    .map(|((a, b), k)| ((a - b) / k.unit()).abs())
                    .fold(0.0, f64::max);
                let gain = cost - ct;
                theta = trial;
                ru = rtu;
                r = rt;
                cost = ct;
                lambda = (lambda / 10.0).max(1e-9);
                improved = true;
                if moved < 1e-4 || gain < 1e-10 {
                    let j = weigh_j(model.jacobian(which, &theta, &ru, meas)?);
                    return Ok((theta, ru, j, it));
                }
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
        j = weigh_j(model.jacobian(which, &theta, &ru, meas)?);
    }
    Ok((theta, ru, j, it))
}

/// Huber's tuning constant: residuals within this many robust standard deviations count fully
/// (95% efficiency when the errors are normal), larger ones with weight c / |r|.
pub(super) const HUBER_K: f64 = 1.345;
/// The smallest scatter the robust scale assumes, as a relative error: a throughput benchmark
/// repeats to about 1%, so residuals within a few percent are never down-weighted.
pub(super) const NOISE_FLOOR: f64 = 0.01;
/// Iterations of reweighting at most (each refits from the last values, so the later are short).
pub(super) const MAX_REWEIGHT: usize = 8;
/// A point whose leave-one-out error is more than this many times the others' typical one
/// (robust standard deviations) is flagged as far off.
pub(super) const FAR_OFF: f64 = 3.0;

/// The median of |v| (0 when empty).
pub(super) fn median_abs(v: &[f64]) -> f64 {
    let mut a: Vec<f64> = v.iter().map(|x| x.abs()).collect();
    a.sort_by(f64::total_cmp);
    match a.len() {
        0 => 0.0,
        n if n % 2 == 1 => a[n / 2],
        n => (a[n / 2 - 1] + a[n / 2]) / 2.0,
    }
}

/// Huber weights of log residuals: 1 within `HUBER_K` robust standard deviations (1.4826 x the
/// median |r|, at least `NOISE_FLOOR`), c / |r| beyond, so one point far off weighs as if it
/// were at c and cannot pull every other point off to meet it.
pub(super) fn huber_weights(r: &[f64]) -> Vec<f64> {
    let c = HUBER_K * (1.4826 * median_abs(r)).max(NOISE_FLOOR);
    r.iter()
        .map(|x| if x.abs() <= c { 1.0 } else { c / x.abs() })
        .collect()
}

/// The robust fit: least squares reweighted by [`huber_weights`] until the weights settle.
/// Returns θ, the unweighted residuals, the weighted Jacobian, the iterations and the weights.
#[allow(clippy::type_complexity)]
pub(super) fn solve_robust(
    model: &Model,
    which: &[Factor],
    theta: Vec<f64>,
    meas: &[f64],
) -> Result<(Vec<f64>, Vec<f64>, DMatrix<f64>, usize, Vec<f64>)> {
    let mut w = vec![1.0; meas.len()];
    let (mut theta, mut r, mut j, mut it) = solve(model, which, theta, meas, &w)?;
    for _ in 0..MAX_REWEIGHT {
        let next = huber_weights(&r);
        if next.iter().zip(&w).all(|(a, b)| (a - b).abs() < 1e-3) {
            break;
        }
        w = next;
        let (t, rr, jj, i) = solve(model, which, theta, meas, &w)?;
        (theta, r, j, it) = (t, rr, jj, it + i);
    }
    Ok((theta, r, j, it, w))
}

/// Each point's leave-one-out log residual, r / (1 − h) with h its leverage in the weighted
/// Jacobian (exact for a linear least-squares fit, a close estimate here); None where the fit
/// rests on the point alone (h ≈ 1).
pub(super) fn leave_one_out(r: &[f64], j: &DMatrix<f64>) -> Vec<Option<f64>> {
    let Some(inv) = (j.transpose() * j).try_inverse() else {
        return vec![None; r.len()];
    };
    (0..r.len())
        .map(|i| {
            let row = j.row(i);
            let h = (row * &inv * row.transpose())[(0, 0)];
            (h < 0.999).then(|| r[i] / (1.0 - h))
        })
        .collect()
}

/// Why a point is far off (`FAR_OFF`): its leave-one-out error against the others' (None: not).
pub(super) fn far_off(i: usize, loo: &[Option<f64>]) -> Option<String> {
    let mine = loo[i]?;
    let others: Vec<f64> = loo
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != i)
        .filter_map(|(_, v)| *v)
        .collect();
    if others.is_empty() {
        return None;
    }
    let sigma = (1.4826 * median_abs(&others)).max(NOISE_FLOOR);
    (mine.abs() > FAR_OFF * sigma).then(|| {
        format!(
            "fitted without it, the model misses it by {:+.1}%, {:.1}x the others' typical error ({:.1}%): check this measurement (a warm-up, another setting or run), or what the model lacks at this point",
            100.0 * mine.exp_m1(),
            mine.abs() / sigma,
            100.0 * sigma
        )
    })
}
