//! DeepEP's low-latency all-to-all inside one node: `--ep-comm rdma-ll` on an expert-parallel
//! group that does not leave its node (across nodes `cost::internode` prices the RDMA path).
//! Its dispatch and combine kernels move each token copy straight to the expert's rank over
//! NVLink, with none of a ring's n−1 steps: NCCL's all-gather law (the fallback for an
//! all-to-all) prices them two to three times too slow at decode sizes. A profile's
//! `[deepep_ll]` holds one law per phase, `latency_us + bytes / bw_gbps`, fitted to measured
//! kernel times (`fit`, from a `deepep_ll.csv` as harness/aiconfigurator_tables.py converts
//! AIConfigurator's wide-EP tables).

use crate::error::{Error, Result};
use crate::measurements::DeepEpLlRow;
use crate::workload::{Op, OpRole};
use serde::{Deserialize, Serialize};

/// The two kernels of an expert-parallel MoE layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Dispatch,
    Combine,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Dispatch => "dispatch",
            Phase::Combine => "combine",
        }
    }

    /// The phase of an all-to-all op of the workload (`workload::parallel` adds them).
    pub fn of(op: &Op) -> Option<Self> {
        match op.role {
            OpRole::Dispatch => Some(Phase::Dispatch),
            OpRole::Combine => Some(Phase::Combine),
            _ => None,
        }
    }
}

/// One phase's law: `latency_us + bytes / (bw_gbps × 1e3)` µs for a rank's payload of `bytes`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeepEpLaw {
    pub latency_us: f64,
    pub bw_gbps: f64,
    /// Group sizes the rows were measured at.
    pub measured_ranks: Vec<u32>,
    /// The payloads the rows span.
    pub measured_bytes: [f64; 2],
    /// Rows fitted and the median |relative error| of the law over them.
    pub rows: usize,
    pub median_rel_err: f64,
}

impl DeepEpLaw {
    pub fn time_us(&self, bytes: f64) -> f64 {
        self.latency_us + bytes / (self.bw_gbps * 1e3)
    }
}

/// A profile's `[deepep_ll]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeepEpLl {
    pub dispatch: DeepEpLaw,
    pub combine: DeepEpLaw,
    /// Where the rows came from (table, collector, versions), in words.
    pub source: String,
}

impl DeepEpLl {
    pub fn law(&self, phase: Phase) -> &DeepEpLaw {
        match phase {
            Phase::Dispatch => &self.dispatch,
            Phase::Combine => &self.combine,
        }
    }

    /// Both phases fitted to `rows` (`source` says where they came from).
    pub fn fit(rows: &[DeepEpLlRow], table: &std::path::Path, source: String) -> Result<Self> {
        Ok(DeepEpLl {
            dispatch: fit(rows, Phase::Dispatch, table)?,
            combine: fit(rows, Phase::Combine, table)?,
            source,
        })
    }
}

/// The law of one phase fitted to its rows by least squares on the relative error (a 10 µs
/// row weighs as much as a 500 µs one: decode runs at the small end).
pub fn fit(rows: &[DeepEpLlRow], phase: Phase, table: &std::path::Path) -> Result<DeepEpLaw> {
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.phase == phase.name())
        .map(|r| (r.bytes, r.latency_us))
        .collect();
    let fail = |why: String| Error::field(table, phase.name(), why);
    if pts.len() < 2 {
        return Err(fail(format!(
            "{} {} rows: at least two sizes are needed to tell the latency from the bandwidth",
            pts.len(),
            phase.name()
        )));
    }
    // Minimise Σ ((a + b·x − t) / t)²: normal equations in (a, b) with weights 1/t².
    let (mut s11, mut s12, mut s22, mut r1, mut r2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, t) in &pts {
        let (u, v) = (1.0 / t, x / t);
        s11 += u * u;
        s12 += u * v;
        s22 += v * v;
        r1 += u;
        r2 += v;
    }
    let det = s11 * s22 - s12 * s12;
    let (a, b) = ((r1 * s22 - r2 * s12) / det, (s11 * r2 - s12 * r1) / det);
    if !(det.is_finite() && det > 0.0 && a.is_finite() && a >= 0.0 && b.is_finite() && b > 0.0) {
        return Err(fail(format!(
            "the {} rows fit no latency ≥ 0 and bandwidth > 0 (latency {a:.3} µs, {b:e} µs per byte): they do not grow with the payload",
            phase.name()
        )));
    }
    let mut errs: Vec<f64> = pts
        .iter()
        .map(|&(x, t)| ((a + b * x) / t - 1.0).abs())
        .collect();
    errs.sort_by(f64::total_cmp);
    let mut ranks: Vec<u32> = rows.iter().map(|r| r.ranks).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let (lo, hi) = pts
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &(x, _)| {
            (lo.min(x), hi.max(x))
        });
    Ok(DeepEpLaw {
        latency_us: a,
        bw_gbps: 1.0 / (b * 1e3),
        measured_ranks: ranks,
        measured_bytes: [lo, hi],
        rows: pts.len(),
        median_rel_err: errs[errs.len() / 2],
    })
}
