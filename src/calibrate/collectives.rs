//! NCCL's latency/bandwidth law fitted to in-graph collective timings, one entry per
//! (op, path, algorithm, protocol).

use super::kernels::{range, rel_errors};
use super::regression::{r_squared, weighted_least_squares, LinearFit};
use super::FitQuality;
use crate::cost::collective::{steps, time_us};
use crate::cost::profile::{CollectiveOp, CollectiveParams};
use crate::measurements::{CollectivePoint, LaunchMode};
use crate::scenario::{Algo, CommPath, Proto};
use crate::workload::CostFamily;
use std::collections::{BTreeMap, BTreeSet};

/// NCCL's base latency per protocol (docs/sources.md §4.1, Ring), used when one rank count cannot
/// separate the base from the per-step latency.
fn nccl_base_us(proto: Proto) -> f64 {
    match proto {
        Proto::Ll => 6.6,
        Proto::Ll128 => 14.0,
        _ => 8.4,
    }
}

/// One group of points priced by one profile entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Group {
    family: CostFamily,
    path: CommPath,
    algo: Algo,
    proto: Proto,
}

impl Group {
    fn section(&self) -> String {
        format!(
            "collectives {}/{}/{}/{}",
            self.family,
            self.path,
            self.algo.name().to_ascii_lowercase(),
            self.proto
        )
    }
}

/// Grouping order: the spec enums are not `Ord`, their declaration order is enough.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct CostKey(CostFamily, usize, usize, usize);

/// Groups the points the engine prices: explicit protocols inside CUDA graphs. NCCL's own
/// choice ("default") is kept for validation, eager timings measure the host, and one rank
/// moves nothing.
fn groups(points: &[CollectivePoint]) -> BTreeMap<CostKey, (Group, Vec<&CollectivePoint>)> {
    let mut out: BTreeMap<CostKey, (Group, Vec<&CollectivePoint>)> = BTreeMap::new();
    for p in points {
        if p.mode != LaunchMode::Graph || p.proto == Proto::Auto || p.nranks < 2 {
            continue;
        }
        let g = Group {
            family: p.op,
            path: if p.p2p {
                CommPath::Nvlink
            } else {
                CommPath::Host
            },
            // NCCL's default algorithm for these sizes on one node is Ring.
            algo: if p.algo == Algo::Auto {
                Algo::Ring
            } else {
                p.algo
            },
            proto: p.proto,
        };
        let key = CostKey(g.family, g.path as usize, g.algo as usize, g.proto as usize);
        out.entry(key).or_insert((g, Vec::new())).1.push(p);
    }
    out
}

/// A group that yields no law at all, with why.
pub(crate) struct Unfittable {
    pub(crate) section: String,
    pub(crate) why: String,
}

/// Fits every group. Groups that cannot be fitted come back as [`Unfittable`], never dropped.
pub(crate) fn fit_all(
    points: &[CollectivePoint],
    max_bus_bw_gbps: f64,
) -> (Vec<CollectiveParams>, Vec<FitQuality>, Vec<Unfittable>) {
    let mut out = Vec::new();
    let mut quality = Vec::new();
    let mut failed = Vec::new();
    for (_, (g, pts)) in groups(points) {
        match fit_group(g, &pts, max_bus_bw_gbps) {
            Ok((p, q)) => {
                out.push(p);
                quality.push(q);
            }
            Err(why) => failed.push(Unfittable {
                section: g.section(),
                why,
            }),
        }
    }
    (out, quality, failed)
}

/// `t = base + hop·steps + (1/busbw)·load`, with load = bytes·steps/n (tree all-reduce:
/// 2·bytes). With one rank count, base is NCCL's constant and only hop and bandwidth are fitted.
fn regress(g: Group, pts: &[&CollectivePoint], several: bool) -> Option<LinearFit> {
    let load = |p: &CollectivePoint| {
        if g.algo == Algo::Tree && g.family == CostFamily::AllReduce {
            2.0 * p.bytes / 1e3
        } else {
            p.bytes * steps(g.family, p.nranks) / p.nranks as f64 / 1e3
        }
    };
    let base = nccl_base_us(g.proto);
    let x: Vec<Vec<f64>> = pts
        .iter()
        .map(|p| {
            let s = steps(g.family, p.nranks);
            if several {
                vec![1.0, s, load(p)]
            } else {
                vec![s, load(p)]
            }
        })
        .collect();
    let y: Vec<f64> = pts
        .iter()
        .map(|p| p.median_us - if several { 0.0 } else { base })
        .collect();
    let w: Vec<f64> = pts
        .iter()
        .map(|p| 1.0 / (p.median_us * p.median_us))
        .collect();
    weighted_least_squares(&x, &y, &w)
}

/// Long because: the coefficients, their confidence intervals and the fold of a negative
/// per-step latency feed both the parameters and their quality report; split, each half would
/// take all of them as arguments.
fn fit_group(
    g: Group,
    pts: &[&CollectivePoint],
    max_bus_bw_gbps: f64,
) -> Result<(CollectiveParams, FitQuality), String> {
    let ranks: BTreeSet<u32> = pts.iter().map(|p| p.nranks).collect();
    let several = ranks.len() > 1;
    let fit = regress(g, pts, several).ok_or_else(|| {
        let sizes: BTreeSet<u64> = pts.iter().map(|p| p.bytes.to_bits()).collect();
        format!(
            "the {} points hold {} distinct message size(s) at {} rank count(s): too few to separate latency from bandwidth",
            pts.len(),
            sizes.len(),
            ranks.len()
        )
    })?;
    let j = usize::from(several);
    let (base, ci_base) = if several {
        (fit.coef[0], fit.ci95[0])
    } else {
        (nccl_base_us(g.proto), 0.0)
    };
    let (hop, ci_hop) = (fit.coef[j], fit.ci95[j]);
    let (inv_bw, ci_inv) = (fit.coef[j + 1], fit.ci95[j + 1]);
    if !(inv_bw > 0.0) {
        return Err(format!(
            "the time does not grow with the message size (fitted 1/bandwidth {inv_bw:.3e}): no bandwidth to fit"
        ));
    }
    // A negative per-step latency folds into the base at the smallest rank count measured.
    let (base, hop) = if hop < 0.0 {
        let n0 = *ranks.iter().next().expect("a group has points");
        (base + hop * steps(g.family, n0), 0.0)
    } else {
        (base, hop)
    };
    let bw = 1.0 / inv_bw;
    let bytes: Vec<f64> = pts.iter().map(|p| p.bytes).collect();
    let params = CollectiveParams {
        op: CollectiveOp::of(g.family),
        path: g.path,
        algo: g.algo,
        proto: g.proto,
        base_us: base.max(0.0),
        hop_us: hop,
        bus_bw_gbps: bw,
        source: format!(
            "fitted: {} in-graph points, {} ranks{}",
            pts.len(),
            ranks
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("/"),
            if several {
                ""
            } else {
                "; base fixed to NCCL's baseLat (one rank count cannot separate it)"
            }
        ),
        measured_nranks: ranks.iter().copied().collect(),
        measured_bytes: Some(range(&bytes)),
    };
    let obs: Vec<f64> = pts.iter().map(|p| p.median_us).collect();
    let pred: Vec<f64> = pts
        .iter()
        .map(|p| time_us(&params, g.family, p.nranks, p.bytes as u64))
        .collect();
    let (med, max_rel) = rel_errors(&obs, &pred);
    let mut unphysical = Vec::new();
    if bw > max_bus_bw_gbps {
        unphysical.push(format!(
            "bus bandwidth {bw:.1} GB/s is above the GPU's memory bandwidth {max_bus_bw_gbps} GB/s"
        ));
    }
    let q = FitQuality {
        section: g.section(),
        points: pts.len(),
        params: vec![
            ("base_us".into(), params.base_us, ci_base),
            ("hop_us".into(), hop, ci_hop),
            ("bus_bw_gbps".into(), bw, ci_inv * bw * bw),
        ],
        checked: vec!["bus_bw_gbps".into()],
        r2: r_squared(&obs, &pred),
        median_abs_rel_err: med,
        max_abs_rel_err: max_rel,
        unphysical,
        notes: Vec::new(),
    };
    Ok((params, q))
}
