//! Collective cost in NCCL's own terms (docs/sources.md §4.2): a latency of `base + steps × hop`
//! plus the message over the algorithm bandwidth derived from the bus bandwidth.

use super::profile::{CollectiveOp, CollectiveParams};
use crate::scenario::{Algo, CommPath, Proto};
use crate::workload::CostFamily;

/// Ring steps of a collective over `n` ranks: 2(n−1) for all-reduce, n−1 for all-gather,
/// reduce-scatter and all-to-all (NCCL's `nsteps`, docs/sources.md §4.2; all-to-all: n−1 peer
/// exchanges).
pub fn steps(family: CostFamily, n: u32) -> f64 {
    let n = n.max(1) as f64;
    match family {
        CostFamily::AllGather | CostFamily::ReduceScatter | CostFamily::AllToAll => n - 1.0,
        CostFamily::SendRecv => 1.0,
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
    match p.algo {
        // NCCL halves the tree all-reduce's bus bandwidth to get its algorithm bandwidth.
        Algo::Tree if family == CostFamily::AllReduce => p.bus_bw_gbps * 0.5,
        _ => p.bus_bw_gbps * n as f64 / s,
    }
}

pub fn time_us(p: &CollectiveParams, family: CostFamily, n: u32, bytes: u64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    p.base_us + steps(family, n) * p.hop_us + bytes as f64 / (algbw_gbps(p, family, n) * 1e3)
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
    let matches = |p: &&CollectiveParams, op: CollectiveOp| {
        p.op == op
            && p.path == path
            && (algo == Algo::Auto || p.algo == algo)
            && match proto {
                Proto::Auto => p.proto != Proto::Ll128 || path == CommPath::Nvlink,
                _ => p.proto == proto,
            }
    };
    let exact: Vec<_> = all
        .iter()
        .filter(|p| matches(p, CollectiveOp::of(family)))
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    all.iter()
        .filter(|p| matches(p, CollectiveOp::Any))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: CollectiveOp, path: CommPath, algo: Algo, proto: Proto) -> CollectiveParams {
        CollectiveParams {
            op,
            path,
            algo,
            proto,
            base_us: 6.0,
            hop_us: 1.0,
            bus_bw_gbps: 100.0,
            source: "test".into(),
            measured_nranks: vec![],
            measured_bytes: None,
        }
    }

    #[test]
    fn ring_steps_are_2n_minus_2_and_n_minus_1() {
        assert_eq!(steps(CostFamily::AllReduce, 8), 14.0);
        assert_eq!(steps(CostFamily::AllGather, 8), 7.0);
        assert_eq!(steps(CostFamily::AllReduce, 1), 0.0);
    }

    #[test]
    fn latency_plus_bytes_over_algorithm_bandwidth() {
        let ring = entry(
            CollectiveOp::AllReduce,
            CommPath::Nvlink,
            Algo::Ring,
            Proto::Ll,
        );
        // 8 ranks: 6 + 14 × 1 = 20 us; algbw = 100 × 8/14 GB/s; 1 MB / (57.14 GB/s) = 17.5 us.
        let t = time_us(&ring, CostFamily::AllReduce, 8, 1_000_000);
        assert!(
            (t - (20.0 + 1e6 / (100.0 * 8.0 / 14.0 * 1e3))).abs() < 1e-9,
            "{t}"
        );
        assert!((t - 37.5).abs() < 1e-9, "{t}");
        // All-gather: 6 + 7 × 1 = 13 us; algbw = 100 × 8/7; 1 MB → 8.75 us.
        let t = time_us(&ring, CostFamily::AllGather, 8, 1_000_000);
        assert!((t - 21.75).abs() < 1e-9, "{t}");
        // One rank moves nothing.
        assert_eq!(time_us(&ring, CostFamily::AllReduce, 1, 1_000_000), 0.0);
    }

    #[test]
    fn tree_all_reduce_halves_the_bus_bandwidth() {
        let tree = entry(
            CollectiveOp::AllReduce,
            CommPath::Nvlink,
            Algo::Tree,
            Proto::Simple,
        );
        assert_eq!(algbw_gbps(&tree, CostFamily::AllReduce, 8), 50.0);
        // 6 + 14 + 1 MB / 50 GB/s = 20 + 20 = 40 us.
        assert!((time_us(&tree, CostFamily::AllReduce, 8, 1_000_000) - 40.0).abs() < 1e-9);
    }

    #[test]
    fn ll128_is_not_eligible_off_nvlink() {
        let all = vec![
            entry(
                CollectiveOp::AllReduce,
                CommPath::PcieP2p,
                Algo::Ring,
                Proto::Ll128,
            ),
            entry(
                CollectiveOp::AllReduce,
                CommPath::PcieP2p,
                Algo::Ring,
                Proto::Ll,
            ),
            entry(
                CollectiveOp::AllReduce,
                CommPath::Nvlink,
                Algo::Ring,
                Proto::Ll128,
            ),
        ];
        let c = candidates(
            &all,
            CostFamily::AllReduce,
            CommPath::PcieP2p,
            Algo::Auto,
            Proto::Auto,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].proto, Proto::Ll);
        let c = candidates(
            &all,
            CostFamily::AllReduce,
            CommPath::Nvlink,
            Algo::Auto,
            Proto::Auto,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].proto, Proto::Ll128);
    }

    #[test]
    fn exact_op_wins_over_any_and_choose_takes_the_minimum() {
        let mut slow = entry(
            CollectiveOp::AllReduce,
            CommPath::Host,
            Algo::Ring,
            Proto::Ll,
        );
        slow.bus_bw_gbps = 10.0;
        let mut fast = entry(
            CollectiveOp::AllReduce,
            CommPath::Host,
            Algo::Ring,
            Proto::Simple,
        );
        fast.base_us = 20.0;
        let any = entry(CollectiveOp::Any, CommPath::Host, Algo::Ring, Proto::Ll);
        let all = vec![slow, fast, any];
        let c = candidates(
            &all,
            CostFamily::AllReduce,
            CommPath::Host,
            Algo::Ring,
            Proto::Auto,
        );
        assert_eq!(c.len(), 2);
        assert!(c.iter().all(|p| p.op == CollectiveOp::AllReduce));
        // Small message (2 ranks, 1 KB): LL 6 + 2 + 0.1 = 8.1 us beats Simple 20 + 2 + 0.01.
        let (p, t) = choose(&c, CostFamily::AllReduce, 2, 1_000).unwrap();
        assert_eq!(p.proto, Proto::Ll);
        assert!((t - 8.1).abs() < 1e-9, "{t}");
        // Large message (10 MB): LL 8 + 1000 = 1008 us loses to Simple 22 + 100 = 122 us.
        let (p, t) = choose(&c, CostFamily::AllReduce, 2, 10_000_000).unwrap();
        assert_eq!(p.proto, Proto::Simple);
        assert!((t - 122.0).abs() < 1e-9, "{t}");
        // No exact entry for all_gather: the `any` entry carries it.
        let c = candidates(
            &all,
            CostFamily::AllGather,
            CommPath::Host,
            Algo::Auto,
            Proto::Auto,
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].op, CollectiveOp::Any);
        assert!(choose(&[], CostFamily::AllReduce, 2, 1).is_none());
    }
}
