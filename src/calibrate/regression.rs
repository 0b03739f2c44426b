//! Weighted linear least squares with confidence intervals (nalgebra + statrs).

use nalgebra::{DMatrix, DVector};
use statrs::distribution::{ContinuousCDF, StudentsT};

#[derive(Debug, Clone, PartialEq)]
pub struct LinearFit {
    pub coef: Vec<f64>,
    /// Half-width of each coefficient's 95% confidence interval.
    pub(crate) ci95: Vec<f64>,
    pub(crate) dof: usize,
}

/// Minimises Σ wᵢ (yᵢ − xᵢ·β)². Returns None when the design is singular.
pub fn weighted_least_squares(x: &[Vec<f64>], y: &[f64], w: &[f64]) -> Option<LinearFit> {
    let n = y.len();
    let p = x.first()?.len();
    if n < p || p == 0 {
        return None;
    }
    if x.iter().any(|r| r.len() != p) || w.len() != n {
        return None;
    }
    let xm = DMatrix::from_fn(n, p, |i, j| x[i][j] * w[i].sqrt());
    let ym = DVector::from_fn(n, |i, _| y[i] * w[i].sqrt());
    if !xm.iter().chain(ym.iter()).all(|v| v.is_finite()) {
        return None;
    }
    // Rank check on unit-norm columns (so units do not matter): rows that do not vary enough
    // to separate the parameters leave a near-zero singular value, and inverting anyway gives
    // coefficients of ±1e5 with intervals to match.
    let mut unit = xm.clone();
    for mut c in unit.column_iter_mut() {
        let norm = c.norm();
        if norm == 0.0 {
            return None;
        }
        c /= norm;
    }
    let sv = unit.singular_values();
    let (lo, hi) = sv
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if !(lo > 1e-8 * hi) {
        return None;
    }
    let xtx = xm.transpose() * &xm;
    let inv = xtx.clone().try_inverse()?;
    let beta = &inv * xm.transpose() * &ym;
    let resid = &ym - &xm * &beta;
    let dof = n - p;
    let ci95 = if dof > 0 {
        let s2 = resid.norm_squared() / dof as f64;
        let t = StudentsT::new(0.0, 1.0, dof as f64)
            .map(|d| d.inverse_cdf(0.975))
            .unwrap_or(f64::NAN);
        (0..p)
            .map(|j| t * (s2 * inv[(j, j)]).max(0.0).sqrt())
            .collect()
    } else {
        vec![f64::NAN; p]
    };
    Some(LinearFit {
        coef: beta.iter().copied().collect(),
        ci95,
        dof,
    })
}

/// Coefficient of determination of predictions against observations.
pub(crate) fn r_squared(y: &[f64], pred: &[f64]) -> f64 {
    let mean = y.iter().sum::<f64>() / y.len().max(1) as f64;
    let ss_tot: f64 = y.iter().map(|v| (v - mean).powi(2)).sum();
    let ss_res: f64 = y.iter().zip(pred).map(|(a, b)| (a - b).powi(2)).sum();
    if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        1.0
    }
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_a_line_and_its_interval_shrinks_with_noise() {
        let x: Vec<Vec<f64>> = (0..20).map(|i| vec![1.0, i as f64]).collect();
        let y: Vec<f64> = (0..20).map(|i| 3.0 + 2.0 * i as f64).collect();
        let f = weighted_least_squares(&x, &y, &[1.0; 20]).unwrap();
        assert!((f.coef[0] - 3.0).abs() < 1e-9 && (f.coef[1] - 2.0).abs() < 1e-9);
        assert!(f.ci95[1] < 1e-6);
        let noisy: Vec<f64> = y
            .iter()
            .enumerate()
            .map(|(i, v)| v + if i % 2 == 0 { 0.5 } else { -0.5 })
            .collect();
        let g = weighted_least_squares(&x, &noisy, &[1.0; 20]).unwrap();
        assert!(g.ci95[1] > 0.0 && (g.coef[1] - 2.0).abs() < g.ci95[1] * 2.0);
        assert!(
            r_squared(
                &noisy,
                &x.iter()
                    .map(|r| g.coef[0] + g.coef[1] * r[1])
                    .collect::<Vec<_>>()
            ) > 0.99
        );
    }

    #[test]
    fn identical_rows_are_singular_not_a_fit() {
        let x = vec![vec![1.0, 3.0]; 50];
        let y: Vec<f64> = (0..50).map(|i| 10.0 + 1e-9 * i as f64).collect();
        assert!(weighted_least_squares(&x, &y, &[0.01; 50]).is_none());
    }

    #[test]
    fn singular_design_is_none() {
        let x = vec![vec![1.0, 2.0], vec![2.0, 4.0], vec![3.0, 6.0]];
        assert!(weighted_least_squares(&x, &[1.0, 2.0, 3.0], &[1.0; 3]).is_none());
    }
}
