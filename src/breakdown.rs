//! Where a step's time went, category by category: the type both the simulator and the trace
//! reader produce, and the one accounting function both use, so that a predicted and a measured
//! breakdown mean exactly the same thing.
//!
//! Accounting rule: within a step window every instant is given to exactly one category. When
//! kernels overlap (auxiliary streams, same-stream overlap on Blackwell, communication hidden
//! behind compute) the instant goes to the active category that comes first in
//! [`Category::ALL`]; when nothing runs it is [`Category::Idle`]. So the exclusive times sum to
//! the step time, communication time is *exposed* communication, and nothing is counted twice
//! (summed kernel durations are not wall time). The plain union per category is kept too
//! (`busy_us`), so overlapped time stays visible.

use crate::category::Category;
use serde::Serialize;

const N: usize = Category::COUNT;

/// One kernel (or other GPU activity) as the accounting sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub start_us: f64,
    pub end_us: f64,
    pub category: Category,
}

/// Exclusive and union time per category inside `[window_start, window_end)`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Attribution {
    pub exclusive_us: [f64; N],
    pub busy_us: [f64; N],
}

/// Sweep-line attribution of `intervals` over a window. `scratch` is reused between calls so the
/// simulator's hot path does not allocate.
pub fn attribute(
    intervals: &[Interval],
    window_start: f64,
    window_end: f64,
    scratch: &mut Vec<(f64, i32, u8)>,
) -> Attribution {
    let mut out = Attribution::default();
    if window_end <= window_start {
        return out;
    }
    scratch.clear();
    for iv in intervals {
        let s = iv.start_us.max(window_start);
        let e = iv.end_us.min(window_end);
        if e > s && iv.category != Category::Idle {
            let c = iv.category.index() as u8;
            scratch.push((s, 1, c));
            scratch.push((e, -1, c));
        }
    }
    // Ends sort before starts at the same instant, so touching kernels do not overlap.
    scratch.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut active = [0i32; N];
    let mut t = window_start;
    for &(time, delta, cat) in scratch.iter() {
        if time > t {
            let dt = time - t;
            let mut top = Category::Idle.index();
            for (i, &n) in active.iter().enumerate() {
                if n > 0 {
                    out.busy_us[i] += dt;
                    if i < top {
                        top = i;
                    }
                }
            }
            out.exclusive_us[top] += dt;
            t = time;
        }
        active[cat as usize] += delta;
    }
    out.exclusive_us[Category::Idle.index()] += window_end - t;
    out
}

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
    pub category: Category,
    /// Exclusive time (see the module docs).
    pub time_us: f64,
    /// `time_us` over the step time.
    pub share: f64,
    /// Union of this category's kernels, overlap included.
    pub busy_us: f64,
}

impl Breakdown {
    pub fn from_attribution(step_time_us: f64, a: Attribution) -> Self {
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

    pub fn share(&self, c: Category) -> f64 {
        if self.step_time_us > 0.0 {
            self.time(c) / self.step_time_us
        } else {
            0.0
        }
    }

    /// Communication that ran while compute ran too.
    pub fn comm_overlapped_us(&self) -> f64 {
        let c = Category::Communication.index();
        (self.busy_us[c] - self.exclusive_us[c]).max(0.0)
    }

    pub fn entries(&self) -> Vec<BreakdownEntry> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(s: f64, e: f64, c: Category) -> Interval {
        Interval {
            start_us: s,
            end_us: e,
            category: c,
        }
    }

    #[test]
    fn exclusive_times_sum_to_window_and_compute_hides_comm() {
        let ivs = [
            iv(0.0, 10.0, Category::Gemm),
            iv(5.0, 20.0, Category::Communication),
            iv(25.0, 30.0, Category::Norm),
        ];
        let mut s = Vec::new();
        let a = attribute(&ivs, 0.0, 40.0, &mut s);
        assert_eq!(a.exclusive_us[Category::Gemm.index()], 10.0);
        // 5..10 is hidden behind the GEMM: only 10..20 is exposed.
        assert_eq!(a.exclusive_us[Category::Communication.index()], 10.0);
        assert_eq!(a.busy_us[Category::Communication.index()], 15.0);
        assert_eq!(a.exclusive_us[Category::Norm.index()], 5.0);
        // 20..25 and 30..40 are idle.
        assert_eq!(a.exclusive_us[Category::Idle.index()], 15.0);
        assert_eq!(a.exclusive_us.iter().sum::<f64>(), 40.0);
    }

    #[test]
    fn same_stream_overlap_is_a_union_not_a_sum() {
        let ivs = [iv(0.0, 10.0, Category::Gemm), iv(8.0, 12.0, Category::Gemm)];
        let mut s = Vec::new();
        let a = attribute(&ivs, 0.0, 12.0, &mut s);
        assert_eq!(a.exclusive_us[Category::Gemm.index()], 12.0);
        assert_eq!(a.exclusive_us[Category::Idle.index()], 0.0);
    }

    #[test]
    fn intervals_are_clipped_to_the_window() {
        let ivs = [iv(-5.0, 5.0, Category::Moe), iv(8.0, 50.0, Category::Moe)];
        let mut s = Vec::new();
        let a = attribute(&ivs, 0.0, 10.0, &mut s);
        assert_eq!(a.exclusive_us[Category::Moe.index()], 7.0);
        assert_eq!(a.exclusive_us[Category::Idle.index()], 3.0);
    }
}
