//! The simulated step: every kernel on every rank, and the breakdowns derived from it.

use crate::breakdown::{attribute, Breakdown, Interval};
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
    /// When each rank's last kernel ends; the step starts at 0 on every rank.
    pub rank_end_us: Vec<f64>,
}

impl Timeline {
    pub fn clear(&mut self, ranks: usize) {
        self.ranks = ranks;
        self.records.clear();
        self.rank_end_us.clear();
        self.rank_end_us.resize(ranks, 0.0);
    }

    /// The step is over when the slowest rank is done.
    pub fn step_time_us(&self) -> f64 {
        self.rank_end_us.iter().copied().fold(0.0, f64::max)
    }

    pub fn rank_records(&self, rank: usize) -> impl Iterator<Item = &KernelRecord> {
        self.records.iter().filter(move |r| r.rank as usize == rank)
    }

    /// One breakdown per rank over the step window [0, step end].
    pub fn rank_breakdowns(&self, w: &Workload) -> Vec<Breakdown> {
        let step = self.step_time_us();
        let mut scratch = Vec::new();
        let mut intervals = Vec::new();
        (0..self.ranks)
            .map(|rank| {
                intervals.clear();
                let (mut wait, mut transfer) = (0.0, 0.0);
                for r in self.rank_records(rank) {
                    let category = w.ops[r.op as usize].category;
                    if category == Category::Communication {
                        wait += r.wait_us;
                        transfer += r.end_us - r.start_us - r.wait_us;
                    }
                    intervals.push(Interval {
                        start_us: r.start_us,
                        end_us: r.end_us,
                        category,
                    });
                }
                let a = attribute(&intervals, 0.0, step, &mut scratch);
                let mut b = Breakdown::from_attribution(step, a);
                b.comm_wait_us = wait;
                b.comm_transfer_us = transfer;
                b
            })
            .collect()
    }
}
