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
// The running categories are the bits of a u32.
const _: () = assert!(N <= 32);

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

/// Long because: the sweep closure owns the running-category state that both event orders
/// (merged lanes, sorted events) feed; split, that state would be threaded through calls on the
/// simulator's hot path.
///
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
    // Events sweep in time order; ends sort before starts at the same instant, so touching
    // kernels do not overlap. The order of events that compare equal changes nothing (only the
    // first event of an instant adds time, with the state before that instant).
    let key = |a: &(f64, i32, u8), b: &(f64, i32, u8)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    let clip = |iv: &Interval| {
        let s = iv.start_us.max(window_start);
        let e = iv.end_us.min(window_end);
        (e > s && iv.category != Category::Idle).then_some((s, e))
    };
    let mut active = [0i32; N];
    // Bit i: category i has a kernel running (most instants have one or two of the N).
    let mut running = 0u32;
    let mut t = window_start;
    let mut sweep = |(time, delta, cat): (f64, i32, u8)| {
        if time > t {
            let dt = time - t;
            // The first running category in `Category::ALL`, else idle (trailing_zeros of
            // none is 32).
            let top = (running.trailing_zeros() as usize).min(Category::Idle.index());
            let mut bits = running;
            while bits != 0 {
                out.busy_us[bits.trailing_zeros() as usize] += dt;
                bits &= bits - 1;
            }
            out.exclusive_us[top] += dt;
            t = time;
        }
        let c = cat as usize;
        active[c] += delta;
        running = (running & !(1 << c)) | (u32::from(active[c] > 0) << c);
    };
    scratch.clear();
    match lanes(intervals, &clip) {
        // A rank's kernels come in program order on a few streams, each kernel after the
        // previous one of its stream: the intervals fall into a few lanes whose events are
        // already in order, and merging them replaces sorting every event (the per-rank
        // breakdowns of a 144-rank step sort 144 × ~4,000 events otherwise).
        Some(counts) => {
            let mut next = [0usize; MAX_LANES];
            let mut stop = [0usize; MAX_LANES];
            let mut at = 0;
            for l in 0..MAX_LANES {
                next[l] = at;
                at += 2 * counts[l];
                stop[l] = at;
            }
            scratch.resize(at, (0.0, 0, 0));
            let mut fill = next;
            let mut lane_end = [f64::NEG_INFINITY; MAX_LANES];
            for iv in intervals {
                let Some((s, e)) = clip(iv) else { continue };
                let l = lane_end.iter().position(|&le| s >= le).expect("counted");
                lane_end[l] = e;
                let c = iv.category.index() as u8;
                scratch[fill[l]] = (s, 1, c);
                scratch[fill[l] + 1] = (e, -1, c);
                fill[l] += 2;
            }
            loop {
                let mut best: Option<usize> = None;
                for l in 0..MAX_LANES {
                    if next[l] < stop[l]
                        && best.is_none_or(|b| key(&scratch[next[l]], &scratch[next[b]]).is_lt())
                    {
                        best = Some(l);
                    }
                }
                let Some(b) = best else { break };
                sweep(scratch[next[b]]);
                next[b] += 1;
            }
        }
        None => {
            for iv in intervals {
                if let Some((s, e)) = clip(iv) {
                    let c = iv.category.index() as u8;
                    scratch.push((s, 1, c));
                    scratch.push((e, -1, c));
                }
            }
            scratch.sort_unstable_by(key);
            for &ev in scratch.iter() {
                sweep(ev);
            }
        }
    }
    out.exclusive_us[Category::Idle.index()] += window_end - t;
    out
}

/// Most lanes tried before sorting instead (compute, communication and auxiliary streams, and
/// one spare).
const MAX_LANES: usize = 4;

/// Kept intervals per lane when each, in the given order, starts at or after the end of the
/// previous one in the first lane where it does (so every lane's events are in time order);
/// None when more than [`MAX_LANES`] lanes would be needed.
fn lanes(
    intervals: &[Interval],
    clip: &impl Fn(&Interval) -> Option<(f64, f64)>,
) -> Option<[usize; MAX_LANES]> {
    let mut counts = [0usize; MAX_LANES];
    let mut lane_end = [f64::NEG_INFINITY; MAX_LANES];
    for iv in intervals {
        let Some((s, e)) = clip(iv) else { continue };
        let l = lane_end.iter().position(|&le| s >= le)?;
        lane_end[l] = e;
        counts[l] += 1;
    }
    Some(counts)
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

    /// The sweep over every event sorted (the rule, without the lanes).
    fn by_sort(ivs: &[Interval], ws: f64, we: f64) -> Attribution {
        let mut out = Attribution::default();
        let mut ev: Vec<(f64, i32, usize)> = Vec::new();
        for iv in ivs {
            let (s, e) = (iv.start_us.max(ws), iv.end_us.min(we));
            if e > s && iv.category != Category::Idle {
                ev.push((s, 1, iv.category.index()));
                ev.push((e, -1, iv.category.index()));
            }
        }
        ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut active, mut t) = ([0i32; N], ws);
        for (time, delta, cat) in ev {
            if time > t {
                let on: Vec<usize> = (0..N).filter(|&i| active[i] > 0).collect();
                on.iter().for_each(|&i| out.busy_us[i] += time - t);
                out.exclusive_us[on.first().copied().unwrap_or(Category::Idle.index())] += time - t;
                t = time;
            }
            active[cat] += delta;
        }
        out.exclusive_us[Category::Idle.index()] += we - t;
        out
    }

    #[test]
    fn merged_lanes_attribute_as_the_sorted_sweep_does() {
        use rand::Rng;
        let mut rng = crate::rng::seeded(9);
        for streams in [1usize, 3, 4, 7] {
            // Kernels in program order on `streams` streams (7: more than the lanes, so the
            // sort takes over), gaps and touching ends, some outside the window.
            let mut free = vec![0.0f64; streams];
            let mut ivs = Vec::new();
            for _ in 0..2_000 {
                let k = rng.random_range(0..streams);
                let gap = if rng.random::<f64>() < 0.3 {
                    0.0
                } else {
                    rng.random::<f64>()
                };
                let s = free[k] + gap;
                let e = s + (rng.random::<f64>() * 5.0).round() / 4.0;
                free[k] = e;
                let c = Category::ALL[rng.random_range(0..Category::ALL.len())];
                ivs.push(iv(s, e, c));
            }
            for (ws, we) in [(0.0, 1e9), (10.0, 900.0)] {
                let want = by_sort(&ivs, ws, we);
                let got = attribute(&ivs, ws, we, &mut Vec::new());
                assert_eq!(got, want, "{streams} streams, window {ws}..{we}");
            }
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
