//! The roofline law fitted to one kernel family's measurements, held to physics: no efficiency
//! above 1.

use super::regression::{median, r_squared, weighted_least_squares};
use super::FitQuality;
use crate::cost::profile::KernelParams;
use crate::measurements::KernelPoint;
use crate::scenario::GpuSpec;
use crate::workload::CostFamily;
use std::collections::BTreeSet;

/// `t = a + max(b·tm, c·tc)`; `b = 1/mem_eff`, `c = 1/compute_eff` (NaN: no point on that bound).
#[derive(Debug, Clone, Copy)]
struct Roofline {
    a: f64,
    b: f64,
    c: f64,
    /// 95% CI half-widths of a, b, c (0 for a value held fixed).
    ci: [f64; 3],
}

/// Fits `t = a + max(b·tm, c·tc)` by alternating between assigning each point to its bound and a
/// weighted least squares on relative error; `hold` fixes b and/or c (at the physical limit).
fn alternate(tm: &[f64], tc: &[f64], y: &[f64], hold: [Option<f64>; 2]) -> Option<Roofline> {
    let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
    let (b0, c0) = (hold[0].unwrap_or(1.0), hold[1].unwrap_or(1.0));
    let mut mem_bound: Vec<bool> = tm.iter().zip(tc).map(|(m, c)| b0 * m >= c0 * c).collect();
    let mut best = None;
    for _ in 0..20 {
        let any_mem = mem_bound.iter().any(|&b| b);
        let any_cmp = mem_bound.iter().any(|&b| !b);
        let free_b = any_mem && hold[0].is_none();
        let free_c = any_cmp && hold[1].is_none();
        let mut x = Vec::with_capacity(y.len());
        let mut yy = Vec::with_capacity(y.len());
        for i in 0..y.len() {
            let mut r = vec![1.0];
            let mut held = 0.0;
            if free_b {
                r.push(if mem_bound[i] { tm[i] } else { 0.0 });
            } else if mem_bound[i] {
                held = b0 * tm[i];
            }
            if free_c {
                r.push(if mem_bound[i] { 0.0 } else { tc[i] });
            } else if !mem_bound[i] {
                held = c0 * tc[i];
            }
            x.push(r);
            yy.push(y[i] - held);
        }
        let fit = weighted_least_squares(&x, &yy, &w)?;
        let coef = |j: usize| (fit.coef[j], fit.ci95.get(j).copied().unwrap_or(f64::NAN));
        let (b, ci_b) = match (any_mem, free_b) {
            (false, _) => (f64::NAN, f64::NAN),
            (true, true) => coef(1),
            (true, false) => (b0, 0.0),
        };
        let (c, ci_c) = match (any_cmp, free_c) {
            (false, _) => (f64::NAN, f64::NAN),
            (true, true) => coef(if free_b { 2 } else { 1 }),
            (true, false) => (c0, 0.0),
        };
        let r = Roofline {
            a: fit.coef[0].max(0.0),
            b,
            c,
            ci: [coef(0).1, ci_b, ci_c],
        };
        let pos = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        let next: Vec<bool> = (0..y.len())
            .map(|i| pos(b) * tm[i] >= pos(c) * tc[i])
            .collect();
        best = Some(r);
        if next == mem_bound {
            break;
        }
        mem_bound = next;
    }
    best
}

/// Fits one profile section. `Err` says why no law could be fitted at all (too few distinct
/// shapes, no memory-bound point); a fit that exists but fits badly comes back with its quality
/// for the caller's verdict.
pub(crate) fn fit_family(
    family: CostFamily,
    pts: &[&KernelPoint],
    gpu: &GpuSpec,
) -> Result<(KernelParams, FitQuality), String> {
    let peak = if family.uses_fp8_peak() {
        gpu.fp8_tflops
    } else {
        gpu.bf16_tflops
    } * 1e6;
    let bw = gpu.memory_bandwidth_gbps * 1e3;
    let tm: Vec<f64> = pts.iter().map(|p| p.bytes / bw).collect();
    let tc: Vec<f64> = pts.iter().map(|p| p.flops / peak).collect();
    let y: Vec<f64> = pts.iter().map(|p| p.median_us).collect();
    let singular = || {
        let shapes: BTreeSet<(u64, u64)> = pts
            .iter()
            .map(|p| (p.bytes.to_bits(), p.flops.to_bits()))
            .collect();
        format!(
            "the {} points hold {} distinct (bytes, flops) pair(s): too few to separate the fixed cost from the memory and compute times",
            pts.len(),
            shapes.len()
        )
    };
    let mut notes = Vec::new();
    let r = fit_within_peak(&tm, &tc, &y, &mut notes).ok_or_else(singular)?;
    if !(r.b.is_finite() && r.b > 0.0) {
        return Err(
            "no point is memory-bound with a positive slope: the memory efficiency is not identified"
                .into(),
        );
    }
    let mem_eff = 1.0 / r.b;
    let compute_identified = r.c.is_finite() && r.c > 0.0;
    let compute_eff = if compute_identified {
        1.0 / r.c
    } else {
        notes.push("no compute-bound point: compute efficiency not identified, set to 1.0".into());
        1.0
    };
    let pred: Vec<f64> = (0..pts.len())
        .map(|i| r.a + (tm[i] / mem_eff).max(tc[i] / compute_eff))
        .collect();
    let (med, max_rel) = rel_errors(&y, &pred);
    // CI of an efficiency from the CI of its reciprocal (delta method).
    let mut params = vec![
        ("fixed_us".to_string(), r.a, r.ci[0]),
        (
            "mem_efficiency".into(),
            mem_eff,
            r.ci[1] * mem_eff * mem_eff,
        ),
    ];
    if compute_identified {
        params.push((
            "compute_efficiency".into(),
            compute_eff,
            r.ci[2] * compute_eff * compute_eff,
        ));
    }
    let k = fitted_params(pts, r.a, mem_eff, compute_eff, med);
    let q = FitQuality {
        section: format!("kernels.{family}"),
        points: pts.len(),
        params,
        checked: vec!["mem_efficiency".into(), "compute_efficiency".into()],
        r2: r_squared(&y, &pred),
        median_abs_rel_err: med,
        max_abs_rel_err: max_rel,
        unphysical: Vec::new(),
        notes,
    };
    Ok((k, q))
}

/// The roofline fitted by [`alternate`] with no efficiency above the GPU's peak: an efficiency
/// above 1 beats the hardware (small buffers served from L2 look that way), so it is held at
/// the peak and the rest refitted, which is the least-squares fit under the constraint; each
/// hold is a note. None: the points cannot separate the terms.
fn fit_within_peak(tm: &[f64], tc: &[f64], y: &[f64], notes: &mut Vec<String>) -> Option<Roofline> {
    let mut hold = [None, None];
    let mut r = alternate(tm, tc, y, hold)?;
    for _ in 0..2 {
        let over_b = hold[0].is_none() && r.b.is_finite() && r.b > 0.0 && r.b < 1.0;
        let over_c = hold[1].is_none() && r.c.is_finite() && r.c > 0.0 && r.c < 1.0;
        if !over_b && !over_c {
            break;
        }
        for (over, i, name, v) in [
            (over_b, 0, "mem_efficiency", r.b),
            (over_c, 1, "compute_efficiency", r.c),
        ] {
            if over {
                hold[i] = Some(1.0);
                notes.push(format!(
                    "{name} held at 1: the free fit gave {:.3}, above the GPU's peak",
                    1.0 / v
                ));
            }
        }
        r = alternate(tm, tc, y, hold)?;
    }
    Some(r)
}

/// The section's law as fitted, with its source line and the shapes it was measured over.
fn fitted_params(
    pts: &[&KernelPoint],
    fixed_us: f64,
    mem_eff: f64,
    compute_eff: f64,
    median_rel_err: f64,
) -> KernelParams {
    let ms: Vec<f64> = pts.iter().map(|p| p.m).collect();
    let bs: Vec<f64> = pts.iter().map(|p| p.bytes).collect();
    let families: BTreeSet<&str> = pts.iter().map(|p| p.family.name()).collect();
    KernelParams {
        fixed_us,
        mem_efficiency: mem_eff,
        compute_efficiency: compute_eff,
        m_half: 0.0,
        source: format!(
            "fitted: {} points of {} (median |rel err| {:.1}%)",
            pts.len(),
            families.into_iter().collect::<Vec<_>>().join("+"),
            median_rel_err * 100.0
        ),
        measured_m: ms.iter().any(|&m| m > 0.0).then(|| range(&ms)),
        measured_bytes: Some(range(&bs)),
    }
}

/// [min, max] of a non-empty set.
pub(crate) fn range(v: &[f64]) -> [f64; 2] {
    [
        v.iter().copied().fold(f64::MAX, f64::min),
        v.iter().copied().fold(f64::MIN, f64::max),
    ]
}

/// Median and maximum of |predicted − observed| / observed.
pub(crate) fn rel_errors(obs: &[f64], pred: &[f64]) -> (f64, f64) {
    let mut rel: Vec<f64> = obs
        .iter()
        .zip(pred)
        .map(|(o, p)| ((p - o) / o).abs())
        .collect();
    let max = rel.iter().copied().fold(0.0, f64::max);
    (median(&mut rel), max)
}
