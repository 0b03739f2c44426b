//! The one accounting rule both halves use (simulated timelines and measured traces), so that
//! a predicted and a measured breakdown mean exactly the same thing.
//!
//! Within a step window every instant is given to exactly one category. When kernels overlap
//! (auxiliary streams, same-stream overlap on Blackwell, communication hidden behind compute)
//! the instant goes to the active category that comes first in [`Category::ALL`]; when nothing
//! runs it is [`Category::Idle`]. So the exclusive times sum to the step time, communication
//! time is *exposed* communication, and nothing is counted twice (summed kernel durations are
//! not wall time). The plain union per category is kept too (`busy_us`), so overlapped time
//! stays visible.

use crate::category::Category;

const N: usize = Category::COUNT;

/// One kernel (or other GPU activity) as the accounting sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Interval {
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    pub(crate) category: Category,
}

/// Exclusive and union time per category inside `[window_start, window_end)`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Attribution {
    pub(crate) exclusive_us: [f64; N],
    pub(crate) busy_us: [f64; N],
}

/// Sweep-line attribution of `intervals` over a window. `scratch` is reused between calls so the
/// simulator's hot path does not allocate.
pub(crate) fn attribute(
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
    // Ends sort before starts at the same instant, so touching kernels do not overlap. A rank's
    // kernels come in program order, so the events are nearly sorted already: the stable sort
    // merges their runs in about linear time where the unstable one sorts from scratch (the
    // result is the same: events that compare equal change nothing between them).
    scratch.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
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
