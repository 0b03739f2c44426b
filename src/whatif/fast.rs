//! The aggregate fast path: a decode step priced without the 8-rank timeline.
//!
//! With jitter off every rank plays the same kernels, so the timeline engine reduces to one
//! rank's max-plus recursion (stream free times, the CPU's launch clock, fork/join of the
//! auxiliary stream). The fast path keeps that recursion but plays each distinct layer once:
//! a run of identical layers is played until its state relative to the compute stream repeats,
//! then the remaining layers are added as whole-layer increments.
//!
//! Op shapes (FLOPs, bytes, message bytes, GEMM dimensions, table keys) are linear in a small
//! basis of the scenario's variables (tokens, sequences, context, split-KV count, experts
//! touched); the coefficients are read off the real workload builder by probing it, so the
//! builder stays the one place where shapes are written down. Costs are NOT fitted: each
//! representative op is rebuilt at the scenario's shape and priced by `cost::price`, the very
//! function the timeline uses (AIConfigurator tables, laws, collectives with their protocol
//! choice, the profile's factors). Pricing is memoised per thread, by what each op's price
//! depends on: ops that follow the tokens per (pass, batch, queries), attention per (pass,
//! batch, queries, context), collectives per (pass, batch, queries, NCCL setting, graph mode).
//! A sweep therefore prices each distinct shape once and plays the recursion for every row.
//!
//! With jitter on, the timeline's collectives also wait for the slowest rank; the fast path adds
//! that wait's expectation at every collective (the straggler section at the end of this file),
//! so that it gives the mean of the timeline over seeds (tests/fast_vs_seeds.rs).
//!
//! Experts touched per MoE layer take their closed-form expectation under the scenario's routing
//! where the timeline draws them per layer (seeded): with jitter off, the one difference. It
//! shows where the MoE table price and the DRAM floor of the touched experts' weights are close
//! (max(table, floor) of a spread-out count averages above its value at the mean: up to ~0.3%
//! low near 140 tokens), and as one seed's draws against their expectation (up to ~0.45% either
//! way on a small speculative step; tests/whatif.rs holds 200 scenarios within 0.5%).

use crate::category::Category;
use crate::cost::{self, CalibrationProfile};
use crate::error::{Error, Result};
use crate::scenario::deployment::CommKnobs;
use crate::scenario::{NcclSettings, Scenario};
use crate::workload::routing::DistinctExperts;
use crate::workload::spec_step::{PassKind, Side, SpecStep};
use crate::workload::{
    CostFamily, Op, Shape, Stream, Workload, SHARED_EXPERT_STREAM_TOKEN_THRESHOLD,
};
use nalgebra::{DMatrix, DVector};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

const NCAT: usize = Category::ALL.len();
type Busy = [f64; NCAT];

const NB: usize = 10;
type Coef = [f64; NB];

/// Basis columns that carry the context (directly or through the split-KV count).
const CONTEXT_COLS: [usize; 5] = [3, 4, 5, 7, 8];

/// The scenario variables an op's shape is linear in.
#[derive(Debug, Clone, Copy)]
struct Vars {
    tokens: f64,
    seqs: f64,
    context: f64,
    splits: f64,
    touched: f64,
    /// Rows after CUDA-graph padding (`scenario::cudagraph`; = tokens when not padded).
    padded: f64,
}

impl Vars {
    fn basis(&self) -> Coef {
        [
            1.0,
            self.tokens,
            self.seqs,
            self.tokens * self.context,
            self.seqs * self.context,
            self.tokens * self.splits,
            self.touched,
            self.context,
            self.splits,
            self.padded,
        ]
    }
}

fn dot(a: &Coef, b: &Coef) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Kernel { aux: bool },
    Collective,
    Fork,
    Join,
}

/// What an op's price depends on, hence where it is memoised.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Group {
    /// Tokens and sequences only (GEMMs, MoE, norms, ...).
    Tokens,
    /// Also the context (attention and its split-KV reduce).
    Context,
    Collective,
    /// Fork and join: no duration.
    Sync,
}

/// An op's numeric fields as coefficients on the basis.
#[derive(Debug, Clone)]
struct Fields {
    flops: Coef,
    bytes: Coef,
    message_bytes: Coef,
    shape: [Coef; 4],
    /// m, n, k, batch, context of the measurement-table key.
    measure: Option<[Coef; 5]>,
}

impl Fields {
    fn all(&self) -> impl Iterator<Item = &Coef> {
        [&self.flops, &self.bytes, &self.message_bytes]
            .into_iter()
            .chain(self.shape.iter())
            .chain(self.measure.iter().flatten())
    }
}

/// A field's nonzero coefficients (most fields read one to three basis columns): its value at
/// a basis is their products summed in column order, the same bits as the full `dot` (the terms
/// left out are +0.0, which changes no sum but the sign of a zero: a zero sum is taken from
/// `dot` itself).
#[derive(Debug, Clone, Copy)]
struct Sparse {
    n: u8,
    idx: [u8; NB],
    val: [f64; NB],
}

impl Sparse {
    fn new(c: &Coef) -> Self {
        let mut s = Sparse {
            n: 0,
            idx: [0; NB],
            val: [0.0; NB],
        };
        for (j, &v) in c.iter().enumerate() {
            if v != 0.0 {
                s.idx[s.n as usize] = j as u8;
                s.val[s.n as usize] = v;
                s.n += 1;
            }
        }
        s
    }

    /// `dot(full, x)` for `full` the coefficients this was made from (x finite, as the basis
    /// of counts always is).
    #[inline]
    fn eval(&self, full: &Coef, x: &Coef) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let mut acc = -0.0;
        for k in 0..self.n as usize {
            acc += self.val[k] * x[self.idx[k] as usize];
        }
        if acc == 0.0 {
            dot(full, x)
        } else {
            acc
        }
    }
}

#[derive(Debug, Clone)]
struct OpT {
    kind: Kind,
    group: Group,
    category: Category,
    /// The representative op (name, kernel, family, stream, weights, table key): the numeric
    /// fields are overwritten from `fields` before pricing.
    template: Op,
    fields: Fields,
    /// `fields` as nonzero coefficients: flops, bytes, message bytes, shape (4), table key (5;
    /// none without a key).
    sparse: [Sparse; 12],
}

/// `v.round().max(0.0) as u64`, bit for bit, without the libm `round` call (it runs a dozen
/// times per op priced): truncate, then add one from a fractional part of a half up. Exact for
/// v below 2^52 (the fraction is exact) and above (v is an integer; past u64 it saturates, as the
/// cast does); NaN and negatives give 0.
#[inline]
fn round_u64(v: f64) -> u64 {
    let t = v as u64;
    t.saturating_add((v - t as f64 >= 0.5) as u64)
}

impl OpT {
    fn instantiate(&self, x: &Coef) -> Op {
        let mut op = self.template.clone();
        self.instantiate_into(x, &mut op);
        op
    }

    /// Sets `op`'s numeric fields (an instance of this op's template) at basis `x`: the names
    /// and table keys it shares with the template are left as they are (no allocation).
    fn instantiate_into(&self, x: &Coef, op: &mut Op) {
        let sp = &self.sparse;
        let f = |i: usize, c: &Coef| sp[i].eval(c, x);
        let u = |i: usize, c: &Coef| round_u64(f(i, c));
        op.flops = f(0, &self.fields.flops);
        op.bytes = f(1, &self.fields.bytes);
        op.message_bytes = u(2, &self.fields.message_bytes);
        let s = &self.fields.shape;
        op.shape = Shape {
            m: u(3, &s[0]),
            n: u(4, &s[1]),
            k: u(5, &s[2]),
            batch: u(6, &s[3]),
        };
        if let (Some(mk), Some(c)) = (op.measure.as_mut(), &self.fields.measure) {
            mk.m = u(7, &c[0]);
            mk.n = u(8, &c[1]);
            mk.k = u(9, &c[2]);
            mk.batch = u(10, &c[3]);
            mk.context = u(11, &c[4]);
        }
    }

    fn sparse_of(fields: &Fields) -> [Sparse; 12] {
        let zero = [0.0; NB];
        let m = fields.measure.as_ref();
        let mut all = [&zero; 12];
        all[0] = &fields.flops;
        all[1] = &fields.bytes;
        all[2] = &fields.message_bytes;
        for i in 0..4 {
            all[3 + i] = &fields.shape[i];
        }
        for i in 0..5 {
            all[7 + i] = m.map_or(&zero, |c| &c[i]);
        }
        all.map(Sparse::new)
    }
}

/// A run of identical layers (or the ops outside the layers, repeat 1): ops[start..end].
#[derive(Debug, Clone, Copy)]
struct Segment {
    start: usize,
    end: usize,
    repeat: u32,
}

/// One regime of a pass (the op sequence is fixed within it).
#[derive(Debug, Clone)]
struct Regime {
    ops: Vec<OpT>,
    /// `ops[i].kind`, packed: the recursion walks this, not the (large) ops.
    kinds: Vec<Kind>,
    segments: Vec<Segment>,
    /// Ops priced together per group, in program order: (op, kept). An op whose price reads
    /// its successor (a table entry that includes the next kernel, attention's split-KV
    /// reduce) is followed by it, priced and dropped, as `cost::price` sees the real sequence.
    tokens_layout: Vec<(usize, bool)>,
    context_layout: Vec<(usize, bool)>,
    /// Kept ops of the context layout, and the collectives.
    context_ops: Vec<usize>,
    collective_ops: Vec<usize>,
}

/// A forward pass (or any workload shape) in closed form, for one model, system and profile.
#[derive(Debug, Clone)]
struct PassModel {
    /// Sequences of ops for T ≤ threshold (shared expert on the auxiliary stream) and above.
    low: Regime,
    high: Regime,
    threshold: f64,
    /// Expected distinct experts touched per MoE layer under the scenario's routing.
    experts: Option<DistinctExperts>,
    sms: u64,
    /// This pass's slot in the memo.
    slot: usize,
    /// The pass is a verify pass (padded to the sizes adjusted for k+1 queries), else padded
    /// like a decode step of its own token count.
    verify: bool,
    /// The scenario's capture sizes.
    sizes: std::sync::Arc<crate::scenario::cudagraph::CaptureSizes>,
}

/// Unique ids of fast scenarios and collective settings (the memo's keys).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The NCCL setting collectives are priced with (protocol, algorithm, P2P, `--allreduce` and
/// NCCL knobs), prepared once per sweep setting.
#[derive(Debug, Clone)]
pub struct Collectives {
    id: u64,
    nccl: NcclSettings,
    comm: CommKnobs,
}

impl Collectives {
    /// Takes `s`'s NCCL settings; refuses (as `simulate` would) a setting the profile cannot
    /// price.
    pub fn new(s: &Scenario, p: &CalibrationProfile) -> Result<Self> {
        if s.tp > 1 {
            let mut b = crate::workload::builder::Builder::new();
            let bytes = s.model.hidden as u64 * 2;
            b.collective("all_reduce", "nccl", CostFamily::AllReduce, bytes);
            b.collective("all_gather", "nccl", CostFamily::AllGather, bytes);
            let w = Workload {
                ops: b.ops,
                experts_touched: Vec::new(),
                routing: Default::default(),
            };
            cost::price(&w, s, p)?;
        }
        Ok(Collectives {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            nccl: s.nccl,
            comm: s.comm,
        })
    }
}

/// Launch parameters of one CUDA-graph setting, and the profile's idle at the end of a step.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    start: f64,
    gap: f64,
    launch: f64,
    first_collective: f64,
    graphs: bool,
    step_overhead: f64,
}

impl Launch {
    pub fn new(p: &CalibrationProfile, cuda_graphs: bool) -> Self {
        let l = &p.launch;
        let step_overhead = p.factors.step_overhead_us;
        if cuda_graphs {
            Launch {
                start: l.graph_launch_us,
                gap: l.graph_kernel_gap_us,
                launch: 0.0,
                first_collective: l.graph_first_collective_us,
                graphs: true,
                step_overhead,
            }
        } else {
            Launch {
                start: 0.0,
                gap: l.eager_kernel_gap_us,
                launch: l.eager_launch_us,
                first_collective: 0.0,
                graphs: false,
                step_overhead,
            }
        }
    }
}

/// One rank's engine state (every rank is the same with jitter off).
#[derive(Debug, Clone, Copy)]
pub struct State {
    /// Busy time per category (kernel durations on this rank, every stream), µs.
    pub busy: Busy,
    main: f64,
    aux: f64,
    cpu: f64,
    first_collective: bool,
    first_start: f64,
    step_overhead: f64,
    /// Kernels the CPU's launch clock held back (eager launches).
    cpu_binds: u64,
    /// Spread across ranks of the compute and auxiliary streams (the straggler wait).
    main_sp: Spread,
    aux_sp: Spread,
    /// Straggler waits not added to the streams (CUDA graphs: see `step`), µs.
    waited: f64,
}

impl State {
    pub fn new(l: &Launch) -> Self {
        State {
            busy: [0.0; NCAT],
            main: l.start,
            aux: l.start,
            cpu: l.start,
            first_collective: l.graphs,
            first_start: f64::NAN,
            step_overhead: l.step_overhead,
            cpu_binds: 0,
            main_sp: Spread::LAUNCH,
            aux_sp: Spread::LAUNCH,
            waited: 0.0,
        }
    }
    /// The step window: first kernel's start to the last kernel's end, plus the profile's
    /// idle at the end of the step (as the engine adds it).
    pub fn window_us(&self) -> f64 {
        self.main.max(self.aux) + self.step_overhead - self.first_start + self.waited
    }
}

const PROBES_LOW: [(u32, u32, u64); 14] = [
    (1, 1, 1024),
    (2, 1, 4096),
    (4, 3, 1024),
    (8, 1, 8192),
    (16, 2, 300),
    (3, 1, 65536),
    (5, 2, 2048),
    (64, 1, 100_000),
    (32, 4, 16384),
    (7, 5, 700),
    (100, 2, 3000),
    (11, 3, 50_000),
    (256, 1, 1500),
    (40, 6, 9000),
];
const PROBES_HIGH: [(u32, u32, u64); 14] = [
    (257, 1, 1024),
    (300, 1, 4096),
    (128, 3, 1024),
    (100, 4, 8192),
    (512, 1, 2048),
    (260, 2, 65536),
    (333, 1, 300),
    (90, 5, 100_000),
    (270, 1, 16384),
    (1000, 1, 700),
    (60, 6, 3000),
    (150, 2, 40_000),
    (400, 1, 120_000),
    (88, 4, 600),
];

/// The padding rule of a pass (as `workload::build_verify` / `build_pass` apply it).
fn pad_rule(verify: bool, q: u32) -> crate::scenario::cudagraph::PadRule {
    use crate::scenario::cudagraph::PadRule;
    if verify {
        PadRule::Uniform { q }
    } else {
        PadRule::Decode
    }
}

/// TRITON_MLA's split count, as `StepShape::kv_splits`.
fn splits(context: u64, sms: u64) -> u64 {
    (context / 512)
        .max(1)
        .next_power_of_two()
        .min(2 * sms)
        .max(1)
}

fn layer_signature<'a>(
    w: &'a Workload,
    ix: &[usize],
) -> Vec<(&'static str, CostFamily, Stream, &'a str)> {
    ix.iter()
        .map(|&i| {
            let o = &w.ops[i];
            (o.kernel, o.family, o.stream, o.weights.as_str())
        })
        .collect()
}

/// Splits a workload into segments: ops outside the layers, then runs of layers whose kernel
/// sequences are identical. Returns (op indices, repeat, representative layer).
fn segment(w: &Workload) -> Vec<(Vec<usize>, u32, i32)> {
    let mut groups: Vec<(i32, Vec<usize>)> = Vec::new();
    for (i, op) in w.ops.iter().enumerate() {
        match groups.last_mut() {
            Some((l, v)) if *l == op.layer => v.push(i),
            _ => groups.push((op.layer, vec![i])),
        }
    }
    let mut out: Vec<(Vec<usize>, u32, i32)> = Vec::new();
    for (layer, idx) in groups {
        let sig = |ix: &[usize]| layer_signature(w, ix);
        if let Some(last) = out.last_mut() {
            if layer >= 0 && last.2 >= 0 && sig(&last.0) == sig(&idx) {
                last.1 += 1;
                continue;
            }
        }
        out.push((idx, 1, layer));
    }
    out
}

/// Least squares through one SVD per segment (rank-deficient columns get the minimum-norm
/// solution), reused for every field of every op of the segment.
struct Fitter {
    a: DMatrix<f64>,
    svd: nalgebra::linalg::SVD<f64, nalgebra::Dyn, nalgebra::Dyn>,
    scale: Coef,
}

impl Fitter {
    fn new(rows: &[Coef]) -> Self {
        // Scale columns so that large products (tokens × context) do not swamp the SVD.
        let mut scale = [0.0f64; NB];
        for r in rows {
            for (c, v) in r.iter().enumerate() {
                scale[c] = f64::max(scale[c], v.abs());
            }
        }
        let a = DMatrix::from_fn(rows.len(), NB, |i, j| {
            if scale[j] > 0.0 {
                rows[i][j] / scale[j]
            } else {
                0.0
            }
        });
        let svd = a.clone().svd(true, true);
        Fitter { a, svd, scale }
    }

    /// None when the field is not linear in the basis (the fit leaves a residual).
    fn fit(&self, ys: &[f64]) -> Option<Coef> {
        let ymax = ys.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if ymax == 0.0 {
            return Some([0.0; NB]);
        }
        let b = DVector::from_iterator(ys.len(), ys.iter().map(|v| v / ymax));
        let sol = self.svd.solve(&b, 1e-10).ok()?;
        if (&self.a * &sol - &b).amax() > 1e-7 {
            return None;
        }
        let mut out = [0.0; NB];
        for j in 0..NB {
            // A coefficient that moves the field by less than 1e-9 of its size is round-off:
            // zero it, so that a context-free op is never taken for a context-dependent one.
            if self.scale[j] > 0.0 && sol[j].abs() > 1e-9 {
                out[j] = sol[j] * ymax / self.scale[j];
            }
        }
        Some(out)
    }
}

/// The shape of the timeline's `cost::price` input that an op's successor must keep.
fn reads_successor(op: &Op) -> bool {
    op.measure.is_some_and(|m| m.includes_next) || op.family == CostFamily::AttentionMlaDecode
}

impl PassModel {
    /// Probes `build(scenario with batch and context set, queries per sequence)` at a few
    /// shapes per regime and fits each op's fields on the basis.
    fn fit(
        s: &Scenario,
        build: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
        slot: usize,
        verify: bool,
    ) -> Result<Self> {
        let sms = s.system.gpu.sms as u64;
        let experts = s
            .model
            .moe
            .as_ref()
            .map(|m| DistinctExperts::new(&s.routing, m.n_routed_experts, m.top_k));
        let (low, high) = rayon::join(
            || Self::fit_regime(s, build, &PROBES_LOW, sms, verify),
            || Self::fit_regime(s, build, &PROBES_HIGH, sms, verify),
        );
        Ok(PassModel {
            low: low?,
            high: high?,
            threshold: SHARED_EXPERT_STREAM_TOKEN_THRESHOLD as f64,
            experts,
            sms,
            slot,
            verify,
            sizes: s.cuda_graph_sizes.clone(),
        })
    }

    fn fit_regime(
        s: &Scenario,
        build: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
        probes: &[(u32, u32, u64)],
        sms: u64,
        verify: bool,
    ) -> Result<Regime> {
        let mut ws = Vec::new();
        let mut vars = Vec::new();
        for &(b, q, c) in probes {
            let mut ps = s.clone();
            // Shapes are linear in the experts touched whatever the routing; uniform draws
            // are the cheapest to sample (the probes' touched counts are read off each build).
            ps.routing = crate::scenario::routing::Routing::Uniform;
            ps.batch = b;
            ps.context = c.min(s.model.max_position_embeddings as u64);
            // Probed with CUDA graphs on, so that padded rows and real tokens part (the
            // probes include batches that are not capture sizes).
            ps.cuda_graphs = true;
            ws.push(build(&ps, q));
            let padded = ps.padding(q, pad_rule(verify, q)).padded;
            vars.push((b, q, ps.context, padded));
        }
        if ws
            .iter()
            .flat_map(|w| &w.ops)
            .any(|o| !o.rank_scale.is_empty())
        {
            // One rank's recursion stands for all only when every rank plays the same.
            return Err(Error::Scenario(
                "the sweep's fast path needs every rank to play the same step; expert parallelism loads ranks unevenly (simulate each scenario instead)".into(),
            ));
        }
        let all_segs: Vec<_> = ws.iter().map(segment).collect();
        let segs = &all_segs[0];
        for other in &all_segs[1..] {
            if other.len() != segs.len()
                || other
                    .iter()
                    .zip(segs)
                    .any(|(a, b)| a.0.len() != b.0.len() || a.1 != b.1)
            {
                return Err(Error::Other(
                    "fast path: the workload's op sequence changes within a regime".into(),
                ));
            }
        }
        let mut ops: Vec<OpT> = Vec::new();
        let mut segments = Vec::new();
        for (si, (idx, repeat, layer)) in segs.iter().enumerate() {
            let rows: Vec<Coef> = ws
                .iter()
                .zip(&vars)
                .map(|(w, &(b, q, c, padded))| {
                    let touched = if *layer >= 0 {
                        w.experts_touched.get(*layer as usize).copied().unwrap_or(0) as f64
                    } else {
                        0.0
                    };
                    Vars {
                        tokens: (b * q) as f64,
                        seqs: b as f64,
                        context: c as f64,
                        splits: splits(c, sms) as f64,
                        touched,
                        padded: padded as f64,
                    }
                    .basis()
                })
                .collect();
            let fitter = Fitter::new(&rows);
            let start = ops.len();
            for (j, &i) in idx.iter().enumerate() {
                let op0 = &ws[0].ops[i];
                let field = |get: &dyn Fn(&Op) -> f64, what: &str| -> Result<Coef> {
                    let ys: Vec<f64> = ws
                        .iter()
                        .zip(&all_segs)
                        .map(|(w, sg)| get(&w.ops[sg[si].0[j]]))
                        .collect();
                    fitter.fit(&ys).ok_or_else(|| {
                        Error::Other(format!(
                            "fast path: the {what} of op {} is not linear in the basis",
                            op0.name
                        ))
                    })
                };
                let measure = match op0.measure {
                    Some(_) => Some([
                        field(&|o| o.measure.map_or(0.0, |k| k.m as f64), "table m")?,
                        field(&|o| o.measure.map_or(0.0, |k| k.n as f64), "table n")?,
                        field(&|o| o.measure.map_or(0.0, |k| k.k as f64), "table k")?,
                        field(
                            &|o| o.measure.map_or(0.0, |k| k.batch as f64),
                            "table batch",
                        )?,
                        field(
                            &|o| o.measure.map_or(0.0, |k| k.context as f64),
                            "table context",
                        )?,
                    ]),
                    None => None,
                };
                let fields = Fields {
                    flops: field(&|o| o.flops, "FLOPs")?,
                    bytes: field(&|o| o.bytes, "bytes")?,
                    message_bytes: field(&|o| o.message_bytes as f64, "message bytes")?,
                    shape: [
                        field(&|o| o.shape.m as f64, "m")?,
                        field(&|o| o.shape.n as f64, "n")?,
                        field(&|o| o.shape.k as f64, "k")?,
                        field(&|o| o.shape.batch as f64, "batch")?,
                    ],
                    measure,
                };
                let kind = match op0.family {
                    CostFamily::Fork => Kind::Fork,
                    CostFamily::Join => Kind::Join,
                    f if f.is_collective() => Kind::Collective,
                    _ => Kind::Kernel {
                        aux: op0.stream == Stream::Aux,
                    },
                };
                let with_context = fields
                    .all()
                    .any(|c| CONTEXT_COLS.iter().any(|&k| c[k] != 0.0))
                    || matches!(
                        op0.family,
                        CostFamily::AttentionMlaDecode | CostFamily::AttentionGqaDecode
                    );
                let group = match kind {
                    Kind::Fork | Kind::Join => Group::Sync,
                    Kind::Collective => Group::Collective,
                    Kind::Kernel { .. } if with_context => Group::Context,
                    Kind::Kernel { .. } => Group::Tokens,
                };
                ops.push(OpT {
                    kind,
                    group,
                    category: op0.category,
                    template: op0.clone(),
                    sparse: OpT::sparse_of(&fields),
                    fields,
                });
            }
            segments.push(Segment {
                start,
                end: ops.len(),
                repeat: *repeat,
            });
        }
        // An op whose price reads a context-dependent successor depends on the context too;
        // so does the successor of attention (its split-KV reduce shares the module's price).
        for i in (0..ops.len()).rev() {
            let next_ctx = ops.get(i + 1).is_some_and(|n| n.group == Group::Context);
            if ops[i].group == Group::Tokens && next_ctx && reads_successor(&ops[i].template) {
                ops[i].group = Group::Context;
            }
        }
        for i in 1..ops.len() {
            if ops[i].group == Group::Tokens
                && ops[i - 1].template.family == CostFamily::AttentionMlaDecode
            {
                ops[i].group = Group::Context;
            }
        }
        let layout = |g: Group| -> Vec<(usize, bool)> {
            let mut out = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                if op.group != g {
                    continue;
                }
                out.push((i, true));
                if let Some(n) = ops.get(i + 1) {
                    let helper = n.group != g
                        && matches!(n.kind, Kind::Kernel { .. })
                        && reads_successor(&op.template)
                        && !cost::aic::is_moe_module_op(&n.template);
                    if helper {
                        out.push((i + 1, false));
                    }
                }
            }
            out
        };
        let tokens_layout = layout(Group::Tokens);
        let context_layout = layout(Group::Context);
        let context_ops = context_layout.iter().filter(|x| x.1).map(|x| x.0).collect();
        let collective_ops = (0..ops.len())
            .filter(|&i| ops[i].group == Group::Collective)
            .collect();
        Ok(Regime {
            kinds: ops.iter().map(|o| o.kind).collect(),
            ops,
            segments,
            tokens_layout,
            context_layout,
            context_ops,
            collective_ops,
        })
    }

    /// Segment shapes (ops, repeat) of the low regime.
    fn shape(&self) -> Vec<(usize, u32)> {
        self.low
            .segments
            .iter()
            .map(|s| (s.end - s.start, s.repeat))
            .collect()
    }

    fn regime(&self, tokens: f64) -> &Regime {
        if tokens <= self.threshold {
            &self.low
        } else {
            &self.high
        }
    }

    /// Rows of a pass of `batch` × `queries` tokens after CUDA-graph padding.
    fn padded(&self, batch: u32, queries: u32, graphs: bool) -> u64 {
        let q = queries.max(1);
        self.sizes
            .padding(batch as u64 * q as u64, pad_rule(self.verify, q), graphs)
            .padded
    }

    fn vars(&self, batch: u32, queries: u32, context: u64, touched: f64, padded: u64) -> Vars {
        Vars {
            padded: padded as f64,
            tokens: batch as f64 * queries.max(1) as f64,
            seqs: batch as f64,
            context: context as f64,
            splits: splits(context, self.sms) as f64,
            touched,
        }
    }

    /// Expected experts touched by `tokens` real tokens; padding rows add one more top-k
    /// draw (they share one routing), as the workload's sampler draws them.
    fn touched(&self, tokens: u64, padded: u64) -> f64 {
        let draws = tokens + u64::from(padded > tokens);
        self.experts.as_ref().map_or(0.0, |e| e.at(draws))
    }
}

/// Prices `layout`'s ops of `regime` at basis `x` with `cost::price`: the kept ops' µs in
/// layout order, plus their busy time over the segments' repeats.
fn price_layout(
    regime: &Regime,
    layout: &[(usize, bool)],
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
) -> Result<Vec<f64>> {
    price_layout_in(&mut empty_workload(), regime, layout, x, s, p)
}

fn empty_workload() -> Workload {
    Workload {
        ops: Vec::new(),
        experts_touched: Vec::new(),
        routing: Default::default(),
    }
}

/// [`price_layout`] in `w`, a workload kept for this layout (its ops are the layout's templates
/// once filled): only the numeric fields are set per pricing, nothing is cloned.
fn price_layout_in(
    w: &mut Workload,
    regime: &Regime,
    layout: &[(usize, bool)],
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
) -> Result<Vec<f64>> {
    let same = w.ops.len() == layout.len()
        && w.ops.iter().zip(layout).all(|(o, &(i, _))| {
            let t = &regime.ops[i].template;
            o.family == t.family && std::ptr::eq(o.kernel, t.kernel) && o.layer == t.layer
        });
    if !same {
        w.ops = layout
            .iter()
            .map(|&(i, _)| regime.ops[i].template.clone())
            .collect();
    }
    for (op, &(i, _)) in w.ops.iter_mut().zip(layout) {
        regime.ops[i].instantiate_into(x, op);
    }
    // Quiet: the report's warnings come from the scenario's own full pricing, never from here.
    let pricing = cost::price_quiet(w, s, p)?;
    Ok(layout
        .iter()
        .zip(pricing.base_us)
        .filter(|((_, kept), _)| *kept)
        .map(|(_, us)| us)
        .collect())
}

/// Busy time per category of `ops` at durations `us`, over their segments' repeats.
fn busy_of(regime: &Regime, ops: impl Iterator<Item = usize>, us: &[f64]) -> Busy {
    let mut busy = [0.0; NCAT];
    for (i, &d) in ops.zip(us) {
        let seg = regime
            .segments
            .iter()
            .find(|s| s.start <= i && i < s.end)
            .map_or(1, |s| s.repeat);
        busy[regime.ops[i].category.index()] += d * seg as f64;
    }
    busy
}

fn keep_or_nan(r: Result<Vec<f64>>, n: usize) -> Vec<f64> {
    // Every setting was priced once when the fast scenario and collectives were made, so a
    // failure here is a shape no check saw: NaN shows it in the output rather than a panic.
    r.unwrap_or_else(|_| vec![f64::NAN; n])
}

/// Prices of one (pass, batch, queries): the token-dependent ops, then per context and per
/// collective setting.
#[derive(Debug)]
struct Entry {
    touched: f64,
    /// Per op of the regime: the token-dependent ops' µs, 0 elsewhere.
    tokens_us: Box<[f64]>,
    tokens_busy: Busy,
    /// (context, µs of `context_ops`, busy).
    context: Vec<(u64, Box<[f64]>, Busy)>,
    /// (collectives id, graphs, µs of `collective_ops`, busy).
    collectives: Vec<(u64, bool, Box<[f64]>, Busy)>,
}

/// FxHash's multiply-rotate: the memo's keys are small integers, hashed once per pass played.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Keyed by (batch, queries, padded rows): graphs on and off pad differently.
type EntryMap = HashMap<(u32, u32, u32), Entry, BuildHasherDefault<KeyHasher>>;

/// One thread's priced shapes for one fast scenario.
struct Memo {
    owner: u64,
    /// The pricing scenario, its batch, context and NCCL settings set before each pricing.
    s: Scenario,
    passes: [EntryMap; 1 + PassKind::ALL.len()],
    /// Prices stored, to bound the memory a long-lived thread keeps.
    stored: usize,
    /// Scratch: one pass's op durations.
    d: Vec<f64>,
    /// Scratch: the workload each layout is priced in (`price_layout_in`), by
    /// [`scratch_index`] (pass slot, regime, layout).
    scratch: Vec<Workload>,
    /// The Monte Carlo draw applied after the memoised prices (`whatif::uncertainty`), if any.
    draw: Option<Draw>,
    /// Latency part of each collective of a (pass, batch, queries, padded, collectives id,
    /// graphs), as a fraction of its price: only drawn steps that scale latency and bandwidth
    /// apart read it.
    latency: HashMap<LatencyKey, Box<[f64]>>,
}

/// The layouts priced per regime: the token-dependent ops, the context-dependent ones, the
/// collectives.
const LAYOUTS: usize = 3;

/// Where `Memo::scratch` keeps the workload of (pass slot, high regime, layout).
fn scratch_index(slot: usize, high: bool, layout: usize) -> usize {
    (slot * 2 + high as usize) * LAYOUTS + layout
}

/// (pass slot, batch, queries, padded rows, collectives id, graphs).
type LatencyKey = (usize, u32, u32, u32, u64, bool);

/// Beyond this many stored prices (~64 MB) a thread's memo starts over.
const MEMO_MAX_VALUES: usize = 8 << 20;
/// Contexts priced and kept per (pass, batch, queries) entry (sweep helper: bounds the memo of
/// a sweep over many contexts; see `play`).
const CONTEXTS_PER_ENTRY: usize = 16;

thread_local! {
    static MEMO: RefCell<Option<Box<Memo>>> = const { RefCell::new(None) };
}

/// A scenario family in closed form: the plain step, and speculative steps at any k.
#[derive(Debug, Clone)]
pub struct FastScenario {
    pub profile: CalibrationProfile,
    /// The scenario ops are priced under (the timeline prices draft passes under the target's
    /// scenario too).
    scenario: Scenario,
    id: u64,
    target: PassModel,
    /// The speculative step's passes (fitted when a drafter was given).
    spec: Option<SpecFit>,
    /// The expected wait of each collective for the slowest rank (jitter on).
    straggler: Straggler,
}

/// A drafter's passes in closed form: one model per `PassKind` (memo slot 1 + its index), and
/// the `SpecStep` they are played in.
#[derive(Debug, Clone)]
struct SpecFit {
    method: crate::workload::spec_step::SpecMethod,
    /// In `PassKind::ALL` order.
    passes: Vec<PassModel>,
    /// The step at k = 1, 2, ... up to the method's limit, built once (a sweep plays it per row).
    steps: Vec<SpecStep>,
    host_us: f64,
    pass_gap_us: f64,
}

impl SpecFit {
    fn step(&self, k: u32) -> std::borrow::Cow<'_, SpecStep> {
        match self.steps.get((k as usize).wrapping_sub(1)) {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(SpecStep::new(self.method, k)),
        }
    }
}

impl FastScenario {
    /// Fits the plain step of `s`; with `draft`, also the verify pass and the draft passes.
    pub fn new(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&super::draft::Draft>,
    ) -> Result<Self> {
        let build_target = |ps: &Scenario, q: u32| crate::workload::build_pass(ps, q);
        let target;
        let mut spec = None;
        if let Some(d) = draft {
            let sd = p.spec_decode.as_ref().ok_or_else(|| {
                Error::field(
                    &p.path,
                    "spec_decode",
                    "missing: needed for draft tokens > 0",
                )
            })?;
            let ds = d.scenario(s)?;
            // Each kind of pass the step runs, fitted on the scenario it is built on.
            let fit = |(i, kind): (usize, &PassKind)| {
                let build = |ps: &Scenario, q: u32| kind.build(d, ps, q, kind.first_index());
                let on = if kind.on_draft() { &ds } else { s };
                PassModel::fit(on, &build, 1 + i, *kind == PassKind::Verify)
            };
            let (t, passes) = rayon::join(
                || PassModel::fit(s, &build_target, 0, false),
                || {
                    use rayon::prelude::*;
                    PassKind::ALL
                        .par_iter()
                        .enumerate()
                        .map(fit)
                        .collect::<Result<Vec<_>>>()
                },
            );
            target = t?;
            spec = Some(SpecFit {
                method: d.method,
                passes: passes?,
                steps: (1..=d.limits.max_draft_tokens)
                    .map(|k| SpecStep::new(d.method, k))
                    .collect(),
                host_us: sd.exposed_host_us,
                pass_gap_us: sd.pass_gap_us,
            });
        } else {
            target = PassModel::fit(s, &build_target, 0, false)?;
        }
        let fast = FastScenario {
            profile: p.clone(),
            scenario: s.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            target,
            spec,
            straggler: Straggler::new(&p.variability, s.tp),
        };
        fast.check()?;
        Ok(fast)
    }

    /// Prices every op group of every pass once, so that a profile that cannot price a shape
    /// is refused here, by name, rather than showing as NaN in a sweep.
    fn check(&self) -> Result<()> {
        let mut s = self.scenario.clone();
        for pm in self.passes() {
            for (b, q) in [(1u32, 2u32), (257, 2)] {
                s.batch = b;
                let (t, padded) = ((b * q) as u64, pm.padded(b, q, false));
                let regime = pm.regime(padded as f64);
                let x = pm
                    .vars(b, q, s.context, pm.touched(t, padded), padded)
                    .basis();
                price_layout(regime, &regime.tokens_layout, &x, &s, &self.profile)?;
                price_layout(regime, &regime.context_layout, &x, &s, &self.profile)?;
                let k: Vec<(usize, bool)> =
                    regime.collective_ops.iter().map(|&i| (i, true)).collect();
                price_layout(regime, &k, &x, &s, &self.profile)?;
            }
        }
        Ok(())
    }

    fn passes(&self) -> impl Iterator<Item = &PassModel> {
        std::iter::once(&self.target).chain(self.spec.iter().flat_map(|f| &f.passes))
    }

    /// Segment shapes (ops, repeat) of the target, verify, first and later draft passes.
    pub fn shapes(&self) -> Vec<Vec<(usize, u32)>> {
        self.passes().map(|m| m.shape()).collect()
    }

    /// Runs `f` with this thread's memo for this fast scenario.
    fn with_memo<R>(&self, f: impl FnOnce(&mut Memo) -> R) -> R {
        MEMO.with(|cell| {
            let mut slot = cell.borrow_mut();
            let fresh = match slot.as_ref() {
                Some(m) => m.owner != self.id || m.stored > MEMO_MAX_VALUES,
                None => true,
            };
            if fresh {
                *slot = Some(Box::new(Memo {
                    owner: self.id,
                    s: self.scenario.clone(),
                    passes: Default::default(),
                    stored: 0,
                    d: Vec::new(),
                    scratch: (0..4 * 2 * LAYOUTS).map(|_| empty_workload()).collect(),
                    draw: None,
                    latency: HashMap::new(),
                }));
            }
            f(slot.as_mut().expect("memo set above"))
        })
    }

    /// Plays `repeat` passes of `pm` on `st` at (batch, queries, context).
    #[allow(clippy::too_many_arguments)]
    fn play(
        &self,
        m: &mut Memo,
        pm: &PassModel,
        st: &mut State,
        batch: u32,
        queries: u32,
        context: u64,
        launch: &Launch,
        coll: &Collectives,
        repeat: u32,
    ) {
        let q = queries.max(1);
        let tokens = batch as u64 * q as u64;
        let padded = pm.padded(batch, q, launch.graphs);
        // vLLM picks the shared expert's stream by the rows the pass runs (padded).
        let regime = pm.regime(padded as f64);
        let p = &self.profile;
        let Memo {
            s,
            passes,
            stored,
            d,
            scratch,
            draw,
            latency,
            ..
        } = m;
        let high = !std::ptr::eq(regime, &pm.low);
        let [w_tokens, w_context, w_coll] = scratch
            .get_disjoint_mut([0, 1, 2].map(|l| scratch_index(pm.slot, high, l)))
            .expect("distinct scratch slots");
        let e = passes[pm.slot]
            .entry((batch, q, padded as u32))
            .or_insert_with(|| {
                let touched = pm.touched(tokens, padded);
                s.batch = batch;
                s.context = context;
                let x = pm.vars(batch, q, context, touched, padded).basis();
                let us = keep_or_nan(
                    price_layout_in(w_tokens, regime, &regime.tokens_layout, &x, s, p),
                    regime.tokens_layout.iter().filter(|x| x.1).count(),
                );
                let mut tokens_us = vec![0.0; regime.ops.len()].into_boxed_slice();
                let kept = regime.tokens_layout.iter().filter(|x| x.1).map(|x| x.0);
                for (i, v) in kept.clone().zip(&us) {
                    tokens_us[i] = *v;
                }
                *stored += regime.ops.len();
                Entry {
                    touched,
                    tokens_busy: busy_of(regime, kept, &us),
                    tokens_us,
                    context: Vec::new(),
                    collectives: Vec::new(),
                }
            });
        // Most recent context first (a sweep plays each context's rows together); at most
        // CONTEXTS_PER_ENTRY kept per entry, the oldest dropped, so that a sweep over thousands
        // of contexts neither scans nor holds them all.
        let ci = match e.context.iter().rposition(|c| c.0 == context) {
            Some(i) => i,
            None => {
                s.batch = batch;
                s.context = context;
                let x = pm.vars(batch, q, context, e.touched, padded).basis();
                let n = regime.context_ops.len();
                let us = keep_or_nan(
                    price_layout_in(w_context, regime, &regime.context_layout, &x, s, p),
                    n,
                );
                let busy = busy_of(regime, regime.context_ops.iter().copied(), &us);
                if e.context.len() >= CONTEXTS_PER_ENTRY {
                    e.context.remove(0);
                } else {
                    *stored += n;
                }
                e.context.push((context, us.into_boxed_slice(), busy));
                e.context.len() - 1
            }
        };
        let ki = match e
            .collectives
            .iter()
            .position(|c| c.0 == coll.id && c.1 == launch.graphs)
        {
            Some(i) => i,
            None => {
                s.batch = batch;
                s.context = context;
                s.nccl = coll.nccl;
                s.comm = coll.comm;
                s.cuda_graphs = launch.graphs;
                let x = pm.vars(batch, q, context, e.touched, padded).basis();
                let layout: Vec<(usize, bool)> =
                    regime.collective_ops.iter().map(|&i| (i, true)).collect();
                let us = keep_or_nan(
                    price_layout_in(w_coll, regime, &layout, &x, s, p),
                    layout.len(),
                );
                let busy = busy_of(regime, regime.collective_ops.iter().copied(), &us);
                *stored += layout.len();
                e.collectives
                    .push((coll.id, launch.graphs, us.into_boxed_slice(), busy));
                e.collectives.len() - 1
            }
        };
        d.clear();
        d.extend_from_slice(&e.tokens_us);
        let (_, cus, cbusy) = &e.context[ci];
        for (&i, &v) in regime.context_ops.iter().zip(cus.iter()) {
            d[i] = v;
        }
        let (_, _, kus, kbusy) = &e.collectives[ki];
        for (&i, &v) in regime.collective_ops.iter().zip(kus.iter()) {
            d[i] = v;
        }
        for c in 0..NCAT {
            st.busy[c] += (e.tokens_busy[c] + cbusy[c] + kbusy[c]) * repeat as f64;
        }
        if let Some(dr) = draw {
            let lat = if dr.splits_collectives() && !regime.collective_ops.is_empty() {
                let key = (pm.slot, batch, q, padded as u32, coll.id, launch.graphs);
                let e_touched = e.touched;
                &**latency.entry(key).or_insert_with(|| {
                    s.batch = batch;
                    s.context = context;
                    s.nccl = coll.nccl;
                    s.comm = coll.comm;
                    s.cuda_graphs = launch.graphs;
                    let x = pm.vars(batch, q, context, e_touched, padded).basis();
                    latency_fractions(regime, &x, s, p).into_boxed_slice()
                })
            } else {
                &[][..]
            };
            dr.apply(regime, d, lat);
        }
        play_regime(regime, d, st, launch, repeat, &self.straggler);
    }

    /// The plain step's time (µs) at this batch and context.
    pub fn step_us(&self, batch: u32, context: u64, launch: &Launch, coll: &Collectives) -> f64 {
        self.step_us_busy(batch, context, launch, coll).0
    }

    /// The plain step's time and its busy time per category.
    pub fn step_us_busy(
        &self,
        batch: u32,
        context: u64,
        launch: &Launch,
        coll: &Collectives,
    ) -> (f64, Busy) {
        self.with_memo(|m| {
            let mut st = State::new(launch);
            self.play(m, &self.target, &mut st, batch, 1, context, launch, coll, 1);
            (st.window_us(), st.busy)
        })
    }

    /// Plays the windows of the step at `k` (each window's passes on one state, `overhead` µs
    /// added to each window's end-of-step idle): (draft µs, verify µs, busy of both sides).
    #[allow(clippy::too_many_arguments)]
    fn play_spec(
        &self,
        m: &mut Memo,
        spec: &SpecFit,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
        overhead: f64,
    ) -> (f64, f64, Busy) {
        let step = spec.step(k);
        let (mut draft_us, mut verify_us, mut busy) = (0.0, 0.0, [0.0; NCAT]);
        for win in &step.windows {
            let mut st = State::new(launch);
            st.step_overhead += overhead;
            for run in &win.passes {
                let pm = &spec.passes[run.kind as usize];
                self.play(
                    m,
                    pm,
                    &mut st,
                    batch,
                    run.queries,
                    context,
                    launch,
                    coll,
                    run.repeat,
                );
            }
            let us = st.window_us() + win.pass_gaps as f64 * spec.pass_gap_us;
            match win.side {
                Side::Verify => verify_us += us,
                Side::Draft => draft_us += us,
            }
            for (b, d) in busy.iter_mut().zip(st.busy) {
                *b += d;
            }
        }
        (draft_us, verify_us, busy)
    }

    /// [`FastScenario::spec_step_us`] with the busy time per category of both sides.
    pub fn spec_step_us_busy(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<((f64, f64, f64), Busy)> {
        let spec = self.spec.as_ref()?;
        Some(self.with_memo(|m| {
            let (draft_us, verify_us, busy) =
                self.play_spec(m, spec, batch, context, k, launch, coll, 0.0);
            (
                (draft_us, verify_us, draft_us + verify_us + spec.host_us),
                busy,
            )
        }))
    }

    /// A speculative step with `k` draft tokens: (draft µs, verify µs, whole step µs), as
    /// `whatif spec-decode` composes them. None when no drafter was fitted.
    pub fn spec_step_us(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<(f64, f64, f64)> {
        self.spec_step_us_busy(batch, context, k, launch, coll)
            .map(|x| x.0)
    }

    /// Forgets this thread's priced shapes (the next call prices from scratch: benchmarks of
    /// the cold path).
    pub fn clear_memo(&self) {
        MEMO.with(|cell| *cell.borrow_mut() = None);
    }

    /// [`FastScenario::step_us`] under a Monte Carlo draw: the memoised prices times the
    /// draw's multipliers, replayed through the recursion (the memo stays warm across draws).
    pub fn step_us_drawn(
        &self,
        batch: u32,
        context: u64,
        launch: &Launch,
        coll: &Collectives,
        draw: &Draw,
    ) -> f64 {
        self.with_memo(|m| {
            m.draw = Some(*draw);
            let mut st = State::new(launch);
            st.step_overhead += draw.step_overhead_us;
            self.play(m, &self.target, &mut st, batch, 1, context, launch, coll, 1);
            m.draw = None;
            st.window_us()
        })
    }

    /// [`FastScenario::spec_step_us`] under a Monte Carlo draw (see `step_us_drawn`).
    pub fn spec_step_us_drawn(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
        draw: &Draw,
    ) -> Option<(f64, f64, f64)> {
        let spec = self.spec.as_ref()?;
        Some(self.with_memo(|m| {
            m.draw = Some(*draw);
            let (draft_us, verify_us, _) = self.play_spec(
                m,
                spec,
                batch,
                context,
                k,
                launch,
                coll,
                draw.step_overhead_us,
            );
            m.draw = None;
            (draft_us, verify_us, draft_us + verify_us + spec.host_us)
        }))
    }

    /// The scenario the fast path prices under.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }
}

/// One Monte Carlo draw of what is uncertain in the prices (`whatif::uncertainty`), applied
/// after the memoised prices, per op family: the memo key need not include it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// Multiplier of each op's price by its cost family (`CostFamily as usize`); for a
    /// collective, of its bandwidth (bytes) term.
    pub family: [f64; CostFamily::ALL.len()],
    /// Multiplier of every collective's latency term (base + steps × hop).
    pub collective_latency: f64,
    /// µs added to the idle at the end of every pass window (may be negative down to the
    /// profile's own overhead: the draw of a fitted `step_overhead_us`).
    pub step_overhead_us: f64,
}

impl Default for Draw {
    fn default() -> Self {
        Draw {
            family: [1.0; CostFamily::ALL.len()],
            collective_latency: 1.0,
            step_overhead_us: 0.0,
        }
    }
}

impl Draw {
    /// Whether some collective's latency and bandwidth terms are scaled apart.
    fn splits_collectives(&self) -> bool {
        CostFamily::ALL
            .iter()
            .filter(|f| f.is_collective())
            .any(|&f| self.family[f as usize] != self.collective_latency)
    }

    /// Scales one pass's durations `d` (`lat`: the latency fractions of the regime's
    /// collectives, in `collective_ops` order; empty when not split).
    fn apply(&self, regime: &Regime, d: &mut [f64], lat: &[f64]) {
        for (op, v) in regime.ops.iter().zip(d.iter_mut()) {
            let f = op.template.family;
            if !f.is_collective() {
                *v *= self.family[f as usize];
            }
        }
        for (j, &i) in regime.collective_ops.iter().enumerate() {
            let f = regime.ops[i].template.family;
            let l = lat.get(j).copied().unwrap_or(1.0);
            d[i] *= l * self.collective_latency + (1.0 - l) * self.family[f as usize];
        }
    }
}

/// The latency part of each of `regime`'s collectives at basis `x` as a fraction of its price
/// (`cost::price`'s latency term of the chosen protocol, times the profile's latency factor);
/// 1 (all latency: decode messages are latency-bound) where the pricing names none.
fn latency_fractions(regime: &Regime, x: &Coef, s: &Scenario, p: &CalibrationProfile) -> Vec<f64> {
    let ops: Vec<Op> = regime
        .collective_ops
        .iter()
        .map(|&i| regime.ops[i].instantiate(x))
        .collect();
    let w = Workload {
        ops,
        experts_touched: Vec::new(),
        routing: Default::default(),
    };
    let Ok(pricing) = cost::price_quiet(&w, s, p) else {
        return vec![1.0; w.ops.len()];
    };
    w.ops
        .iter()
        .zip(&pricing.base_us)
        .map(|(op, &us)| {
            pricing
                .collectives
                .iter()
                .find(|c| c.op == op.family.key() && c.bytes == op.message_bytes)
                .filter(|_| us > 0.0)
                .map_or(1.0, |c| {
                    (c.latency_us * p.factors.collective_latency_scale / us).clamp(0.0, 1.0)
                })
        })
        .collect()
}

/// Plays one regime's segments `repeat` times (identical passes) with op durations `d`.
fn play_regime(
    regime: &Regime,
    d: &[f64],
    st: &mut State,
    launch: &Launch,
    repeat: u32,
    sg: &Straggler,
) {
    // The whole pass may itself repeat (identical draft passes): a run like a segment's.
    let mut pass = Run::start(st, launch);
    for r in 0..repeat {
        for seg in &regime.segments {
            let kinds = &regime.kinds[seg.start..seg.end];
            let ds = &d[seg.start..seg.end];
            let mut run = Run::start(st, launch);
            for k in 0..seg.repeat {
                for (&kind, &dur) in kinds.iter().zip(ds) {
                    step(st, kind, dur, launch, sg);
                }
                if run.steady(st, launch, seg.repeat - k - 1) {
                    break;
                }
            }
        }
        if pass.steady(st, launch, repeat - r - 1) {
            return;
        }
    }
}

/// Detects the steady state of a run of identical layers (or passes) and skips to its end.
struct Run {
    rel: [f64; 3],
    main: f64,
    cpu: f64,
    binds: u64,
    /// The streams' spreads (a layer repeats only if the paths into its collectives do).
    spreads: [Spread; 2],
    waited: f64,
}

impl Run {
    fn start(st: &State, l: &Launch) -> Self {
        Run {
            rel: relative(st, l, false),
            main: st.main,
            cpu: st.cpu,
            binds: st.cpu_binds,
            spreads: spreads(st),
            waited: st.waited,
        }
    }

    /// After one more layer: when the state relative to the compute stream is the one the
    /// layer started from, every later layer repeats it (the recursion is shift-invariant), so
    /// the `left` layers still to play are added as increments and true is returned.
    fn steady(&mut self, st: &mut State, l: &Launch, left: u32) -> bool {
        // Launching eagerly, a CPU that bound no kernel in this layer and gained on the GPU
        // (launches no slower than the kernels run) stays ahead for every later layer.
        let cpu_ahead = l.launch > 0.0
            && st.cpu_binds == self.binds
            && st.cpu - self.cpu <= st.main - self.main;
        let rel = relative(st, l, cpu_ahead);
        let same = (rel[0] - self.rel[0]).abs() < 1e-9
            && (rel[1] - self.rel[1]).abs() < 1e-9
            && rel[2] == self.rel[2]
            && spreads(st) == self.spreads;
        if same {
            // The streams advance by the compute stream's increment (an auxiliary stream
            // behind it keeps its offset, which is all that matters of it); the CPU by its own
            // (the compute stream's in the steady state, none under graphs, its launches when
            // it runs ahead).
            let n = left as f64;
            let (dm, dc) = (st.main - self.main, st.cpu - self.cpu);
            st.main += dm * n;
            st.aux += dm * n;
            st.cpu += dc * n;
            st.waited += (st.waited - self.waited) * n;
            return true;
        }
        *self = Run {
            rel,
            main: st.main,
            cpu: st.cpu,
            binds: st.cpu_binds,
            spreads: spreads(st),
            waited: st.waited,
        };
        false
    }
}

/// The state relative to the compute stream; once it repeats, so does every later layer.
/// A stream behind the compute stream is left out: the auxiliary stream only matters through
/// a fork or the step's end, both of which take the later of the two streams. Under CUDA
/// graphs the CPU clock never advances, so once it is behind both streams it can never bind
/// again and is left out; launching eagerly, so is a CPU that runs ahead (`cpu_ahead`).
#[inline]
fn relative(st: &State, l: &Launch, cpu_ahead: bool) -> [f64; 3] {
    let cpu = if cpu_ahead || (l.launch == 0.0 && st.cpu <= st.main.min(st.aux)) {
        f64::MIN
    } else {
        st.cpu - st.main
    };
    let aux = if st.aux <= st.main {
        f64::MIN
    } else {
        st.aux - st.main
    };
    [aux, cpu, st.first_collective as u8 as f64]
}

/// The spreads of the streams that can still reach a collective: the auxiliary stream's only
/// while it is ahead of the compute stream (else a fork or join takes the compute stream's).
#[inline]
fn spreads(st: &State) -> [Spread; 2] {
    let aux = if st.aux > st.main {
        st.aux_sp
    } else {
        Spread::MET
    };
    [st.main_sp, aux]
}

/// The later of two times (no NaN handling: it sits on the recursion's critical path).
#[inline(always)]
fn later(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// One op of the engine's recursion on a single rank with jitter off.
#[inline(always)]
fn step(st: &mut State, kind: Kind, dur: f64, l: &Launch, sg: &Straggler) {
    match kind {
        Kind::Fork => {
            if st.main > st.aux {
                st.aux_sp = st.main_sp;
            }
            st.aux = later(st.aux, st.main)
        }
        Kind::Join => {
            if st.aux > st.main {
                st.main_sp = st.aux_sp;
            }
            st.main = later(st.main, st.aux)
        }
        Kind::Collective => {
            st.cpu += l.launch;
            let extra = if st.first_collective {
                l.first_collective
            } else {
                0.0
            };
            st.first_collective = false;
            let ready = st.main + l.gap + extra;
            let bound = st.cpu > ready;
            st.cpu_binds += bound as u64;
            let a = later(ready, st.cpu);
            if st.first_start.is_nan() {
                st.first_start = a;
            }
            // The ranks leave together when the last one arrives: `wait` after the mean one.
            let wait = if bound {
                sg.launch_wait
            } else {
                sg.wait(&st.main_sp)
            };
            if l.launch == 0.0 {
                // Under CUDA graphs the CPU clock never advances, so it binds no later kernel
                // whatever the wait, and an auxiliary stream behind the compute stream is
                // taken over at the next fork either way: shifting everything after this
                // collective by the wait decides every later max as the shifted timeline
                // would. The wait is therefore kept aside and added to the step's window,
                // off the recursion's critical path (its square root and division would
                // stall every later op). An auxiliary stream still ahead is not delayed by
                // the collective, so it moves back by the wait relative to the shift.
                st.main = a + dur;
                if st.aux > st.main {
                    st.aux -= wait;
                }
                st.waited += wait;
            } else {
                st.main = a + wait + dur;
            }
            st.main_sp = Spread::MET;
        }
        Kind::Kernel { aux } => {
            st.cpu += l.launch;
            let free = if aux { &mut st.aux } else { &mut st.main };
            let ready = *free + l.gap;
            let bound = st.cpu > ready;
            st.cpu_binds += bound as u64;
            let s = later(ready, st.cpu);
            *free = s + dur;
            if st.first_start.is_nan() {
                st.first_start = s;
            }
            if sg.on {
                // A kernel the CPU's launch bound starts its path afresh (branch-free: eager
                // launches bind kernels irregularly).
                let sp = if aux { &mut st.aux_sp } else { &mut st.main_sp };
                let keep = (!bound) as u8 as f64;
                sp.sum = sp.sum * keep + dur;
                sp.sq = sp.sq * keep + dur * dur;
                sp.launch |= bound;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The straggler wait: what the engine's seeded jitter adds to the mean step.
//
// With jitter on (`cost::profile::Variability`, drawn in `sim::engine`), rank r's kernel of base
// time b lasts b × v_r × (1 + a·U), where v_r = 1 + s·U' is the rank's speed for the whole step
// (s = rank_skew_cv·√3), a = kernel_cv·√3 and U, U' are uniform on [-1, 1]; each rank also
// starts at its own launch offset, uniform on [0, launch_skew_us]. Collective transfer jitter is
// one draw for every rank, so it moves no mean. Every draw has mean zero, so each rank's mean
// timeline is the fast path's; but a collective ends at the LATEST arrival, and all ranks leave
// it together. Between two collectives each rank's arrival deviates from the mean by
//     D_r = (v_r − 1)·S + Σ b_i·a·U_i (+ its launch offset, from a launch clock),
// S = Σ b_i over the kernels on the critical path since the ranks last met (the stream each
// kernel, fork and join follows in the recursion). The mean collective therefore waits
// E[max over N ranks of D_r] beyond the fast path. D_r is a uniform of half-width s·S plus, by
// the central limit theorem, a normal of variance kernel_cv²·Σ b_i² (the launch offset's
// variance launch_skew_us²/12 joins it on a path from a launch clock: the step's start or an
// eager launch that bound the kernel). E[max] of N such sums is tabulated once per N by
// numerical integration (`expected_max_table`) and read at the path's mix of the two.
//
// The marginal is all that matters: ranks meet at every collective, so the waits add up even
// though each rank keeps its speed all step. Left out (measured by tests/fast_vs_seeds.rs):
// ties at a join or at the CPU's launch clock where ranks split between the two sides.
// ---------------------------------------------------------------------------------------------

/// One stream's spread across ranks since the ranks last met at a collective.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spread {
    /// Kernel time on the path (each rank's speed scales it).
    sum: f64,
    /// Sum of squares of those kernels' times (each jitters independently).
    sq: f64,
    /// The path starts at a launch clock (the step's start or a CPU-bound eager launch), whose
    /// ranks are apart by the launch skew.
    launch: bool,
}

impl Spread {
    /// Just after a collective: every rank at the same time.
    const MET: Spread = Spread {
        sum: 0.0,
        sq: 0.0,
        launch: false,
    };
    /// At a launch clock: apart by the launch skew only.
    const LAUNCH: Spread = Spread {
        sum: 0.0,
        sq: 0.0,
        launch: true,
    };
}

/// Points of the E[max] table over the normal share of the variance, 0 to 1.
const STRAGGLER_POINTS: usize = 65;

/// The expected straggler wait of one profile's jitter over one scenario's ranks.
#[derive(Debug, Clone)]
struct Straggler {
    /// Half-width of the rank speed's uniform draw (rank_skew_cv × √3).
    skew: f64,
    /// kernel_cv²: variance of one kernel's relative jitter.
    kernel_var: f64,
    /// launch_skew_us² / 12: variance of the ranks' uniform launch offsets.
    launch_var: f64,
    /// E[max of N] of a unit-variance uniform-plus-normal sum, at normal shares of the
    /// variance 0, 1/64, ..., 1 (`expected_max_table`); empty: no wait (one rank, no jitter).
    table: std::sync::Arc<[f64]>,
    /// Any wait at all (else the spreads are not tracked: a step with no collective, TP=1,
    /// still reaches its steady state).
    on: bool,
    /// The wait of a collective the CPU's launch bound (the launch skew alone), precomputed:
    /// eager steps meet it at most collectives.
    launch_wait: f64,
}

impl Straggler {
    fn new(v: &crate::cost::profile::Variability, ranks: u32) -> Self {
        let skew = v.rank_skew_cv * 3f64.sqrt();
        let kernel_var = v.kernel_cv * v.kernel_cv;
        let launch_var = v.launch_skew_us * v.launch_skew_us / 12.0;
        let on = ranks > 1 && (skew > 0.0 || kernel_var > 0.0 || launch_var > 0.0);
        let mut sg = Straggler {
            on,
            skew,
            kernel_var,
            launch_var,
            table: if on {
                expected_max_table(ranks)
            } else {
                std::sync::Arc::from(Vec::new())
            },
            launch_wait: 0.0,
        };
        sg.launch_wait = sg.wait(&Spread::LAUNCH);
        sg
    }

    /// Expected wait of a collective whose arriving path has spread `sp`, µs.
    #[inline]
    fn wait(&self, sp: &Spread) -> f64 {
        if !self.on {
            return 0.0;
        }
        let w = self.skew * sp.sum;
        let uniform = w * w / 3.0;
        let normal = self.kernel_var * sp.sq + if sp.launch { self.launch_var } else { 0.0 };
        let var = uniform + normal;
        if var <= 0.0 {
            return 0.0;
        }
        let x = normal / var * (STRAGGLER_POINTS - 1) as f64;
        let i = (x as usize).min(STRAGGLER_POINTS - 2);
        let t = x - i as f64;
        var.sqrt() * (self.table[i] + t * (self.table[i + 1] - self.table[i]))
    }
}

/// E[max of `n` iid Y], Y = √(1−q)·√3·U + √q·Z (U uniform on [-1, 1], Z standard normal: unit
/// variance, a share q of it normal), at q = j/64. Computed once per `n` and kept. By symmetry of
/// Y, E[max] = ∫₀^∞ 1 − F(x)ⁿ − (1 − F(x))ⁿ dx (Simpson's rule), where the CDF of the sum is
/// F(x) = σ/(2h)·[G((x+h)/σ) − G((x−h)/σ)], G(t) = tΦ(t) + φ(t) (the uniform of half-width h
/// convolved with the normal of deviation σ). Checked against the exact ends: √3·(n−1)/(n+1) for
/// the uniform (the mean of the top order statistic) and E[max of n standard normals]
/// (n = 2: 1/√π; tabulated by Harter, 1961).
fn expected_max_table(n: u32) -> std::sync::Arc<[f64]> {
    use std::sync::{Arc, Mutex, OnceLock};
    static TABLES: OnceLock<Mutex<HashMap<u32, Arc<[f64]>>>> = OnceLock::new();
    let tables = TABLES.get_or_init(Default::default);
    if let Some(t) = tables.lock().map(|m| m.get(&n).cloned()).ok().flatten() {
        return t;
    }
    let table: Arc<[f64]> = (0..STRAGGLER_POINTS)
        .map(|j| expected_max(n, j as f64 / (STRAGGLER_POINTS - 1) as f64))
        .collect();
    if let Ok(mut m) = tables.lock() {
        m.insert(n, table.clone());
    }
    table
}

/// E[max of `n` iid unit-variance uniform-plus-normal sums with normal share `q` of the variance.
fn expected_max(n: u32, q: f64) -> f64 {
    let phi = |t: f64| (-0.5 * t * t).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = |t: f64| 0.5 * statrs::function::erf::erfc(-t / std::f64::consts::SQRT_2);
    let h = 3f64.sqrt() * (1.0 - q).max(0.0).sqrt();
    let sigma = q.sqrt();
    if q <= 0.0 {
        // The top of n uniforms on [-h, h] lies at h·(n−1)/(n+1) on average.
        return h * (n as f64 - 1.0) / (n as f64 + 1.0);
    }
    let f = |x: f64| -> f64 {
        if sigma < 1e-9 {
            ((x + h) / (2.0 * h)).clamp(0.0, 1.0)
        } else if h < 1e-6 * sigma {
            cdf(x / sigma)
        } else {
            let g = |t: f64| t * cdf(t) + phi(t);
            (sigma / (2.0 * h) * (g((x + h) / sigma) - g((x - h) / sigma))).clamp(0.0, 1.0)
        }
    };
    let nf = n as f64;
    let integrand = |x: f64| {
        let p = f(x);
        1.0 - p.powf(nf) - (1.0 - p).powf(nf)
    };
    // Y is within h + 9σ of 0 but for ~1e-19; 2400 Simpson intervals.
    let top = h + 9.0 * sigma;
    let m = 2400;
    let dx = top / m as f64;
    let mut sum = integrand(0.0) + integrand(top);
    for k in 1..m {
        sum += integrand(k as f64 * dx) * if k % 2 == 1 { 4.0 } else { 2.0 };
    }
    sum * dx / 3.0
}

#[cfg(test)]
mod sparse_tests {
    use super::*;

    /// The sparse dot gives `dot`'s bits, zeros and their signs included, over coefficients
    /// with runs of zeros, negative and cancelling terms, and bases with zero columns.
    #[test]
    fn sparse_dot_is_the_full_dot() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..100_000 {
            let mut c = [0.0; NB];
            let mut b = [0.0; NB];
            for j in 0..NB {
                let r = next();
                c[j] = match r % 5 {
                    0 | 1 => 0.0,
                    2 => ((r >> 8) % 1000) as f64 / 8.0,
                    3 => -(((r >> 8) % 1000) as f64) / 8.0,
                    _ => (r >> 11) as f64 / (1u64 << 53) as f64 * 1e3,
                };
                b[j] = if (r >> 3) % 4 == 0 {
                    0.0
                } else {
                    ((r >> 20) % 100_000) as f64
                };
            }
            let got = Sparse::new(&c).eval(&c, &b);
            assert_eq!(got.to_bits(), dot(&c, &b).to_bits(), "{c:?} . {b:?}");
        }
    }

    /// The rounding the op fields take is `round().max(0.0) as u64`'s.
    #[test]
    fn round_u64_is_round_then_clamp() {
        for v in [
            0.0,
            -0.0,
            0.49999999999999994,
            0.5,
            1.5,
            2.5,
            -0.5,
            -3.7,
            1e15 + 0.5,
            4.5e15,
            9.1e15,
            1e19,
            2e19,
            f64::NAN,
            f64::INFINITY,
            -1e300,
        ] {
            assert_eq!(round_u64(v), v.round().max(0.0) as u64, "{v}");
        }
    }
}

#[cfg(test)]
mod straggler_tests {
    use super::*;

    /// The table's ends against the exact values: the mean top order statistic of n uniforms,
    /// and E[max of n standard normals] (n = 2: 1/√π; n = 4, 8: Harter 1961, "Expected values
    /// of normal order statistics", Biometrika 48, table 1: 1.02938, 1.42360).
    #[test]
    fn expected_max_matches_known_values() {
        for n in [2u32, 4, 8] {
            let u = 3f64.sqrt() * (n as f64 - 1.0) / (n as f64 + 1.0);
            assert!((expected_max(n, 0.0) - u).abs() < 1e-12);
            // Just off the pure uniform the integral (kink smoothed) agrees with the end.
            assert!((expected_max(n, 1e-10) - u).abs() < 1e-4, "n {n}");
        }
        let pi = std::f64::consts::PI;
        for (n, e) in [(2u32, 1.0 / pi.sqrt()), (4, 1.029_375), (8, 1.423_600)] {
            let got = expected_max(n, 1.0);
            assert!((got - e).abs() < 2e-6, "n {n}: {got} vs {e}");
        }
        // A mix lies between the two ends (the normal's tail lifts the max above the uniform's).
        let mid = expected_max(8, 0.5);
        assert!(
            mid > expected_max(8, 0.0) && mid < expected_max(8, 1.0),
            "{mid}"
        );
    }

    /// The wait read off the table: a pure skew path waits its uniform's top order statistic,
    /// one rank or no jitter waits nothing.
    #[test]
    fn wait_of_a_path() {
        let v = crate::cost::profile::Variability {
            kernel_cv: 0.0,
            rank_skew_cv: 0.01,
            collective_cv: 0.03,
            launch_skew_us: 0.0,
            source: String::new(),
        };
        let sp = Spread {
            sum: 100.0,
            sq: 2000.0,
            launch: false,
        };
        let w = Straggler::new(&v, 8).wait(&sp);
        let expect = 100.0 * 0.01 * 3f64.sqrt() * 7.0 / 9.0;
        assert!((w - expect).abs() < 1e-9, "{w} vs {expect}");
        assert_eq!(Straggler::new(&v, 1).wait(&sp), 0.0);
        let off = crate::cost::profile::Variability {
            rank_skew_cv: 0.0,
            collective_cv: 0.0,
            ..v
        };
        assert_eq!(Straggler::new(&off, 8).wait(&sp), 0.0);
        // Kernel jitter alone: σ·E[max of 2 normals] = σ/√π.
        let k = crate::cost::profile::Variability {
            kernel_cv: 0.02,
            rank_skew_cv: 0.0,
            ..off
        };
        let w = Straggler::new(&k, 2).wait(&sp);
        let expect = 0.02 * 2000f64.sqrt() / std::f64::consts::PI.sqrt();
        assert!((w - expect).abs() < 1e-5 * expect, "{w} vs {expect}");
    }
}
