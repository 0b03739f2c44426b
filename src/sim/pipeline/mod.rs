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
//!
//! The schedule itself, shared with the fast path, is `schedule`'s.

use super::simulate::finish;
use super::{engine_config, Engine, KernelRecord, Simulation, Timeline};
use crate::category::Category;
use crate::cost::{self, CalibrationProfile, CollectiveChoice, Pricing};
use crate::error::Result;
use crate::scenario::network::LinkClass;
use crate::scenario::Scenario;
use crate::workload::routing::RoutingSample;
use crate::workload::stage::{self, Stage};
use crate::workload::{CostFamily, Op, Shape, Stream, Workload};

mod schedule;

pub use schedule::{schedule, schedule_step_lanes, schedule_windows, Event, Times, Windows};

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

    // The schedule, cycle after cycle; the last full cycle is recorded.
    let span: Vec<f64> = runs
        .iter()
        .flat_map(|row| row.iter().map(|r| r.span))
        .collect();
    let send_us: Vec<f64> = sends
        .iter()
        .flat_map(|row| row.iter().map(|x| x.1))
        .collect();
    let times = Times {
        size: &size,
        sizes: sizes.len(),
        span: &span,
        send: &send_us,
        ret: token_return_us(s),
    };
    let mut events = Vec::new();
    let window = schedule(&times, &mut |e| events.push(e));

    let combined = Combined::of(&runs, &sends);
    let timeline = combined.timeline(&runs, &events, &window, s.layout.tp as usize);
    let Combined {
        ops,
        base_us,
        split_us,
        ..
    } = combined;
    let pricing = combine_pricing(&runs, &sends, &micro, &sizes, base_us, split_us, s);
    let (experts_touched, routing) = joined_routing(&stages, &runs);
    let workload = Workload {
        ops,
        experts_touched,
        routing,
    };
    finish(scenario, profile, workload, pricing, timeline)
}

/// The combined workload of a pipeline step: every (stage, size) run's ops, then the sends,
/// with their prices, and where each run's and send's ops start in it.
struct Combined {
    ops: Vec<Op>,
    base_us: Vec<f64>,
    split_us: Vec<f64>,
    /// `run_base[stage][size]`: the run's first op.
    run_base: Vec<Vec<u32>>,
    /// `send_index[stage][size]`: the send from that stage.
    send_index: Vec<Vec<u32>>,
}

impl Combined {
    fn of(runs: &[Vec<Run>], sends: &[Vec<(Op, f64, f64)>]) -> Self {
        let sizes = runs.first().map_or(0, |row| row.len());
        let mut c = Combined {
            ops: Vec::new(),
            base_us: Vec::new(),
            split_us: Vec::new(),
            run_base: vec![vec![0u32; sizes]; runs.len()],
            send_index: vec![vec![0u32; sizes]; sends.len()],
        };
        for (st, row) in runs.iter().enumerate() {
            for (k, r) in row.iter().enumerate() {
                c.run_base[st][k] = c.ops.len() as u32;
                c.ops.extend(r.workload.ops.iter().cloned());
                c.base_us.extend_from_slice(&r.pricing.base_us);
                c.split_us.extend_from_slice(&r.pricing.split_us);
            }
        }
        for (st, row) in sends.iter().enumerate() {
            for (k, (op, us, lat)) in row.iter().enumerate() {
                c.send_index[st][k] = c.ops.len() as u32;
                c.ops.push(op.clone());
                c.base_us.push(*us);
                c.split_us.push(*lat);
            }
        }
        c
    }

    /// The timeline of the recorded cycle (`events`, `window`) on tp × stages ranks, its first
    /// window starting at 0: each run's records moved to where the schedule placed it, each
    /// send on both its stages' ranks.
    fn timeline(
        &self,
        runs: &[Vec<Run>],
        events: &[Event],
        window: &Windows,
        tp: usize,
    ) -> Timeline {
        let n_stages = runs.len();
        let zero = window.start.iter().copied().fold(f64::INFINITY, f64::min);
        let mut timeline = Timeline::default();
        timeline.clear(tp * n_stages);
        for e in events {
            match *e {
                Event::Run { stage, size, at } => {
                    let r = &runs[stage][size];
                    let shift = at - r.origin - zero;
                    for rec in &r.timeline.records {
                        timeline.records.push(KernelRecord {
                            op: self.run_base[stage][size] + rec.op,
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
                    let op = self.send_index[from][size];
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
        timeline
    }
}

/// The step's routing: each stage draws the routing of its own layers only, so the step's is
/// theirs joined (each layer's draws are its own stream's, as in the unsplit step).
fn joined_routing(stages: &[Stage], runs: &[Vec<Run>]) -> (Vec<u32>, RoutingSample) {
    let mut experts_touched = runs[0][0].workload.experts_touched.clone();
    let mut routing = runs[0][0].workload.routing.clone();
    for (st, run) in stages.iter().zip(runs).skip(1) {
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
    (experts_touched, routing)
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
                across_nodes: link == LinkClass::Net,
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
