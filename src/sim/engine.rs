//! The event engine: plays one decode step on every rank at once and records every kernel.
//!
//! Each rank has a compute, a communication and an auxiliary stream. Ops run in program order
//! on their stream; the auxiliary stream forks from and joins the compute stream. A collective
//! starts on a rank when that rank reaches it and ends on every rank at the latest arrival plus
//! the transfer time, so a rank that arrives early shows a long collective kernel, as in a real
//! profile. Per-kernel jitter and per-rank speed skew come from a seeded generator.
//!
//! A collective that a later [`CostFamily::Wait`] op names (`Op::waits_for`) runs
//! asynchronously: it starts when the rank reaches it and its communication stream is free,
//! ends as any collective does, and the compute stream goes on until the wait, which holds it
//! until that collective has ended on the rank (two-batch overlap).

use super::rules::{self, Launch};
use super::timeline::{KernelRecord, Timeline};

use crate::cost::profile::{LaunchParams, Variability};
use crate::rng::Generator;
use crate::workload::{CostFamily, Op, Stream, Workload};
use rand::Rng;

/// Everything the engine needs besides the workload and its base costs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub(crate) ranks: u32,
    /// Ranks of one tensor-parallel group (`ranks` at data parallel 1): a collective of group 0
    /// (the TP group) or smaller syncs the ranks of its TP group; a larger group (the
    /// expert-parallel all-to-all at `--dp` > 1) syncs blocks of its own size.
    pub(crate) tp: u32,
    pub(crate) cuda_graphs: bool,
    /// Piecewise CUDA graphs (vLLM's PIECEWISE mode, a batch that carries prefill): per op,
    /// whether it launches eagerly between the graph pieces (`workload::mixed::runs_eager`);
    /// each piece after an eager run costs one more graph launch. None: every op in the mode
    /// `cuda_graphs` says.
    pub(crate) eager_ops: Option<std::sync::Arc<[bool]>>,
    pub(crate) launch: LaunchParams,
    pub(crate) variability: Variability,
    pub(crate) seed: u64,
    /// GPU idle added at the end of each rank's step (profile factor `step_overhead_us`).
    pub(crate) step_overhead_us: f64,
}

/// Reusable per-rank state, so repeated simulations do not allocate.
#[derive(Debug, Default)]
pub struct Engine {
    main_free: Vec<f64>,
    aux_free: Vec<f64>,
    cpu: Vec<f64>,
    speed: Vec<f64>,
    offset: Vec<f64>,
    arrival: Vec<f64>,
    /// When each rank's communication stream is free (asynchronous collectives queue on it).
    comm_free: Vec<f64>,
    /// Per op: its slot among the asynchronous collectives (`u32::MAX`: not one).
    slot_of: Vec<u32>,
    /// Per asynchronous collective slot × rank: when it ends on that rank.
    async_end: Vec<f64>,
}

/// Ranks a collective of `group` (0: the TP group) syncs: its TP group, or blocks of its own
/// size when it spans more than one TP group.
fn sync_block(group: u32, tp: u32, ranks: usize) -> usize {
    let tp = tp.max(1);
    let g = if group == 0 { tp } else { group.max(tp) };
    (g as usize).clamp(1, ranks.max(1))
}

/// sqrt(3): a uniform draw on [-a, a] has standard deviation a / sqrt(3).
const SQRT3: f64 = 1.732_050_807_568_877_2;

impl Engine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates one step into `out` (cleared first).
    pub fn run(&mut self, w: &Workload, base_us: &[f64], cfg: &EngineConfig, out: &mut Timeline) {
        let ranks = cfg.ranks.max(1) as usize;
        let mut rng = crate::rng::seeded(cfg.seed);
        let kernel_amp = cfg.variability.kernel_cv * SQRT3;
        let coll_amp = cfg.variability.collective_cv * SQRT3;
        // In graph mode the CPU issues one launch; eagerly it issues every kernel in turn.
        let l = Launch::of(&cfg.launch, cfg.cuda_graphs, cfg.step_overhead_us);
        let eager = Launch::of(&cfg.launch, false, cfg.step_overhead_us);
        self.start_ranks(ranks, cfg, &l, &mut rng);
        let slots = self.async_slots(w, ranks);
        let mut first_collective = l.graphs;
        let pieces = cfg.eager_ops.as_deref().filter(|_| cfg.cuda_graphs);
        let mut in_eager_run = false;
        out.clear(ranks);
        out.records.reserve(w.ops.len() * ranks);

        for (i, op) in w.ops.iter().enumerate() {
            let base = base_us[i];
            let (launch, gap) = match pieces {
                Some(mask) if !op.family.is_sync() => {
                    let eager_op = mask.get(i).copied().unwrap_or(false);
                    self.piece(eager_op, &mut in_eager_run, (&l, &eager))
                }
                _ => (l.launch, l.gap),
            };
            match op.family {
                CostFamily::Fork => {
                    for r in 0..ranks {
                        self.aux_free[r] = rules::fork(self.aux_free[r], self.main_free[r]);
                    }
                }
                CostFamily::Join => {
                    for r in 0..ranks {
                        self.main_free[r] = rules::join(self.main_free[r], self.aux_free[r]);
                    }
                }
                CostFamily::Wait => self.wait(op, ranks),
                f if f.is_collective() => {
                    let extra = rules::first_collective_stall(&mut first_collective, &l);
                    self.arrive(ranks, (launch, gap, extra), slots > 0);
                    let transfer = base * (1.0 + coll_amp * (2.0 * rng.random::<f64>() - 1.0));
                    let block = sync_block(op.group, cfg.tp, ranks);
                    self.release((i, transfer, block), ranks, out);
                }
                _ => {
                    let at = (i, base, launch, gap, kernel_amp);
                    self.kernel(op, at, ranks, &mut rng, out);
                }
            }
        }
        self.finish(ranks, cfg.step_overhead_us, out);
    }

    /// Each rank's speed and launch offset drawn (in that order: the seed's first draws), and
    /// its streams and CPU at the step's start.
    fn start_ranks(&mut self, ranks: usize, cfg: &EngineConfig, l: &Launch, rng: &mut Generator) {
        let skew_amp = cfg.variability.rank_skew_cv * SQRT3;
        self.speed.clear();
        for _ in 0..ranks {
            self.speed
                .push(1.0 + skew_amp * (2.0 * rng.random::<f64>() - 1.0));
        }
        self.offset.clear();
        for _ in 0..ranks {
            self.offset
                .push(cfg.variability.launch_skew_us * rng.random::<f64>());
        }
        for v in [&mut self.main_free, &mut self.aux_free, &mut self.cpu] {
            v.clear();
            for r in 0..ranks {
                v.push(l.start + self.offset[r]);
            }
        }
        self.arrival.clear();
        self.arrival.resize(ranks, 0.0);
    }

    /// The collectives a wait names run asynchronously (two-batch overlap): one slot each, and
    /// each rank's communication stream free. Returns the slots.
    fn async_slots(&mut self, w: &Workload, ranks: usize) -> u32 {
        self.slot_of.clear();
        self.slot_of.resize(w.ops.len(), u32::MAX);
        let mut slots = 0u32;
        for op in &w.ops {
            if let Some(t) = op.waits_for.filter(|_| op.family == CostFamily::Wait) {
                if let Some(s) = self.slot_of.get_mut(t as usize) {
                    if *s == u32::MAX && w.ops[t as usize].family.is_collective() {
                        *s = slots;
                        slots += 1;
                    }
                }
            }
        }
        self.async_end.clear();
        self.async_end.resize(slots as usize * ranks, 0.0);
        self.comm_free.clear();
        self.comm_free.resize(ranks, 0.0);
        slots
    }

    /// Piecewise CUDA graphs: the launch cost and gap of an op that launches eagerly between
    /// the pieces (`eager_op`) or in a graph piece; the first op of a piece after an eager run
    /// costs every CPU one more graph launch.
    fn piece(
        &mut self,
        eager_op: bool,
        in_eager_run: &mut bool,
        (l, eager): (&Launch, &Launch),
    ) -> (f64, f64) {
        if eager_op {
            *in_eager_run = true;
            return (eager.launch, eager.gap);
        }
        if *in_eager_run {
            // The next graph piece: one more graph launch on the CPU.
            for c in self.cpu.iter_mut() {
                *c += l.start;
            }
            *in_eager_run = false;
        }
        (0.0, l.gap)
    }

    /// A wait: each rank's compute stream goes on when the asynchronous collective it names
    /// has ended there.
    fn wait(&mut self, op: &Op, ranks: usize) {
        let slot = op
            .waits_for
            .and_then(|t| self.slot_of.get(t as usize).copied())
            .filter(|&s| s != u32::MAX);
        if let Some(slot) = slot {
            let ends = &self.async_end[slot as usize * ranks..][..ranks];
            for (m, &e) in self.main_free.iter_mut().zip(ends) {
                *m = rules::await_transfer(*m, e);
            }
        }
    }

    /// Each rank arrives at a collective (`launch`, `gap`, the first-collective `stall`):
    /// launched by its CPU, ready on its compute stream, queued on its communication stream
    /// behind an asynchronous transfer still in flight (`queued`: some collective is one).
    fn arrive(&mut self, ranks: usize, (launch, gap, stall): (f64, f64, f64), queued: bool) {
        for r in 0..ranks {
            self.cpu[r] += launch;
            let mut a = rules::arrive(self.main_free[r], self.cpu[r], gap, stall);
            if queued {
                // One communication stream per rank: a collective queues behind an
                // asynchronous transfer still in flight (blocking ones too).
                a = rules::queue(a, self.comm_free[r]);
            }
            self.arrival[r] = a;
        }
    }

    /// Collective op `i` of `transfer` µs on blocks of `block` ranks: each block starts it at
    /// its last arrival and releases its ranks at the end; every rank's kernel recorded.
    fn release(
        &mut self,
        (i, transfer, block): (usize, f64, usize),
        ranks: usize,
        out: &mut Timeline,
    ) {
        let slot = self.slot_of[i];
        let asynchronous = slot != u32::MAX;
        for g in (0..ranks).step_by(block) {
            let hi = (g + block).min(ranks);
            let last = rules::last_arrival(&self.arrival[g..hi]);
            let end = rules::collective_end(last, transfer);
            for r in g..hi {
                out.records.push(KernelRecord {
                    op: i as u32,
                    rank: r as u16,
                    stream: Stream::Comm,
                    start_us: self.arrival[r],
                    end_us: end,
                    wait_us: rules::straggler_wait(self.arrival[r], last),
                });
                // Asynchronous: the compute stream goes on; a wait op joins it later.
                let pending = asynchronous.then(|| &mut self.async_end[slot as usize * ranks + r]);
                let (main, comm) = (&mut self.main_free[r], &mut self.comm_free[r]);
                rules::release(end, main, comm, pending);
            }
        }
    }

    /// Kernel op `i` (`base` µs; `launch`, `gap`; `kernel_amp`: its jitter's half-width) on
    /// every rank: its duration drawn, started on its stream when launched, recorded.
    fn kernel(
        &mut self,
        op: &Op,
        (i, base, launch, gap, kernel_amp): (usize, f64, f64, f64, f64),
        ranks: usize,
        rng: &mut Generator,
        out: &mut Timeline,
    ) {
        let aux = op.stream == Stream::Aux;
        for r in 0..ranks {
            self.cpu[r] += launch;
            let jitter = 1.0 + kernel_amp * (2.0 * rng.random::<f64>() - 1.0);
            let dur = base * self.speed[r] * jitter * op.rank_factor(r);
            let free = if aux {
                &mut self.aux_free[r]
            } else {
                &mut self.main_free[r]
            };
            let s = rules::start(rules::ready(*free, gap), self.cpu[r]);
            *free = s + dur;
            out.records.push(KernelRecord {
                op: i as u32,
                rank: r as u16,
                stream: op.stream,
                start_us: s,
                end_us: s + dur,
                wait_us: 0.0,
            });
        }
    }

    /// Each rank's step window: it ends when every stream has, plus the profile's idle, and
    /// starts with its first kernel, as a profile shows it.
    fn finish(&self, ranks: usize, step_overhead_us: f64, out: &mut Timeline) {
        for r in 0..ranks {
            out.rank_end_us[r] = self.main_free[r]
                .max(self.aux_free[r])
                .max(self.comm_free[r])
                + step_overhead_us;
        }
        for rec in out.records.iter().take(ranks * 2) {
            let r = rec.rank as usize;
            if out.rank_start_us[r].is_nan() || rec.start_us < out.rank_start_us[r] {
                out.rank_start_us[r] = rec.start_us;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Category;
    use crate::workload::builder::Builder;
    use crate::workload::routing::RoutingSample;
    use crate::workload::Shape;

    /// Four kernels: a graph piece, two attention kernels, a graph piece.
    fn four_ops() -> Workload {
        let mut b = Builder::new();
        for (name, cat) in [
            ("a", Category::Gemm),
            ("attn1", Category::Attention),
            ("attn2", Category::Attention),
            ("d", Category::Gemm),
        ] {
            let shape = Shape::default();
            let role = crate::workload::OpRole::OProj;
            b.push(
                role,
                name,
                "",
                CostFamily::Elementwise,
                cat,
                shape,
                "-",
                0.0,
                0.0,
            );
        }
        Workload {
            ops: b.ops,
            experts_touched: Vec::new(),
            routing: RoutingSample {
                experts_touched: Vec::new(),
                expert_tokens: Vec::new(),
            },
        }
    }

    fn config(eager: Option<Vec<bool>>) -> EngineConfig {
        EngineConfig {
            ranks: 1,
            tp: 1,
            cuda_graphs: true,
            eager_ops: eager.map(Into::into),
            launch: LaunchParams {
                graph_launch_us: 10.0,
                graph_kernel_gap_us: 1.0,
                eager_launch_us: 5.0,
                eager_kernel_gap_us: 2.0,
                graph_first_collective_us: 0.0,
                source: String::new(),
            },
            variability: Variability {
                kernel_cv: 0.0,
                rank_skew_cv: 0.0,
                collective_cv: 0.0,
                launch_skew_us: 0.0,
                source: String::new(),
            },
            seed: 0,
            step_overhead_us: 0.0,
        }
    }

    fn spans(w: &Workload, base: &[f64], cfg: &EngineConfig) -> Vec<(f64, f64)> {
        let mut tl = Timeline::default();
        Engine::new().run(w, base, cfg, &mut tl);
        tl.records.iter().map(|r| (r.start_us, r.end_us)).collect()
    }

    #[test]
    fn piecewise_graphs_launch_attention_eagerly_by_hand() {
        let w = four_ops();
        let eager = Some(vec![false, true, true, false]);
        // GPU-bound: a 20 µs piece hides the CPU's launches. Full graph: graph launch 10, then
        // every kernel 1 µs after the last.
        let base = [20.0, 3.0, 3.0, 20.0];
        assert_eq!(
            spans(&w, &base, &config(None)),
            vec![(11.0, 31.0), (32.0, 35.0), (36.0, 39.0), (40.0, 60.0)]
        );
        // Piecewise: the attention kernels 2 µs apart (eager gap), the second piece 1 µs.
        assert_eq!(
            spans(&w, &base, &config(eager.clone())),
            vec![(11.0, 31.0), (33.0, 36.0), (38.0, 41.0), (42.0, 62.0)]
        );
        // CPU-bound: a 1 µs first piece. The CPU issues the graph (10), two eager launches (15,
        // 20) and the second piece's graph launch (30): each kernel waits for its launch.
        let base = [1.0, 3.0, 3.0, 20.0];
        assert_eq!(
            spans(&w, &base, &config(eager)),
            vec![(11.0, 12.0), (15.0, 18.0), (20.0, 23.0), (30.0, 50.0)]
        );
    }
}
