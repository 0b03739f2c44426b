//! The simulated step: every kernel on every rank, and the breakdowns derived from it.

use crate::accounting::{attribute, Breakdown, Interval};
use crate::category::Category;
use crate::workload::{Stream, Workload};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelRecord {
    /// Index into the workload's ops.
    pub op: u32,
    pub rank: u16,
    pub stream: Stream,
    pub start_us: f64,
    pub end_us: f64,
    /// For collectives: time spent waiting for the last rank to arrive.
    pub wait_us: f64,
}

#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub ranks: usize,
    pub records: Vec<KernelRecord>,
    /// When each rank's first kernel starts.
    pub rank_start_us: Vec<f64>,
    /// When each rank's last kernel ends.
    pub(crate) rank_end_us: Vec<f64>,
}

impl Timeline {
    pub(crate) fn clear(&mut self, ranks: usize) {
        self.ranks = ranks;
        self.records.clear();
        self.rank_end_us.clear();
        self.rank_end_us.resize(ranks, 0.0);
        self.rank_start_us.clear();
        self.rank_start_us.resize(ranks, f64::NAN);
    }

    /// One rank's step window: its first kernel's start to its last kernel's end.
    pub fn rank_window_us(&self, rank: usize) -> f64 {
        self.rank_end_us[rank] - self.rank_start_us[rank]
    }

    /// The step time: the mean over ranks of their windows, as a profile of every rank shows
    /// it (ranks end together at the last collective; an early starter's window holds its wait).
    pub fn step_time_us(&self) -> f64 {
        if self.ranks == 0 {
            return 0.0;
        }
        (0..self.ranks).map(|r| self.rank_window_us(r)).sum::<f64>() / self.ranks as f64
    }

    /// The span of every rank's window: the first start to the last end.
    pub fn span_us(&self) -> f64 {
        let start = self
            .rank_start_us
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let end = self
            .rank_end_us
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        if self.ranks == 0 {
            0.0
        } else {
            end - start
        }
    }

    pub fn rank_records(&self, rank: usize) -> impl Iterator<Item = &KernelRecord> {
        self.records.iter().filter(move |r| r.rank as usize == rank)
    }

    /// One breakdown per rank over its own step window.
    pub fn rank_breakdowns(&self, w: &Workload) -> Vec<Breakdown> {
        // Each op's category once (a record's op is a large struct; reading it per record
        // touches a cache line per record).
        let categories: Vec<Category> = w.ops.iter().map(|op| op.category).collect();
        // Every rank's intervals and communication wait and transfer, in recorded order, from
        // one pass over the records: the engine records op by op, so one rank's records lie a
        // rank count apart, and reading them rank by rank would miss the cache at each one.
        let per = self.records.len() / self.ranks.max(1) + 1;
        let mut intervals: Vec<Vec<Interval>> =
            (0..self.ranks).map(|_| Vec::with_capacity(per)).collect();
        let mut comm = vec![(0.0, 0.0); self.ranks];
        for r in &self.records {
            let rank = r.rank as usize;
            let Some(list) = intervals.get_mut(rank) else {
                continue;
            };
            let category = categories[r.op as usize];
            if category == Category::Communication {
                let c = &mut comm[rank];
                c.0 += r.wait_us;
                c.1 += r.end_us - r.start_us - r.wait_us;
            }
            list.push(Interval {
                start_us: r.start_us,
                end_us: r.end_us,
                category,
            });
        }
        let one = |scratch: &mut Vec<_>, rank: usize| {
            let (start, end) = (self.rank_start_us[rank], self.rank_end_us[rank]);
            let a = attribute(&intervals[rank], start, end, scratch);
            let mut b = Breakdown::from_attribution(end - start, a);
            (b.comm_wait_us, b.comm_transfer_us) = comm[rank];
            b
        };
        // Ranks are independent: a large timeline (hundreds of ranks) is read on every core.
        if self.records.len() >= PARALLEL_RECORDS {
            use rayon::prelude::*;
            (0..self.ranks)
                .into_par_iter()
                .map_init(Vec::new, one)
                .collect()
        } else {
            let mut scratch = Vec::new();
            (0..self.ranks)
                .map(|rank| one(&mut scratch, rank))
                .collect()
        }
    }
}

/// Records above which the per-rank breakdowns are computed on every core (about a
/// millisecond of attribution).
const PARALLEL_RECORDS: usize = 50_000;
