//! The summary statistics `vllm bench serve` reports per metric: mean, median, standard
//! deviation and percentiles, the percentiles interpolated linearly between order statistics
//! as numpy's `percentile` does by default (docs/sources.md §11.2).

use serde::Serialize;

/// One metric over a run, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub mean_ms: f64,
    pub median_ms: f64,
    pub std_ms: f64,
    pub p99_ms: f64,
    /// Values summarised (requests, or inter-token gaps for ITL).
    pub count: usize,
}

impl Summary {
    /// The summary of `values_ms`; all zeros for no values (as the benchmark reports a metric
    /// none of its requests has, e.g. TPOT when every request generates one token).
    pub fn of(values_ms: &mut [f64]) -> Self {
        if values_ms.is_empty() {
            return Summary {
                mean_ms: 0.0,
                median_ms: 0.0,
                std_ms: 0.0,
                p99_ms: 0.0,
                count: 0,
            };
        }
        values_ms.sort_by(|a, b| a.total_cmp(b));
        let n = values_ms.len() as f64;
        let mean = values_ms.iter().sum::<f64>() / n;
        let var = values_ms.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        Summary {
            mean_ms: mean,
            median_ms: percentile(values_ms, 50.0),
            std_ms: var.sqrt(),
            p99_ms: percentile(values_ms, 99.0),
            count: values_ms.len(),
        }
    }
}

/// The `q`-th percentile of `sorted` (ascending, non-empty): numpy's default linear rule, rank
/// (n − 1) × q / 100 between the neighbouring order statistics.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    let rank = (n - 1) as f64 * (q / 100.0).clamp(0.0, 1.0);
    let lo = rank.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = rank - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_numpy_linear() {
        // numpy.percentile([1, 2, 3, 4], 50) = 2.5; 99 -> 3 + 0.97 = 3.97.
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        let mut w = vec![4.0, 1.0, 3.0, 2.0];
        let s = Summary::of(&mut w);
        assert_eq!((s.mean_ms, s.median_ms, s.count), (2.5, 2.5, 4));
        // Population standard deviation, as numpy.std: sqrt(1.25).
        assert!((s.std_ms - 1.25f64.sqrt()).abs() < 1e-12);
        assert_eq!(Summary::of(&mut []).count, 0);
    }
}
