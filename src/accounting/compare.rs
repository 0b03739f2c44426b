//! Predicted vs measured, category by category: where the simulator and a real trace meet.
//! Both sides are [`Breakdown`]s made by the same accounting, so a row compares like with like.

use crate::accounting::Breakdown;
use crate::category::Category;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CategoryComparison {
    pub(crate) category: Category,
    pub(crate) predicted_us: f64,
    pub(crate) measured_us: f64,
    pub(crate) predicted_share: f64,
    pub(crate) measured_share: f64,
    /// predicted − measured.
    pub(crate) abs_error_us: f64,
    /// (predicted − measured) / measured; `None` when nothing was measured.
    pub(crate) rel_error: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub(crate) rows: Vec<CategoryComparison>,
    pub(crate) predicted_step_us: f64,
    pub measured_step_us: f64,
    /// predicted − measured step time.
    pub(crate) step_abs_error_us: f64,
    /// (predicted − measured) / measured step time; `None` when the measured step is empty.
    pub(crate) step_rel_error: Option<f64>,
    pub(crate) predicted_comm_wait_us: f64,
    pub(crate) measured_comm_wait_us: f64,
    pub(crate) predicted_comm_transfer_us: f64,
    pub(crate) measured_comm_transfer_us: f64,
}

fn rel(pred: f64, meas: f64) -> Option<f64> {
    (meas > 0.0).then(|| (pred - meas) / meas)
}

pub fn compare(predicted: &Breakdown, measured: &Breakdown) -> Comparison {
    let rows = Category::ALL
        .iter()
        .map(|&c| {
            let (p, m) = (predicted.time(c), measured.time(c));
            CategoryComparison {
                category: c,
                predicted_us: p,
                measured_us: m,
                predicted_share: predicted.share(c),
                measured_share: measured.share(c),
                abs_error_us: p - m,
                rel_error: rel(p, m),
            }
        })
        .collect();
    Comparison {
        rows,
        predicted_step_us: predicted.step_time_us,
        measured_step_us: measured.step_time_us,
        step_abs_error_us: predicted.step_time_us - measured.step_time_us,
        step_rel_error: rel(predicted.step_time_us, measured.step_time_us),
        predicted_comm_wait_us: predicted.comm_wait_us,
        measured_comm_wait_us: measured.comm_wait_us,
        predicted_comm_transfer_us: predicted.comm_transfer_us,
        measured_comm_transfer_us: measured.comm_transfer_us,
    }
}

impl Comparison {
    /// Step-time error in percent (signed); `None` when the measured step is empty.
    pub fn step_error_pct(&self) -> Option<f64> {
        self.step_rel_error.map(|e| e * 100.0)
    }

    /// Whether |step-time error| ≤ `pct` percent: the `--fail-above` test. An empty measured
    /// step is never within tolerance.
    #[cfg(test)]
    fn within(&self, pct: f64) -> bool {
        self.step_error_pct().is_some_and(|e| e.abs() <= pct)
    }

    #[cfg(test)]
    fn row(&self, c: Category) -> &CategoryComparison {
        &self.rows[c.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bd(step: f64, parts: &[(Category, f64)]) -> Breakdown {
        let mut b = Breakdown {
            step_time_us: step,
            ..Breakdown::default()
        };
        for &(c, t) in parts {
            b.exclusive_us[c.index()] = t;
        }
        b
    }

    #[test]
    fn errors_per_category_and_step() {
        let p = bd(
            110.0,
            &[(Category::Gemm, 60.0), (Category::Communication, 50.0)],
        );
        let m = bd(
            100.0,
            &[
                (Category::Gemm, 50.0),
                (Category::Communication, 40.0),
                (Category::Idle, 10.0),
            ],
        );
        let c = compare(&p, &m);
        let g = c.row(Category::Gemm);
        assert_eq!((g.abs_error_us, g.rel_error), (10.0, Some(0.2)));
        assert_eq!(g.measured_share, 0.5);
        assert_eq!(c.row(Category::Moe).rel_error, None);
        assert!((c.step_error_pct().unwrap() - 10.0).abs() < 1e-9);
        assert!(c.within(10.0 + 1e-9) && !c.within(9.9));
        assert_eq!(c.rows.len(), Category::COUNT);
    }

    #[test]
    fn empty_measurement_is_never_within() {
        let c = compare(&bd(10.0, &[]), &Breakdown::default());
        assert!(!c.within(1000.0));
    }
}
