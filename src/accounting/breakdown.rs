//! Where a step's time went, category by category: the type both the simulator and the trace
//! reader produce (see [`super::attribute`] for how an instant is assigned).

use super::attribute::Attribution;
use crate::category::Category;
use serde::Serialize;

const N: usize = Category::COUNT;

/// One step's time split by category, for one rank or averaged over ranks.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Breakdown {
    pub step_time_us: f64,
    /// Exclusive time per category, indexed by [`Category::index`]; sums to `step_time_us`.
    pub exclusive_us: [f64; N],
    /// Union of each category's intervals (overlap with other categories included).
    pub busy_us: [f64; N],
    /// Communication time spent waiting for the slowest rank to arrive.
    pub comm_wait_us: f64,
    /// Communication time spent moving data once every rank had arrived.
    pub comm_transfer_us: f64,
}

/// One row of a breakdown as it is reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakdownEntry {
    pub(crate) category: Category,
    /// Exclusive time (see the module docs).
    pub(crate) time_us: f64,
    /// `time_us` over the step time.
    pub(crate) share: f64,
    /// Union of this category's kernels, overlap included.
    pub(crate) busy_us: f64,
}

impl Breakdown {
    pub(crate) fn from_attribution(step_time_us: f64, a: Attribution) -> Self {
        Breakdown {
            step_time_us,
            exclusive_us: a.exclusive_us,
            busy_us: a.busy_us,
            comm_wait_us: 0.0,
            comm_transfer_us: 0.0,
        }
    }

    pub fn time(&self, c: Category) -> f64 {
        self.exclusive_us[c.index()]
    }

    pub(crate) fn share(&self, c: Category) -> f64 {
        if self.step_time_us > 0.0 {
            self.time(c) / self.step_time_us
        } else {
            0.0
        }
    }

    /// Communication that ran while compute ran too.
    pub(crate) fn comm_overlapped_us(&self) -> f64 {
        let c = Category::Communication.index();
        (self.busy_us[c] - self.exclusive_us[c]).max(0.0)
    }

    pub(crate) fn entries(&self) -> Vec<BreakdownEntry> {
        Category::ALL
            .iter()
            .map(|&c| BreakdownEntry {
                category: c,
                time_us: self.time(c),
                share: self.share(c),
                busy_us: self.busy_us[c.index()],
            })
            .collect()
    }

    /// Element-wise mean of several breakdowns (ranks or steps).
    pub fn mean<'a>(items: impl IntoIterator<Item = &'a Breakdown>) -> Breakdown {
        let mut out = Breakdown::default();
        let mut n = 0usize;
        for b in items {
            n += 1;
            out.step_time_us += b.step_time_us;
            out.comm_wait_us += b.comm_wait_us;
            out.comm_transfer_us += b.comm_transfer_us;
            for i in 0..N {
                out.exclusive_us[i] += b.exclusive_us[i];
                out.busy_us[i] += b.busy_us[i];
            }
        }
        if n > 0 {
            let k = 1.0 / n as f64;
            out.step_time_us *= k;
            out.comm_wait_us *= k;
            out.comm_transfer_us *= k;
            for i in 0..N {
                out.exclusive_us[i] *= k;
                out.busy_us[i] *= k;
            }
        }
        out
    }
}
