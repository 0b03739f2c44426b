//! Pipeline parallelism (`--pp N`): one decode step of N stages of `tp` GPUs, composed from
//! per-stage runs of the event engine into one timeline of tp × pp ranks.
//!
//! **How vLLM V1 decodes with PP** (ASSUMPTION: from memory of vLLM's `EngineCore`
//! `step_with_batch_queue`; docs/sources.md has no entry): the engine keeps a queue of `pp` batches in
//! flight, and a request is in at most one of them, so the running sequences split into
//! `min(pp, B)` micro-batches of ⌈B/pp⌉ or ⌊B/pp⌋ sequences (batch 1: one micro-batch). Each
//! micro-batch runs stage 0, sends its intermediate tensors to stage 1, ..., and the last
//! stage samples; the sampled tokens go back through the engine core before the micro-batch is
//! scheduled again. Each stage works on one micro-batch at a time, in order.
//!
//! **What is played.** Every (stage, micro-batch size) is its own workload
//! (`workload::stage::build_stage`), priced and played on `tp` ranks by the engine as a whole
//! step is; its duration is the span of its ranks (first kernel to last end, the profile's
//! `step_overhead_us` included: each stage's worker prepares and finishes its own forward,
//! ASSUMPTION). The send from stage s to s + 1 is NCCL send/recv of each rank's 1/tp slice of
//! the intermediate tensors to the rank of the same TP index (`cost::internode::p2p` for the
//! link between them, the profile's collective factors applied); both stages' streams hold the
//! transfer, which starts when the sender is done and the receiver free (ASSUMPTION: a
//! rendezvous, as NCCL's p2p kernels are launched on both sides). The sampled tokens' return
//! holds no GPU: it adds the network's one-way latency when the last stage sits on another node
//! than stage 0 (the engine core's message over TCP, ASSUMPTION), nothing within a node (the
//! same host path a single-stage step pays inside `step_overhead_us`).
//!
//! **Steady state.** The schedule (each stage busy with one micro-batch at a time; a
//! micro-batch's stages in order) is played for enough cycles that it repeats; the last cycle
//! is the step shown. A sequence's time per token is then
//! `max(Σ stages + sends + return, Σ over micro-batches of the busiest stage's time)`, the period
//! of the cycle: with equal micro-batches, `max(sum of stage times + sends, pp × slowest
//! stage)`. Each rank's window is its stage's period (from the first event of micro-batch 0 to
//! the same event a cycle later), so `Timeline::step_time_us` is the time per output token and
//! tokens/s is B over it. Ranks are numbered stage-major (rank = stage × tp + TP index), as vLLM
//! places them; the idle of a rank's window is the pipeline's bubble, and a receive's wait shows
//! as communication wait.

use super::simulate::finish;
use super::{engine_config, Engine, KernelRecord, Simulation, Timeline};
use crate::category::Category;
use crate::cost::{self, CalibrationProfile, CollectiveChoice, Pricing};
use crate::error::Result;
use crate::scenario::network::LinkClass;
use crate::scenario::Scenario;
use crate::workload::stage::{self, Stage};
use crate::workload::{CostFamily, Op, Shape, Stream, Workload};

/// The micro-batch sizes vLLM's batch queue runs `batch` sequences in: `min(pp, batch)`
/// micro-batches, the first `batch mod n` one sequence larger.
pub fn micro_batches(batch: u32, pp: u32) -> Vec<u32> {
    let n = pp.min(batch).max(1);
    (0..n)
        .map(|j| batch / n + u32::from(j < batch % n))
        .collect()
}

/// The distinct sizes of `micro` (largest first) and each micro-batch's index among them.
pub fn micro_sizes(micro: &[u32]) -> (Vec<u32>, Vec<usize>) {
    let mut sizes: Vec<u32> = micro.to_vec();
    sizes.dedup();
    let index = micro
        .iter()
        .map(|&b| sizes.iter().position(|&x| x == b).expect("listed"))
        .collect();
    (sizes, index)
}

/// The scenario one micro-batch of `batch` sequences runs a stage with (same seed and knobs).
pub fn micro_scenario(s: &Scenario, batch: u32) -> Scenario {
    let mut m = s.clone();
    m.batch = batch;
    m
}

/// The send from stage `from` to the next for a micro-batch of `batch` sequences: the op as
/// one rank sees it and its priced time (µs) and latency part, the profile's collective
/// factors applied.
pub fn send(s: &Scenario, p: &CalibrationProfile, from: u32, batch: u32) -> (Op, f64, f64) {
    let mb = micro_scenario(s, batch);
    let tokens = mb
        .padding(1, crate::scenario::cudagraph::PadRule::Decode)
        .padded;
    let hidden = s.model.hidden as u64;
    let total = stage::intermediate_bytes(tokens, hidden);
    let tp = s.layout.tp as u64;
    let bytes = if stage::split_over_tp(tokens, hidden, s.layout.tp) {
        total / tp
    } else {
        total
    };
    let (a, b) = (from * s.layout.tp, (from + 1) * s.layout.tp);
    let senders = s.layout.tp.min(s.system.gpus_per_node);
    let price = cost::internode::p2p(&s.system, s.comm_path(), a, b, bytes, senders);
    let op = Op {
        name: format!("pp_send_recv_s{from}_to_s{}", from + 1),
        role: crate::workload::OpRole::Collective,
        kernel: "ncclDevKernel_SendRecv (pipeline send/recv)",
        layer: -1,
        family: CostFamily::SendRecv,
        category: Category::Communication,
        stream: Stream::Comm,
        shape: Shape::default(),
        weights: "-".into(),
        flops: 0.0,
        bytes: bytes as f64,
        message_bytes: bytes,
        measure: None,
        group: 2,
        rank_scale: Vec::new(),
        waits_for: None,
        fused_norm: None,
        micro_batch: None,
        draft_pass: None,
    };
    let w = Workload {
        ops: vec![op],
        experts_touched: Vec::new(),
        routing: Default::default(),
    };
    let mut pricing = Pricing {
        base_us: vec![price.time_us],
        split_us: vec![price.latency_us],
        collectives: Vec::new(),
        families: Vec::new(),
        warnings: Vec::new(),
    };
    cost::profile::apply_factors(&p.factors, &w, &mut pricing);
    let op = w.ops.into_iter().next().expect("one op");
    (op, pricing.base_us[0], pricing.split_us[0])
}

/// The return of the sampled tokens from the last stage to stage 0 (µs; see the module text).
pub fn token_return_us(s: &Scenario) -> f64 {
    let pp = s.layout.pp_size();
    let last = (pp - 1) * s.layout.tp;
    match (&s.system.network, s.system.link_between(last, 0)) {
        (Some(net), LinkClass::Net) => net.latency_us,
        _ => 0.0,
    }
}

/// One stage played for one micro-batch size.
struct Run {
    workload: Workload,
    pricing: Pricing,
    timeline: Timeline,
    /// First kernel's start on any rank (the run's origin).
    origin: f64,
    span: f64,
}

fn play(s: &Scenario, p: &CalibrationProfile, stage: &Stage, batch: u32) -> Result<Run> {
    let mb = micro_scenario(s, batch);
    let workload = stage::build_stage(&mb, stage);
    let pricing = cost::price(&workload, &mb, p)?;
    let mut timeline = Timeline::default();
    Engine::new().run(
        &workload,
        &pricing.base_us,
        &engine_config(&mb, p),
        &mut timeline,
    );
    let origin = timeline
        .rank_start_us
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let span = timeline.span_us();
    Ok(Run {
        workload,
        pricing,
        timeline,
        origin,
        span,
    })
}

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
    // Per size k, the stages' times from stage 1 on and the sends (`(stage, send from the one
    // before)` at `k * (n_stages - 1) + st - 1`), so that a micro-batch walks one slice.
    let hops: Vec<([f64; W], f64)> = (0..sizes)
        .flat_map(|k| {
            (1..n_stages).map(move |st| (span[st * sizes + k], send[(st - 1) * sizes + k]))
        })
        .collect();
    let mut free = vec![[0.0f64; W]; n_stages];
    let mut ready0 = vec![[0.0f64; W]; size.len()];
    let mut prev = vec![[0.0; W]; n_stages - 1 + size.len()];
    // A lane that has repeated its cycle is saved as it was then (`held`, its column of
    // `saved_free` and `saved_ready0`) while the others play on: the lanes play every cycle
    // alike, with no per-lane test in the cycle itself.
    let mut held = [false; W];
    let (mut saved_free, mut saved_ready0) = (free.clone(), ready0.clone());
    for c in 0..last {
        for (j, &k) in size.iter().enumerate() {
            let mut end = [0.0f64; W];
            for l in 0..W {
                end[l] = later(free[0][l], ready0[j][l]) + span[k][l];
            }
            let walk = &hops[k * (n_stages - 1)..(k + 1) * (n_stages - 1)];
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
        // Per lane, whether every stage and micro-batch is where it was a cycle before
        // relative to stage 0, the lanes side by side.
        let origin: [f64; W] = free[0];
        let tol: [f64; W] = std::array::from_fn(|l| 1e-12 * origin[l].abs().max(1.0));
        let mut same = [c > 0; W];
        for (p, x) in prev.iter_mut().zip(free[1..].iter().chain(&ready0)) {
            let rel: [f64; W] = std::array::from_fn(|l| x[l] - origin[l]);
            for l in 0..W {
                same[l] &= (rel[l] - p[l]).abs() <= tol[l];
            }
            *p = rel;
        }
        let mut playing = false;
        for l in 0..W {
            if held[l] {
                continue;
            }
            if same[l] {
                held[l] = true;
                for (to, from) in saved_free.iter_mut().zip(&free) {
                    to[l] = from[l];
                }
                for (to, from) in saved_ready0.iter_mut().zip(&ready0) {
                    to[l] = from[l];
                }
            } else {
                playing = true;
            }
        }
        if !playing {
            break;
        }
    }
    for l in (0..W).filter(|&l| held[l]) {
        for (x, v) in free.iter_mut().zip(&saved_free) {
            x[l] = v[l];
        }
        for (x, v) in ready0.iter_mut().zip(&saved_ready0) {
            x[l] = v[l];
        }
    }
    // The recorded cycle (its windows' starts) and the next one's first micro-batch (their
    // ends), as `Cycles::last_two` plays them.
    let mut start = vec![[0.0; W]; n_stages];
    let mut next = vec![[0.0; W]; n_stages];
    for (win, first) in [(&mut start, false), (&mut next, true)] {
        for (j, &k) in size.iter().enumerate() {
            let at: [f64; W] = std::array::from_fn(|l| later(free[0][l], ready0[j][l]));
            if j == 0 {
                win[0] = at;
            }
            let mut end: [f64; W] = std::array::from_fn(|l| at[l] + span[k][l]);
            let walk = &hops[k * (n_stages - 1)..(k + 1) * (n_stages - 1)];
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
    let n = n_stages.max(1) as f64;
    std::array::from_fn(|l| {
        next.iter()
            .zip(&start)
            .map(|(b, a)| b[l] - a[l])
            .sum::<f64>()
            / n
    })
}

/// `a.max(b)` for the schedule's times, none of them NaN (`f64::max`'s NaN test would keep
/// the lanes from running side by side).
#[inline(always)]
fn later(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
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

/// Plays `scenario` (with `layout.pp` above 1) as a pipeline; see the module text.
pub fn simulate(scenario: Scenario, profile: CalibrationProfile) -> Result<Simulation> {
    let s = &scenario;
    let p = &profile;
    let stages = stage::stages(s);
    let n_stages = stages.len();
    let micro = micro_batches(s.batch, s.layout.pp_size());
    let (sizes, size) = micro_sizes(&micro);
    // runs[stage][size], sends[stage][size] (stage < last)
    let mut runs: Vec<Vec<Run>> = Vec::with_capacity(n_stages);
    for st in &stages {
        let mut row = Vec::new();
        for &b in &sizes {
            row.push(play(s, p, st, b)?);
        }
        runs.push(row);
    }
    let sends: Vec<Vec<(Op, f64, f64)>> = (0..n_stages.saturating_sub(1))
        .map(|from| sizes.iter().map(|&b| send(s, p, from as u32, b)).collect())
        .collect();
    let ret = token_return_us(s);

    // The schedule, cycle after cycle; the last full cycle is recorded.
    let span: Vec<f64> = runs
        .iter()
        .flat_map(|row| row.iter().map(|r| r.span))
        .collect();
    let send_us: Vec<f64> = sends
        .iter()
        .flat_map(|row| row.iter().map(|x| x.1))
        .collect();
    let mut events = Vec::new();
    let window = schedule(
        &Times {
            size: &size,
            sizes: sizes.len(),
            span: &span,
            send: &send_us,
            ret,
        },
        &mut |e| events.push(e),
    );

    // The combined workload: every (stage, size) block, then the sends.
    let mut ops = Vec::new();
    let mut base_us = Vec::new();
    let mut split_us = Vec::new();
    let mut run_base = vec![vec![0u32; sizes.len()]; n_stages];
    for (st, row) in runs.iter().enumerate() {
        for (k, r) in row.iter().enumerate() {
            run_base[st][k] = ops.len() as u32;
            ops.extend(r.workload.ops.iter().cloned());
            base_us.extend_from_slice(&r.pricing.base_us);
            split_us.extend_from_slice(&r.pricing.split_us);
        }
    }
    let mut send_index = vec![vec![0u32; sizes.len()]; sends.len()];
    for (st, row) in sends.iter().enumerate() {
        for (k, (op, us, lat)) in row.iter().enumerate() {
            send_index[st][k] = ops.len() as u32;
            ops.push(op.clone());
            base_us.push(*us);
            split_us.push(*lat);
        }
    }

    // The timeline of the recorded cycle, its first window starting at 0.
    let zero = window.start.iter().copied().fold(f64::INFINITY, f64::min);
    let tp = s.layout.tp as usize;
    let ranks = tp * n_stages;
    let mut timeline = Timeline::default();
    timeline.clear(ranks);
    for e in &events {
        match *e {
            Event::Run { stage, size, at } => {
                let r = &runs[stage][size];
                let shift = at - r.origin - zero;
                for rec in &r.timeline.records {
                    timeline.records.push(KernelRecord {
                        op: run_base[stage][size] + rec.op,
                        rank: (stage * tp + rec.rank as usize) as u16,
                        start_us: rec.start_us + shift,
                        end_us: rec.end_us + shift,
                        ..*rec
                    });
                }
            }
            Event::Send {
                from,
                size,
                sender_ready,
                receiver_ready,
                start,
                end,
            } => {
                let op = send_index[from][size];
                for (st, ready) in [(from, sender_ready), (from + 1, receiver_ready)] {
                    for local in 0..tp {
                        timeline.records.push(KernelRecord {
                            op,
                            rank: (st * tp + local) as u16,
                            stream: Stream::Comm,
                            start_us: ready - zero,
                            end_us: end - zero,
                            wait_us: start - ready,
                        });
                    }
                }
            }
        }
    }
    for st in 0..n_stages {
        for local in 0..tp {
            timeline.rank_start_us[st * tp + local] = window.start[st] - zero;
            timeline.rank_end_us[st * tp + local] = window.next[st] - zero;
        }
    }

    let pricing = combine_pricing(&runs, &sends, &micro, &sizes, base_us, split_us, s);
    // Each stage draws the routing of its own layers only: the step's is theirs joined (each
    // layer's draws are its own stream's, as in the unsplit step).
    let mut experts_touched = runs[0][0].workload.experts_touched.clone();
    let mut routing = runs[0][0].workload.routing.clone();
    for (st, run) in stages.iter().zip(&runs).skip(1) {
        let w = &run[0].workload;
        for l in st.layers.clone() {
            if let (Some(t), Some(&x)) = (experts_touched.get_mut(l), w.experts_touched.get(l)) {
                *t = x;
            }
            if let (Some(r), Some(x)) = (
                routing.expert_tokens.get_mut(l),
                w.routing.expert_tokens.get(l),
            ) {
                r.clone_from(x);
            }
            if let (Some(r), Some(&x)) = (
                routing.experts_touched.get_mut(l),
                w.routing.experts_touched.get(l),
            ) {
                *r = x;
            }
        }
    }
    let workload = Workload {
        ops,
        experts_touched,
        routing,
    };
    finish(scenario, profile, workload, pricing, timeline)
}

/// The runs' prices joined: durations in the combined workload's order; collectives per rank
/// averaged over the stages (a stage's rank runs its collectives once per micro-batch), the
/// send/recv row added; provenance and warnings once each.
fn combine_pricing(
    runs: &[Vec<Run>],
    sends: &[Vec<(Op, f64, f64)>],
    micro: &[u32],
    sizes: &[u32],
    base_us: Vec<f64>,
    split_us: Vec<f64>,
    s: &Scenario,
) -> Pricing {
    let n_stages = runs.len() as f64;
    let per_size = |k: usize| micro.iter().filter(|&&b| b == sizes[k]).count() as f64;
    let mut rows: Vec<(CollectiveChoice, f64)> = Vec::new();
    let mut add = |c: &CollectiveChoice, times: f64| match rows
        .iter_mut()
        .find(|(x, _)| x.op == c.op && x.bytes == c.bytes && x.path == c.path)
    {
        Some((_, n)) => *n += times,
        None => rows.push((c.clone(), times)),
    };
    let mut families = Vec::new();
    let mut warnings = Vec::new();
    for row in runs {
        for (k, r) in row.iter().enumerate() {
            for c in &r.pricing.collectives {
                add(c, c.count as f64 * per_size(k));
            }
            for f in &r.pricing.families {
                if !families.contains(f) {
                    families.push(f.clone());
                }
            }
            for w in &r.pricing.warnings {
                if !warnings.contains(w) {
                    warnings.push(w.clone());
                }
            }
        }
    }
    for (from, row) in sends.iter().enumerate() {
        let link = s
            .system
            .link_between(from as u32 * s.layout.tp, (from as u32 + 1) * s.layout.tp);
        for (k, (op, us, lat)) in row.iter().enumerate() {
            let c = CollectiveChoice {
                op: CostFamily::SendRecv.key(),
                bytes: op.message_bytes,
                count: 1,
                path: link.name(),
                algo: cost::CollectiveAlgo::P2p.into(),
                proto: if op.message_bytes <= cost::internode::P2P_LL_THRESHOLD {
                    "LL".into()
                } else {
                    "Simple".into()
                },
                time_us: *us,
                source: "cost::internode::p2p (pipeline stage to stage, one rank's slice)".into(),
                latency_us: *lat,
            };
            // Sender and receiver each hold it.
            add(&c, 2.0 * per_size(k));
        }
    }
    let collectives = rows
        .into_iter()
        .map(|(mut c, n)| {
            c.count = (n / n_stages).round().max(1.0) as u32;
            c
        })
        .collect();
    Pricing {
        base_us,
        split_us,
        collectives,
        families,
        warnings,
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
