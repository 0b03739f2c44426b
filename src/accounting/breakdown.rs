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

    /// A profiled step brought to the length `unprofiled_us` the same step runs without the
    /// profiler: what the profiler added comes out of the idle first (its graph-launch stall
    /// leaves the GPU idle), then out of the waiting in collectives (a rank it delayed makes
    /// the others wait), as far as each goes; kernels keep their measured times. A step no
    /// longer than `unprofiled_us` is kept as it is.
    pub fn less_profiler(&self, unprofiled_us: f64) -> Breakdown {
        let mut out = self.clone();
        let mut extra = (self.step_time_us - unprofiled_us).max(0.0);
        let idle = Category::Idle.index();
        let from_idle = extra.min(out.exclusive_us[idle]);
        out.exclusive_us[idle] -= from_idle;
        out.busy_us[idle] = (out.busy_us[idle] - from_idle).max(0.0);
        extra -= from_idle;
        let comm = Category::Communication.index();
        let from_wait = extra.min(out.comm_wait_us).min(out.exclusive_us[comm]);
        out.comm_wait_us -= from_wait;
        out.exclusive_us[comm] -= from_wait;
        out.busy_us[comm] = (out.busy_us[comm] - from_wait).max(0.0);
        out.step_time_us -= from_idle + from_wait;
        out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn step(idle: f64, wait: f64, kernels: f64) -> Breakdown {
        let mut b = Breakdown::default();
        b.exclusive_us[Category::Idle.index()] = idle;
        b.busy_us[Category::Idle.index()] = idle;
        b.exclusive_us[Category::Communication.index()] = wait + 10.0;
        b.busy_us[Category::Communication.index()] = wait + 10.0;
        b.comm_wait_us = wait;
        b.comm_transfer_us = 10.0;
        b.exclusive_us[Category::Gemm.index()] = kernels;
        b.step_time_us = idle + wait + 10.0 + kernels;
        b
    }

    #[test]
    fn the_profilers_time_comes_out_of_idle_then_waiting() {
        // 150 µs idle, 40 waiting: a step 100 µs shorter without the profiler loses idle only.
        let b = step(150.0, 40.0, 1000.0);
        let u = b.less_profiler(b.step_time_us - 100.0);
        assert_eq!(u.time(Category::Idle), 50.0);
        assert_eq!(u.comm_wait_us, 40.0);
        assert_eq!(u.step_time_us, b.step_time_us - 100.0);
        // 170 µs shorter: all idle, then 20 of the waiting; kernels untouched.
        let u = b.less_profiler(b.step_time_us - 170.0);
        assert_eq!(u.time(Category::Idle), 0.0);
        assert_eq!(u.comm_wait_us, 20.0);
        assert_eq!(u.time(Category::Communication), 30.0);
        assert_eq!(u.time(Category::Gemm), 1000.0);
        assert_eq!(u.step_time_us, b.step_time_us - 170.0);
        // More than idle and waiting hold: the kernels stay, the step keeps the rest.
        let u = b.less_profiler(b.step_time_us - 500.0);
        assert_eq!(u.step_time_us, 1010.0);
        // An unprofiled step as long or longer changes nothing.
        assert_eq!(b.less_profiler(b.step_time_us + 5.0), b);
    }
}
