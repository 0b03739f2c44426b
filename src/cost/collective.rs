//! Collective cost in NCCL's own terms (facts.md §4.2): a latency of `base + steps × hop`
//! plus the message over the algorithm bandwidth derived from the bus bandwidth.

use super::profile::CollectiveParams;
use crate::spec::{Algo, CommPath, Proto};
use crate::workload::CostFamily;

/// Ring steps of a collective over `n` ranks: 2(n−1) for all-reduce, n−1 for all-gather.
pub fn steps(family: CostFamily, n: u32) -> f64 {
    let n = n.max(1) as f64;
    match family {
        CostFamily::AllGather => n - 1.0,
        _ => 2.0 * (n - 1.0),
    }
}

/// Algorithm bandwidth (GB/s) for `bytes` as nccl-tests counts them (the all-reduce buffer,
/// the all-gather output).
pub fn algbw_gbps(p: &CollectiveParams, family: CostFamily, n: u32) -> f64 {
    let s = steps(family, n);
    if s <= 0.0 {
        return f64::INFINITY;
    }
    match p.algo.as_str() {
        // NCCL halves the tree all-reduce's bus bandwidth to get its algorithm bandwidth.
        "tree" if family == CostFamily::AllReduce => p.bus_bw_gbps * 0.5,
        _ => p.bus_bw_gbps * n as f64 / s,
    }
}

pub fn time_us(p: &CollectiveParams, family: CostFamily, n: u32, bytes: u64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    p.base_us + steps(family, n) * p.hop_us + bytes as f64 / (algbw_gbps(p, family, n) * 1e3)
}

fn op_key(f: CostFamily) -> &'static str {
    match f {
        CostFamily::AllGather => "all_gather",
        _ => "all_reduce",
    }
}

/// The entries that may carry a collective with these settings. Entries for the exact op win
/// over `any`. LL128 is only eligible over NVLink (NCCL disables it on PCIe paths, §4.2).
pub fn candidates(
    all: &[CollectiveParams],
    family: CostFamily,
    path: CommPath,
    algo: Algo,
    proto: Proto,
) -> Vec<&CollectiveParams> {
    let matches = |p: &&CollectiveParams, op: &str| {
        p.op == op
            && p.path == path.name()
            && (algo == Algo::Auto || p.algo == algo.name().to_ascii_lowercase())
            && match proto {
                Proto::Auto => p.proto != "LL128" || path == CommPath::Nvlink,
                _ => p.proto == proto.name(),
            }
    };
    let exact: Vec<_> = all.iter().filter(|p| matches(p, op_key(family))).collect();
    if !exact.is_empty() {
        return exact;
    }
    all.iter().filter(|p| matches(p, "any")).collect()
}

/// The cheapest candidate for this message, as NCCL's tuner picks the minimum-time pair.
pub fn choose<'a>(
    cands: &[&'a CollectiveParams],
    family: CostFamily,
    n: u32,
    bytes: u64,
) -> Option<(&'a CollectiveParams, f64)> {
    cands
        .iter()
        .map(|p| (*p, time_us(p, family, n, bytes)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}
