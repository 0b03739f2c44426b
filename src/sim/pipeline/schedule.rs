//! The micro-batch schedule of a pipeline (each stage busy with one micro-batch at a time, a
//! micro-batch's stages in order, a send when the sender is done and the receiver free),
//! played cycle after cycle until it repeats: the one composition of stage times and sends,
//! which `simulate` plays over the engine's stage spans (`schedule`, with its events) and the
//! fast path over its own (`schedule_windows`, `schedule_step_lanes`).

use crate::sim::rules::later;

/// One event of the recorded cycle: a stage run placed at `at`, or a send.
pub enum Event {
    Run {
        stage: usize,
        size: usize,
        at: f64,
    },
    Send {
        from: usize,
        size: usize,
        /// When the sender was done and when the receiver was free.
        sender_ready: f64,
        receiver_ready: f64,
        start: f64,
        end: f64,
    },
}

/// What the schedule is played from: every (stage, micro-batch size)'s time and every send's.
pub struct Times<'a> {
    /// Micro-batch j's size, as an index into the distinct sizes.
    pub size: &'a [usize],
    /// Distinct micro-batch sizes.
    pub sizes: usize,
    /// Stage `st`'s time (µs) for size `k` at `st * sizes + k`.
    pub span: &'a [f64],
    /// The send from stage `st` to `st + 1` for size `k` at `st * sizes + k`.
    pub send: &'a [f64],
    /// The sampled tokens' return to stage 0 ([`token_return_us`]).
    pub ret: f64,
}

/// Each stage's window in the recorded cycle: its start (stage 0: its first run; the others:
/// when they are free for their first receive) and the same a cycle later.
pub struct Windows {
    pub start: Vec<f64>,
    pub next: Vec<f64>,
}

impl Windows {
    /// The time per output token: the mean over stages (hence over ranks, every stage having
    /// tp of them) of a window, as `Timeline::step_time_us` reads the recorded cycle.
    pub fn step_time_us(&self) -> f64 {
        let n = self.start.len().max(1) as f64;
        self.next
            .iter()
            .zip(&self.start)
            .map(|(b, a)| b - a)
            .sum::<f64>()
            / n
    }
}

/// The micro-batch schedule of the module text (each stage busy with one micro-batch at a time,
/// a micro-batch's stages in order, a send when the sender is done and the receiver free),
/// played cycle after cycle until it repeats; `event` sees every run and send of the last full
/// cycle. The one composition of stage times and sends: `simulate` plays it over the engine's
/// stage spans, the fast path (`sim::fast`) over its own ([`schedule_windows`]).
pub fn schedule(t: &Times<'_>, event: &mut dyn FnMut(Event)) -> Windows {
    let n_stages = t.span.len() / t.sizes.max(1);
    let cycles = 4 * n_stages + 8;
    let last = cycles - 1;
    let mut at = Cycles::new(t, n_stages);
    for _ in 0..last {
        at.cycle(t, None, None, false);
    }
    at.last_two(t, Some(event))
}

/// The windows of [`schedule`] without its events, stopping as soon as a cycle repeats the
/// one before it up to a shift in time (every stage free and every micro-batch ready the same
/// time after stage 0 is free, to 1e-12 of the clock): the schedule is shift-invariant, so
/// every later cycle repeats it too, and the recorded cycle's windows are those of the next
/// one, moved by a whole number of periods. A pipeline reaches that within a few cycles where
/// `schedule` plays 4 per stage; the step time agrees to rounding (a sweep's pipeline rows).
pub fn schedule_windows(t: &Times<'_>) -> Windows {
    let n_stages = t.span.len() / t.sizes.max(1);
    let last = 4 * n_stages + 7;
    let mut at = Cycles::new(t, n_stages);
    let (mut rel, mut prev) = (Vec::new(), Vec::new());
    for c in 0..last {
        at.cycle_plain(t);
        let origin = at.free[0];
        rel.clear();
        rel.extend(at.free[1..].iter().chain(&at.ready0).map(|x| x - origin));
        let tol = 1e-12 * origin.abs().max(1.0);
        if c > 0
            && rel
                .iter()
                .zip(&prev)
                .all(|(a, b): (&f64, &f64)| (a - b).abs() <= tol)
        {
            break;
        }
        std::mem::swap(&mut rel, &mut prev);
    }
    at.last_two(t, None)
}

/// [`schedule_windows`]' step time at `W` sets of stage times side by side (a sweep's contexts
/// of one batch: the sends and micro-batch sizes are the same, `span[st * sizes + k]` holds
/// each lane's time of stage `st` at size `k`). Each lane plays the same operations in the same
/// order as [`schedule_windows`] over its own spans, and stops where that does (a lane that
/// has repeated its cycle is held while the others play on), so its step time is the same,
/// bit for bit; the lanes' arithmetic runs side by side.
pub fn schedule_step_lanes<const W: usize>(
    size: &[usize],
    sizes: usize,
    span: &[[f64; W]],
    send: &[f64],
    ret: f64,
) -> [f64; W] {
    // With AVX2, four lanes to an instruction instead of two; the same IEEE operations (max,
    // add, select), so the same bits.
    #[cfg(target_arch = "x86_64")]
    if W > 1 && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { schedule_step_avx2(size, sizes, span, send, ret) };
    }
    schedule_step_any(size, sizes, span, send, ret)
}

/// [`schedule_step_lanes`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn schedule_step_avx2<const W: usize>(
    size: &[usize],
    sizes: usize,
    span: &[[f64; W]],
    send: &[f64],
    ret: f64,
) -> [f64; W] {
    schedule_step_any(size, sizes, span, send, ret)
}

#[inline(always)]
fn schedule_step_any<const W: usize>(
    size: &[usize],
    sizes: usize,
    span: &[[f64; W]],
    send: &[f64],
    ret: f64,
) -> [f64; W] {
    let n_stages = span.len() / sizes.max(1);
    let last = 4 * n_stages + 7;
    let mut at = LaneCycles {
        free: vec![[0.0f64; W]; n_stages],
        ready0: vec![[0.0f64; W]; size.len()],
        hops: hops_of(sizes, n_stages, span, send),
    };
    let mut prev = vec![[0.0; W]; n_stages - 1 + size.len()];
    // A lane that has repeated its cycle is saved as it was then (`held`, its column of
    // `saved`) while the others play on: the lanes play every cycle alike, with no per-lane
    // test in the cycle itself.
    let mut held = [false; W];
    let mut saved = (at.free.clone(), at.ready0.clone());
    for c in 0..last {
        at.cycle(size, span, ret);
        let same = at.repeats(&mut prev, c > 0);
        if !at.hold(&mut held, same, &mut saved) {
            break;
        }
    }
    at.restore(&held, &saved);
    // The recorded cycle (its windows' starts) and the next one's first micro-batch (their
    // ends), as `Cycles::last_two` plays them.
    let mut start = vec![[0.0; W]; n_stages];
    let mut next = vec![[0.0; W]; n_stages];
    at.window_cycle(size, span, ret, &mut start, false);
    at.window_cycle(size, span, ret, &mut next, true);
    let n = n_stages.max(1) as f64;
    std::array::from_fn(|l| {
        next.iter()
            .zip(&start)
            .map(|(b, a)| b[l] - a[l])
            .sum::<f64>()
            / n
    })
}

/// Per size k, the stages' times from stage 1 on and the sends (`(stage, send from the one
/// before)` at `k * (n_stages - 1) + st - 1`), so that a micro-batch walks one slice.
#[inline(always)]
fn hops_of<const W: usize>(
    sizes: usize,
    n_stages: usize,
    span: &[[f64; W]],
    send: &[f64],
) -> Vec<([f64; W], f64)> {
    (0..sizes)
        .flat_map(|k| {
            (1..n_stages).map(move |st| (span[st * sizes + k], send[(st - 1) * sizes + k]))
        })
        .collect()
}

/// [`Cycles`] on `W` lanes side by side: when each stage is free and each micro-batch is back
/// at stage 0, per lane, and the hops a micro-batch of each size walks (`hops_of`).
struct LaneCycles<const W: usize> {
    free: Vec<[f64; W]>,
    ready0: Vec<[f64; W]>,
    hops: Vec<([f64; W], f64)>,
}

impl<const W: usize> LaneCycles<W> {
    /// One cycle on every lane: [`Cycles::cycle_plain`]'s arithmetic, lane by lane.
    #[inline(always)]
    fn cycle(&mut self, size: &[usize], span: &[[f64; W]], ret: f64) {
        let (free, ready0) = (&mut self.free, &mut self.ready0);
        let n_stages = free.len();
        for (j, &k) in size.iter().enumerate() {
            let mut end = [0.0f64; W];
            for l in 0..W {
                end[l] = later(free[0][l], ready0[j][l]) + span[k][l];
            }
            let walk = &self.hops[k * (n_stages - 1)..(k + 1) * (n_stages - 1)];
            for (st, (next, d)) in walk.iter().enumerate() {
                // Whole lanes as values: the stores to `free[st]` then alias no later load.
                let receiver: [f64; W] = free[st + 1];
                let stop: [f64; W] = std::array::from_fn(|l| later(end[l], receiver[l]) + d);
                free[st] = stop;
                end = std::array::from_fn(|l| stop[l] + next[l]);
            }
            free[n_stages - 1] = end;
            for l in 0..W {
                ready0[j][l] = end[l] + ret;
            }
        }
    }

    /// Per lane, whether every stage and micro-batch is where it was a cycle before
    /// (`prev`, then set to this cycle's) relative to stage 0, the lanes side by side; never
    /// on the first cycle (`after_first` false).
    #[inline(always)]
    fn repeats(&self, prev: &mut [[f64; W]], after_first: bool) -> [bool; W] {
        let origin: [f64; W] = self.free[0];
        let tol: [f64; W] = std::array::from_fn(|l| 1e-12 * origin[l].abs().max(1.0));
        let mut same = [after_first; W];
        for (p, x) in prev
            .iter_mut()
            .zip(self.free[1..].iter().chain(&self.ready0))
        {
            let rel: [f64; W] = std::array::from_fn(|l| x[l] - origin[l]);
            for l in 0..W {
                same[l] &= (rel[l] - p[l]).abs() <= tol[l];
            }
            *p = rel;
        }
        same
    }

    /// Holds the lanes that have just repeated (`same`), saving their column of the state in
    /// `saved`; returns whether any lane still plays.
    #[inline(always)]
    fn hold(
        &self,
        held: &mut [bool; W],
        same: [bool; W],
        (saved_free, saved_ready0): &mut (Vec<[f64; W]>, Vec<[f64; W]>),
    ) -> bool {
        let mut playing = false;
        for l in 0..W {
            if held[l] {
                continue;
            }
            if same[l] {
                held[l] = true;
                for (to, from) in saved_free.iter_mut().zip(&self.free) {
                    to[l] = from[l];
                }
                for (to, from) in saved_ready0.iter_mut().zip(&self.ready0) {
                    to[l] = from[l];
                }
            } else {
                playing = true;
            }
        }
        playing
    }

    /// Puts the held lanes back where they repeated.
    #[inline(always)]
    fn restore(
        &mut self,
        held: &[bool; W],
        (saved_free, saved_ready0): &(Vec<[f64; W]>, Vec<[f64; W]>),
    ) {
        for l in (0..W).filter(|&l| held[l]) {
            for (x, v) in self.free.iter_mut().zip(saved_free) {
                x[l] = v[l];
            }
            for (x, v) in self.ready0.iter_mut().zip(saved_ready0) {
                x[l] = v[l];
            }
        }
    }

    /// [`Cycles::cycle`] on every lane with each stage's window (`win`) as micro-batch 0 finds
    /// it; `first`: micro-batch 0 only.
    #[inline(always)]
    fn window_cycle(
        &mut self,
        size: &[usize],
        span: &[[f64; W]],
        ret: f64,
        win: &mut [[f64; W]],
        first: bool,
    ) {
        let (free, ready0) = (&mut self.free, &mut self.ready0);
        let n_stages = free.len();
        for (j, &k) in size.iter().enumerate() {
            let at: [f64; W] = std::array::from_fn(|l| later(free[0][l], ready0[j][l]));
            if j == 0 {
                win[0] = at;
            }
            let mut end: [f64; W] = std::array::from_fn(|l| at[l] + span[k][l]);
            let walk = &self.hops[k * (n_stages - 1)..(k + 1) * (n_stages - 1)];
            for (st, (next, d)) in walk.iter().enumerate() {
                let receiver: [f64; W] = free[st + 1];
                if j == 0 {
                    win[st + 1] = receiver;
                }
                let stop: [f64; W] = std::array::from_fn(|l| later(end[l], receiver[l]) + d);
                free[st] = stop;
                end = std::array::from_fn(|l| stop[l] + next[l]);
            }
            free[n_stages - 1] = end;
            ready0[j] = std::array::from_fn(|l| end[l] + ret);
            if first {
                break;
            }
        }
    }
}

/// The schedule's state between cycles: when each stage is free and each micro-batch is back
/// at stage 0.
struct Cycles {
    free: Vec<f64>,
    ready0: Vec<f64>,
}

impl Cycles {
    fn new(t: &Times<'_>, n_stages: usize) -> Self {
        Cycles {
            free: vec![0.0; n_stages],
            ready0: vec![0.0; t.size.len()],
        }
    }

    /// The recorded cycle (its windows' starts, its events) and the first micro-batch of the
    /// next (the windows' ends).
    fn last_two(&mut self, t: &Times<'_>, event: Option<&mut (dyn FnMut(Event) + '_)>) -> Windows {
        let n_stages = self.free.len();
        let mut w = Windows {
            start: vec![0.0; n_stages],
            next: vec![0.0; n_stages],
        };
        self.cycle(t, Some(&mut w.start), event, false);
        self.cycle(t, Some(&mut w.next), None, true);
        w
    }

    /// [`Cycles::cycle`] with no window, no event, every micro-batch: the same arithmetic in
    /// the same order, without the tests (a sweep's pipeline row plays a few cycles of
    /// stages × micro-batches).
    fn cycle_plain(&mut self, t: &Times<'_>) {
        let (free, ready0) = (&mut self.free[..], &mut self.ready0[..]);
        let n_stages = free.len();
        let sizes = t.sizes;
        for (j, &k) in t.size.iter().enumerate() {
            let at = free[0].max(ready0[j]);
            let mut end = at + t.span[k];
            for st in 0..n_stages - 1 {
                let start = end.max(free[st + 1]);
                let stop = start + t.send[st * sizes + k];
                free[st] = stop;
                end = stop + t.span[(st + 1) * sizes + k];
            }
            free[n_stages - 1] = end;
            ready0[j] = end + t.ret;
        }
    }

    /// One cycle: every micro-batch through every stage. `win`: each stage's window start as
    /// micro-batch 0 finds it; `event`: every run and send; `first`: micro-batch 0 only.
    fn cycle<'e>(
        &mut self,
        t: &Times<'_>,
        mut win: Option<&mut Vec<f64>>,
        mut event: Option<&mut (dyn FnMut(Event) + 'e)>,
        first: bool,
    ) {
        let (free, ready0) = (&mut self.free, &mut self.ready0);
        let n_stages = free.len();
        for (j, &k) in t.size.iter().enumerate() {
            let mut at = free[0].max(ready0[j]);
            let mut win = if j == 0 { win.as_deref_mut() } else { None };
            if let Some(w) = win.as_deref_mut() {
                w[0] = at;
            }
            if let Some(e) = event.as_deref_mut() {
                e(Event::Run {
                    stage: 0,
                    size: k,
                    at,
                });
            }
            let mut end = at + t.span[k];
            for st in 0..n_stages - 1 {
                let receiver_ready = free[st + 1];
                if let Some(w) = win.as_deref_mut() {
                    w[st + 1] = receiver_ready;
                }
                let start = end.max(receiver_ready);
                let stop = start + t.send[st * t.sizes + k];
                if let Some(e) = event.as_deref_mut() {
                    e(Event::Send {
                        from: st,
                        size: k,
                        sender_ready: end,
                        receiver_ready,
                        start,
                        end: stop,
                    });
                }
                free[st] = stop;
                at = stop;
                if let Some(e) = event.as_deref_mut() {
                    e(Event::Run {
                        stage: st + 1,
                        size: k,
                        at,
                    });
                }
                end = at + t.span[(st + 1) * t.sizes + k];
            }
            free[n_stages - 1] = end;
            ready0[j] = end + t.ret;
            if first {
                // Micro-batch 0 has set every stage's window start of this cycle.
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// Stopping at the first repeated cycle gives the full schedule's step time, to rounding:
    /// random stage times, sends and micro-batch sizes, pipelines of 2 to 24 stages.
    #[test]
    fn schedule_windows_step_equals_the_full_schedule() {
        let mut rng = crate::rng::seeded(11);
        for _ in 0..300 {
            let n = rng.random_range(2..=24usize);
            let sizes = rng.random_range(1..=2usize);
            let micro = rng.random_range(1..=n);
            let size: Vec<usize> = (0..micro)
                .map(|j| usize::from(j == 0 && sizes == 2))
                .collect();
            let span: Vec<f64> = (0..n * sizes)
                .map(|_| rng.random_range(100.0..5000.0))
                .collect();
            let send: Vec<f64> = (0..(n - 1) * sizes)
                .map(|_| rng.random_range(0.0..300.0))
                .collect();
            let t = Times {
                size: &size,
                sizes,
                span: &span,
                send: &send,
                ret: rng.random_range(0.0..50.0),
            };
            let full = schedule(&t, &mut |_| {}).step_time_us();
            let quick = schedule_windows(&t).step_time_us();
            // Side by side with other lanes' spans (the lane itself in lane 1), the same bits.
            let lanes: Vec<[f64; 3]> = span.iter().map(|&x| [x * 0.5, x, x * 1.7]).collect();
            let side = schedule_step_lanes(&size, sizes, &lanes, &send, t.ret);
            assert_eq!(
                side[1].to_bits(),
                quick.to_bits(),
                "{n} stages, {micro} micro-batches"
            );
            assert!(
                (full - quick).abs() <= 1e-9 * full,
                "{n} stages, {micro} micro-batches: {quick} vs {full}"
            );
        }
    }
}
