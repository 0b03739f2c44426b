//! How many drafted tokens the target accepts, in vLLM's own terms (docs/sources.md §5,
//! `v1/spec_decode/metrics.py`): the draft acceptance rate is accepted / drafted tokens, the mean
//! acceptance length is 1 + accepted / drafts (the bonus token included), and the per-position
//! rate at position i is the share of drafts whose i-th token was accepted.
//!
//! Every form reduces to a survival vector `p[i] = P(at least i+1 draft tokens accepted)` for
//! i in 0..k, from which the closed form (1 + Σ p) and the Monte Carlo draws both come.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Where the acceptance comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Acceptance {
    /// vLLM's draft acceptance rate R: mean acceptance length 1 + k·R at every k. The spread
    /// follows a prefix chain (a token counts only if all before it were accepted) whose
    /// per-token probability is solved so that the mean is exactly k·R.
    Rate(f64),
    /// vLLM's per-position acceptance rates a1, a2, ... (non-increasing, in [0, 1]).
    PerPosition(Vec<f64>),
    /// A measured histogram of acceptance lengths (1 = only the bonus token) at some k.
    Lengths { path: PathBuf, counts: Vec<f64> },
}

impl Acceptance {
    pub fn rate(r: f64) -> Result<Self> {
        if !(r.is_finite() && (0.0..=1.0).contains(&r)) {
            return Err(Error::ScenarioRange {
                flag: "--acceptance-rate",
                value: r.to_string(),
                expected: "expected a fraction in [0, 1] (vLLM's accepted / drafted tokens)".into(),
            });
        }
        Ok(Acceptance::Rate(r))
    }

    pub fn per_position(rates: Vec<f64>) -> Result<Self> {
        if rates.is_empty() {
            return Err(Error::FlagUse {
                flag: "--acceptance-per-position",
                problem: "needs at least one rate (a1,a2,...)".into(),
            });
        }
        for (i, &a) in rates.iter().enumerate() {
            if !(a.is_finite() && (0.0..=1.0).contains(&a)) {
                return Err(Error::PositionRate {
                    position: i + 1,
                    rate: a,
                    problem: "is out of range: expected a fraction in [0, 1]".into(),
                });
            }
            if i > 0 && a > rates[i - 1] + 1e-12 {
                return Err(Error::PositionRate {
                    position: i + 1,
                    rate: a,
                    problem: format!(
                        "exceeds position {i} rate {}: a token is accepted only after every token before it, so the rates must not increase",
                        rates[i - 1]
                    ),
                });
            }
        }
        Ok(Acceptance::PerPosition(rates))
    }

    /// Reads `acceptance_length,count` rows (header required; lengths 1..=k+1).
    pub(crate) fn lengths_file(path: &Path) -> Result<Self> {
        let text = crate::files::read_text(path, crate::files::InputKind::MeasurementCsv)?;
        let mut records = crate::files::csv_records(&text, path, false)?.into_iter();
        let headers = records.next().map(|r| r.1).unwrap_or_default();
        let col = |name: &str| {
            headers.iter().position(|h| h == name).ok_or_else(|| {
                Error::field(
                    path,
                    name,
                    "missing column (expected the header acceptance_length,count)",
                )
            })
        };
        let (li, ci) = (col("acceptance_length")?, col("count")?);
        let mut counts: Vec<f64> = Vec::new();
        for (row, rec) in records {
            if rec.len() != headers.len() {
                return Err(Error::field(
                    path,
                    format!("row {row}"),
                    format!(
                        "found {} fields, expected {} (one per column of the header)",
                        rec.len(),
                        headers.len()
                    ),
                ));
            }
            let (len, count) = length_row(path, row, &rec, li, ci)?;
            let a = len as usize - 1;
            if counts.len() <= a {
                counts.resize(a + 1, 0.0);
            }
            counts[a] += count;
        }
        if counts.iter().sum::<f64>() <= 0.0 {
            return Err(Error::field(
                path,
                "count",
                "the histogram is empty (expected at least one positive count)",
            ));
        }
        if counts.len() < 2 {
            // Only the bonus token ever: nothing tells how many drafts were proposed.
            return Err(Error::field(
                path,
                "acceptance_length",
                "every row has length 1 (no draft token ever accepted), so the histogram cannot tell how many draft tokens were proposed; expected lengths up to k + 1 for k drafts (a row of k + 1 with count 0 states k)",
            ));
        }
        Ok(Acceptance::Lengths {
            path: path.to_path_buf(),
            counts,
        })
    }

    /// The most draft tokens this acceptance input describes (None: any k).
    fn max_k(&self) -> Option<u32> {
        match self {
            Acceptance::Rate(_) => None,
            Acceptance::PerPosition(a) => Some(a.len() as u32),
            Acceptance::Lengths { counts, .. } => Some(counts.len() as u32 - 1),
        }
    }

    /// Checks that `k` draft tokens are covered, naming the flag otherwise.
    pub(crate) fn check_k(&self, k: u32) -> Result<()> {
        match (self, self.max_k()) {
            (Acceptance::PerPosition(a), Some(m)) if k > m => Err(Error::ScenarioSetting {
                flag: "--draft-tokens",
                value: k.to_string(),
                problem: format!(
                    " needs {k} per-position rates, --acceptance-per-position gives {} (allowed: --draft-tokens 1..={m})",
                    a.len()
                ),
            }),
            (Acceptance::Lengths { path, .. }, Some(m)) if k > m => Err(Error::ScenarioSetting {
                flag: "--draft-tokens",
                value: k.to_string(),
                problem: format!(
                    " is above the {m} draft tokens the histogram {} was measured at (allowed: --draft-tokens 1..={m})",
                    path.display()
                ),
            }),
            _ => Ok(()),
        }
    }

    /// `p[i]` = P(at least i+1 of the k draft tokens accepted), i in 0..k.
    pub fn survival(&self, k: u32) -> Vec<f64> {
        let k = k as usize;
        match self {
            Acceptance::Rate(r) => {
                let alpha = chain_alpha(*r, k);
                (1..=k).map(|i| alpha.powi(i as i32)).collect()
            }
            Acceptance::PerPosition(a) => a.iter().take(k).copied().collect(),
            Acceptance::Lengths { counts, .. } => {
                let total: f64 = counts.iter().sum();
                (1..=k)
                    .map(|i| counts.iter().skip(i).sum::<f64>() / total)
                    .collect()
            }
        }
    }

    /// Expected tokens per sequence per step (the mean acceptance length), closed form.
    pub fn mean_acceptance_length(&self, k: u32) -> f64 {
        1.0 + self.survival(k).iter().sum::<f64>()
    }

    /// P(accepted = a) for a in 0..=k.
    pub(crate) fn pmf(&self, k: u32) -> Vec<f64> {
        let p = self.survival(k);
        let mut out = Vec::with_capacity(p.len() + 1);
        let mut prev = 1.0;
        for &s in &p {
            out.push((prev - s).max(0.0));
            prev = s;
        }
        out.push(prev);
        out
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Acceptance::Rate(r) => format!("acceptance rate {r} (mean length 1 + k x {r})"),
            Acceptance::PerPosition(a) => format!(
                "per-position acceptance {}",
                a.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Acceptance::Lengths { path, .. } => {
                format!("acceptance lengths from {}", crate::units::path(path))
            }
        }
    }
}

/// One row of an acceptance-length histogram: its length (a whole number 1..=64) and its count
/// (within `LOG_COUNT`), from columns `li` and `ci`.
fn length_row(path: &Path, row: usize, rec: &[String], li: usize, ci: usize) -> Result<(f64, f64)> {
    let field = |i: usize, name: &str| -> Result<f64> {
        rec.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| {
                Error::field(
                    path,
                    format!("row {row} column {name}"),
                    format!(
                        "expected a number >= 0, found '{}'",
                        rec.get(i).map_or("", String::as_str)
                    ),
                )
            })
    };
    let len = field(li, "acceptance_length")?;
    let count = field(ci, "count")?;
    // Bounded (`scenario::limits::LOG_COUNT`), so the counts' sum cannot overflow.
    if !crate::scenario::limits::LOG_COUNT.contains(count) {
        return Err(Error::field(
            path,
            format!("row {row} column count"),
            format!(
                "found {}, expected {}",
                crate::scenario::check::show(count),
                crate::scenario::limits::LOG_COUNT.describe()
            ),
        ));
    }
    if len < 1.0 || len.fract() != 0.0 || len > 64.0 {
        return Err(Error::field(
            path,
            format!("row {row} column acceptance_length"),
            format!("expected a whole number from 1 (bonus token only) to 64, found {len}"),
        ));
    }
    Ok((len, count))
}

/// The per-token chain probability α with Σ_{i=1..k} α^i = k·r (bisection; the sum rises with
/// α from 0 at α = 0 to k at α = 1).
fn chain_alpha(r: f64, k: usize) -> f64 {
    let target = r * k as f64;
    if r <= 0.0 || k == 0 {
        return 0.0;
    }
    if r >= 1.0 {
        return 1.0;
    }
    let sum = |a: f64| (1..=k).map(|i| a.powi(i as i32)).sum::<f64>();
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..80 {
        let mid = 0.5 * (lo + hi);
        if sum(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_gives_vllm_mean_length() {
        for k in 1..=6 {
            let a = Acceptance::rate(0.35).unwrap();
            let m = a.mean_acceptance_length(k);
            assert!((m - (1.0 + k as f64 * 0.35)).abs() < 1e-9, "k {k}: {m}");
            let pmf = a.pmf(k);
            assert!((pmf.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn per_position_and_lengths() {
        let a = Acceptance::per_position(vec![0.8, 0.6, 0.4]).unwrap();
        assert!((a.mean_acceptance_length(3) - 2.8).abs() < 1e-12);
        assert!((a.mean_acceptance_length(2) - 2.4).abs() < 1e-12);
        assert!(a.check_k(4).is_err());
        assert!(Acceptance::per_position(vec![0.5, 0.6]).is_err());
        assert!(Acceptance::rate(1.2).is_err());
        assert!(Acceptance::rate(-0.1).is_err());
    }
}
