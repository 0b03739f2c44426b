//! The aggregate fast path: a decode step priced in closed form, without kernel records.
//!
//! With jitter off every rank plays the same kernels, so the timeline engine reduces to one
//! rank's max-plus recursion (stream free times, the CPU's launch clock, fork/join of the
//! auxiliary stream). The fast path keeps that recursion but plays each distinct layer once:
//! a run of identical layers is played until its state relative to the compute stream repeats,
//! then the remaining layers are added as whole-layer increments. Op costs are the cost
//! module's own laws evaluated on FLOPs and bytes that are linear in a small basis of the
//! scenario's variables (tokens, sequences, context, split-KV count, experts touched); the
//! coefficients are read off the real workload builder by probing it at a few shapes, so the
//! builder stays the one place where FLOPs and bytes are written down. Experts touched per
//! layer take their expectation n(1 - (1 - k/n)^T) instead of a seeded draw.

use crate::cost::collective;
use crate::cost::profile::CollectiveParams;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::spec::{CommPath, Proto, Scenario};
use crate::workload::op::MeasureKey;
use crate::workload::{CostFamily, Stream, Workload, SHARED_EXPERT_STREAM_TOKEN_THRESHOLD};
use nalgebra::{DMatrix, DVector};

const NB: usize = 7;
type Coef = [f64; NB];

/// The scenario variables an op's FLOPs, bytes and shapes are linear in.
#[derive(Debug, Clone, Copy)]
pub struct Vars {
    pub tokens: f64,
    pub seqs: f64,
    pub context: f64,
    pub splits: f64,
    pub touched: f64,
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

#[derive(Debug, Clone)]
struct OpT {
    kind: Kind,
    family: CostFamily,
    category: crate::category::Category,
    flops: Coef,
    bytes: Coef,
    m: Coef,
    /// Roofline law: fixed µs, µs per FLOP at full ramp, µs per byte, m_half.
    law: Option<[f64; 4]>,
    /// A measured-table key whose m (and context, for attention) follow the scenario.
    table: Option<(MeasureKey, Coef, bool)>,
}

#[derive(Debug, Clone)]
struct Segment {
    ops: Vec<OpT>,
    repeat: u32,
}

/// One regime of a pass (the op sequence is fixed within it).
#[derive(Debug, Clone)]
struct Regime {
    segments: Vec<Segment>,
}

/// A forward pass (or any workload shape) in closed form, for one model, system and profile.
#[derive(Debug, Clone)]
pub struct PassModel {
    /// Sequences of ops for T ≤ threshold (shared expert on the auxiliary stream) and above.
    low: Regime,
    high: Regime,
    threshold: f64,
    experts: Option<(f64, f64)>,
    /// Expected distinct experts touched by t tokens under the scenario's routing, for
    /// t = 0..len (the closed form is O(experts) per call, too slow for a 1 µs scenario).
    touched_by_tokens: Vec<f64>,
    routing: crate::spec::routing::Routing,
    sms: u64,
}

/// Token counts whose expected experts touched are tabulated once per pass model (a sweep's
/// batch 256 with 6 draft tokens is 1,792 tokens).
const TOUCHED_TABLE_TOKENS: usize = 4096;

/// The collective cost entries for one NCCL setting, prepared once per sweep setting.
#[derive(Debug, Clone)]
pub struct Collectives {
    all_reduce: Vec<CollectiveParams>,
    all_gather: Vec<CollectiveParams>,
    ranks: u32,
}

impl Collectives {
    pub fn new(s: &Scenario, p: &CalibrationProfile) -> Result<Self> {
        let path = s.comm_path();
        let mut proto = s.nccl.proto;
        // As cost::price: LL128 off NVLink falls back to NCCL's own choice.
        if proto == Proto::Ll128 && path != CommPath::Nvlink {
            proto = Proto::Auto;
        }
        let get = |f: CostFamily| -> Result<Vec<CollectiveParams>> {
            let c: Vec<CollectiveParams> =
                collective::candidates(&p.collectives, f, path, s.nccl.algo, proto)
                    .into_iter()
                    .cloned()
                    .collect();
            if c.is_empty() && s.tp > 1 {
                return Err(Error::field(
                    &p.path,
                    "collectives",
                    format!(
                        "no entry for {} on path '{}' with algo '{}' and proto '{}'",
                        f.key(),
                        path.name(),
                        s.nccl.algo,
                        proto
                    ),
                ));
            }
            Ok(c)
        };
        Ok(Collectives {
            all_reduce: get(CostFamily::AllReduce)?,
            all_gather: get(CostFamily::AllGather)?,
            ranks: s.tp,
        })
    }

    fn time_us(&self, f: CostFamily, bytes: u64) -> f64 {
        let c = if f == CostFamily::AllGather {
            &self.all_gather
        } else {
            &self.all_reduce
        };
        c.iter()
            .map(|p| collective::time_us(p, f, self.ranks, bytes))
            .fold(f64::INFINITY, f64::min)
    }
}

/// Launch parameters of one CUDA-graph setting.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    start: f64,
    gap: f64,
    launch: f64,
    first_collective: f64,
    graphs: bool,
}

impl Launch {
    pub fn new(p: &CalibrationProfile, cuda_graphs: bool) -> Self {
        let l = &p.launch;
        if cuda_graphs {
            Launch {
                start: l.graph_launch_us,
                gap: l.graph_kernel_gap_us,
                launch: 0.0,
                first_collective: l.graph_first_collective_us,
                graphs: true,
            }
        } else {
            Launch {
                start: 0.0,
                gap: l.eager_kernel_gap_us,
                launch: l.eager_launch_us,
                first_collective: 0.0,
                graphs: false,
            }
        }
    }
}

/// One rank's engine state (every rank is the same with jitter off).
#[derive(Debug, Clone, Copy)]
pub struct State {
    /// Busy time per category (kernel durations on this rank, every stream), µs.
    pub busy: [f64; crate::category::Category::ALL.len()],
    main: f64,
    aux: f64,
    cpu: f64,
    first_collective: bool,
    first_start: f64,
}

impl State {
    pub fn new(l: &Launch) -> Self {
        State {
            busy: [0.0; crate::category::Category::ALL.len()],
            main: l.start,
            aux: l.start,
            cpu: l.start,
            first_collective: l.graphs,
            first_start: f64::NAN,
        }
    }
    /// The step window: first kernel's start to the last kernel's end.
    pub fn window_us(&self) -> f64 {
        self.main.max(self.aux) - self.first_start
    }
}

const PROBES_LOW: [(u32, u32, u64); 10] = [
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
];
const PROBES_HIGH: [(u32, u32, u64); 10] = [
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
];

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
/// sequences are identical. Returns (op index ranges, repeat) with the representative layer.
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

fn law_of(op: &crate::workload::Op, s: &Scenario, p: &CalibrationProfile) -> Option<[f64; 4]> {
    let k = p.kernel(op.family)?;
    let gpu = &s.system.gpu;
    let tflops = if op.family.uses_fp8_peak() {
        gpu.fp8_tflops
    } else {
        gpu.bf16_tflops
    };
    Some([
        k.fixed_us,
        1.0 / (tflops * 1e6 * k.compute_efficiency),
        1.0 / (gpu.memory_bandwidth_gbps * 1e3 * k.mem_efficiency),
        k.m_half,
    ])
}

fn law_us(l: &[f64; 4], flops: f64, bytes: f64, m: f64) -> f64 {
    let ramp = if l[3] > 0.0 { m / (m + l[3]) } else { 1.0 };
    let compute = if flops > 0.0 {
        flops * l[1] / ramp.max(1e-6)
    } else {
        0.0
    };
    l[0] + compute.max(bytes * l[2])
}

impl PassModel {
    /// Probes `build(scenario with batch and context set, queries per sequence)` at a few
    /// shapes per regime and fits each op's FLOPs, bytes and M on the basis.
    pub fn fit(
        s: &Scenario,
        p: &CalibrationProfile,
        build: &dyn Fn(&Scenario, u32) -> Workload,
    ) -> Result<Self> {
        let sms = s.system.gpu.sms as u64;
        let experts = s
            .model
            .moe
            .as_ref()
            .map(|m| (m.n_routed_experts as f64, m.top_k as f64));
        let touched_by_tokens: Vec<f64> = match experts {
            Some((n, k)) => (0..=TOUCHED_TABLE_TOKENS as u64)
                .map(|t| {
                    crate::workload::expected_distinct_experts(
                        &s.routing,
                        t,
                        n as usize,
                        k as usize,
                    )
                })
                .collect(),
            None => Vec::new(),
        };
        let threshold = SHARED_EXPERT_STREAM_TOKEN_THRESHOLD as f64;
        let regime = |probes: &[(u32, u32, u64)]| -> Result<Regime> {
            let mut ws = Vec::new();
            let mut vars = Vec::new();
            for &(b, q, c) in probes {
                let mut ps = s.clone();
                ps.batch = b;
                ps.context = c.min(s.model.max_position_embeddings as u64);
                let w = build(&ps, q);
                vars.push((b, q, ps.context));
                ws.push(w);
            }
            let all_segs: Vec<_> = ws.iter().map(segment).collect();
            let segs = all_segs[0].clone();
            for other in &all_segs[1..] {
                if other.len() != segs.len()
                    || other
                        .iter()
                        .zip(&segs)
                        .any(|(a, b)| a.0.len() != b.0.len() || a.1 != b.1)
                {
                    return Err(Error::Other(
                        "fast path: the workload's op sequence changes within a regime".into(),
                    ));
                }
            }
            let mut segments = Vec::new();
            for (si, (idx, repeat, layer)) in segs.iter().enumerate() {
                let mut ops = Vec::new();
                for (j, &i) in idx.iter().enumerate() {
                    let op0 = &ws[0].ops[i];
                    let rows: Vec<Coef> = ws
                        .iter()
                        .zip(&vars)
                        .map(|(w, &(b, q, c))| {
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
                            }
                            .basis()
                        })
                        .collect();
                    let fit_field = |get: &dyn Fn(&crate::workload::Op) -> f64| -> Result<Coef> {
                        let ys: Vec<f64> = ws
                            .iter()
                            .zip(&all_segs)
                            .map(|(w, sg)| get(&w.ops[sg[si].0[j]]))
                            .collect();
                        fit(&rows, &ys).ok_or_else(|| {
                            Error::Other(format!(
                                "fast path: {} of op {} is not linear in the basis",
                                "a field", op0.name
                            ))
                        })
                    };
                    let kind = match op0.family {
                        CostFamily::Fork => Kind::Fork,
                        CostFamily::Join => Kind::Join,
                        f if f.is_collective() => Kind::Collective,
                        _ => Kind::Kernel {
                            aux: op0.stream == Stream::Aux,
                        },
                    };
                    let flops = fit_field(&|o| o.flops)?;
                    let bytes = if kind == Kind::Collective {
                        fit_field(&|o| o.message_bytes as f64)?
                    } else {
                        fit_field(&|o| o.bytes)?
                    };
                    let m = fit_field(&|o| o.shape.m as f64)?;
                    let table = match (&p.table, &op0.measure) {
                        (Some(_), Some(mk)) => {
                            let km = fit_field(&|o| o.measure.map_or(0.0, |k| k.m as f64))?;
                            Some((*mk, km, mk.context > 0))
                        }
                        _ => None,
                    };
                    let law = match kind {
                        Kind::Kernel { .. } => {
                            let l = law_of(op0, s, p);
                            if l.is_none() && table.is_none() {
                                return Err(Error::field(
                                    &p.path,
                                    format!("kernels.{}", op0.family.key()),
                                    format!("missing: op '{}' needs this kernel family", op0.name),
                                ));
                            }
                            l
                        }
                        _ => None,
                    };
                    ops.push(OpT {
                        kind,
                        family: op0.family,
                        category: op0.category,
                        flops,
                        bytes,
                        m,
                        law,
                        table,
                    });
                }
                segments.push(Segment {
                    ops,
                    repeat: *repeat,
                });
            }
            Ok(Regime { segments })
        };
        Ok(PassModel {
            low: regime(&PROBES_LOW)?,
            high: regime(&PROBES_HIGH)?,
            threshold,
            experts,
            touched_by_tokens,
            routing: s.routing.clone(),
            sms,
        })
    }

    /// (ops, repeat) of each segment of the low-token regime: how much the fast path plays.
    pub fn shape(&self) -> Vec<(usize, u32)> {
        self.low
            .segments
            .iter()
            .map(|s| (s.ops.len(), s.repeat))
            .collect()
    }

    pub fn vars(&self, batch: u32, queries: u32, context: u64) -> Vars {
        let t = batch as f64 * queries.max(1) as f64;
        let touched = match self.experts {
            Some((n, k)) => match self.touched_by_tokens.get(t as usize) {
                Some(&x) => x,
                None => crate::workload::expected_distinct_experts(
                    &self.routing,
                    t as u64,
                    n as usize,
                    k as usize,
                ),
            },
            None => 0.0,
        };
        Vars {
            tokens: t,
            seqs: batch as f64,
            context: context as f64,
            splits: splits(context, self.sms) as f64,
            touched,
        }
    }

    /// Plays this pass on `st` (continuing from where it is) with the scenario's variables.
    pub fn play(
        &self,
        st: &mut State,
        v: &Vars,
        launch: &Launch,
        coll: &Collectives,
        profile: &CalibrationProfile,
        repeat: u32,
    ) {
        let regime = if v.tokens <= self.threshold {
            &self.low
        } else {
            &self.high
        };
        let x = v.basis();
        let mut durs = [0.0f64; 64];
        let mut heap: Vec<f64> = Vec::new();
        // The whole pass may itself repeat (identical draft passes): treat it as a segment run.
        let mut pass_prev: Option<(State, [f64; 3])> = None;
        for r in 0..repeat {
            for seg in &regime.segments {
                let n = seg.ops.len();
                let d: &mut [f64] = if n <= durs.len() {
                    &mut durs[..n]
                } else {
                    heap.resize(n, 0.0);
                    &mut heap[..]
                };
                // Every repetition of the segment costs the same: count its busy time once.
                let reps = seg.repeat as f64 * if r == 0 { 1.0 } else { 0.0 };
                for (i, op) in seg.ops.iter().enumerate() {
                    d[i] = op_us(op, &x, v, coll, profile, seg.ops.get(i + 1));
                    st.busy[op.category.index()] += d[i] * reps * repeat as f64;
                }
                let mut prev: Option<[f64; 3]> = None;
                let mut prev_main = 0.0;
                let mut k = 0;
                while k < seg.repeat {
                    for (op, &dur) in seg.ops.iter().zip(d.iter()) {
                        step(st, op.kind, dur, launch);
                    }
                    k += 1;
                    let rel = relative(st, launch);
                    if let Some(p) = prev {
                        if (rel[0] - p[0]).abs() < 1e-9
                            && (rel[1] - p[1]).abs() < 1e-9
                            && rel[2] == p[2]
                        {
                            // Steady state: every further layer adds the same increment.
                            let inc = (st.main - prev_main) * (seg.repeat - k) as f64;
                            st.main += inc;
                            st.aux += inc;
                            st.cpu += inc;
                            break;
                        }
                    }
                    prev = Some(rel);
                    prev_main = st.main;
                }
            }
            let rel = relative(st, launch);
            if let Some((ps, p)) = pass_prev {
                if (rel[0] - p[0]).abs() < 1e-9 && (rel[1] - p[1]).abs() < 1e-9 && rel[2] == p[2] {
                    let inc = (st.main - ps.main) * (repeat - r - 1) as f64;
                    st.main += inc;
                    st.aux += inc;
                    st.cpu += inc;
                    return;
                }
            }
            pass_prev = Some((*st, rel));
        }
    }
}

fn op_us(
    op: &OpT,
    x: &Coef,
    v: &Vars,
    coll: &Collectives,
    profile: &CalibrationProfile,
    next: Option<&OpT>,
) -> f64 {
    match op.kind {
        Kind::Fork | Kind::Join => 0.0,
        Kind::Collective => {
            if coll.ranks <= 1 {
                return 0.0;
            }
            coll.time_us(op.family, dot(&op.bytes, x).round() as u64)
        }
        Kind::Kernel { .. } => {
            if let (Some((mk, km, with_ctx)), Some(table)) = (&op.table, &profile.table) {
                let mut key = *mk;
                key.m = dot(km, x).round() as u64;
                if *with_ctx {
                    key.context = v.context as u64;
                    key.batch = key.m;
                }
                if let Some(tp) = table.price(&key) {
                    let mut us = tp.us;
                    if key.includes_next {
                        if let Some(l) = next.and_then(|n| n.law.map(|l| (n, l))) {
                            let (n, l) = l;
                            let nx = law_us(&l, dot(&n.flops, x), dot(&n.bytes, x), dot(&n.m, x));
                            us = (us - nx).max(0.5 * us);
                        }
                    }
                    return us;
                }
            }
            match &op.law {
                Some(l) => law_us(l, dot(&op.flops, x), dot(&op.bytes, x), dot(&op.m, x)),
                None => 0.0,
            }
        }
    }
}

/// The state relative to the compute stream; once it repeats, so does every later layer.
/// A stream behind the compute stream is left out (see below).
/// Under CUDA graphs the CPU clock never advances, so once it is behind both streams it can
/// never bind again and is left out.
#[inline]
fn relative(st: &State, l: &Launch) -> [f64; 3] {
    let cpu = if l.launch == 0.0 && st.cpu <= st.main.min(st.aux) {
        f64::MIN
    } else {
        st.cpu - st.main
    };
    // The auxiliary stream only matters through a fork or the step's end, both of which take
    // the later of the two streams: behind the compute stream, it is irrelevant.
    let aux = if st.aux <= st.main {
        f64::MIN
    } else {
        st.aux - st.main
    };
    [aux, cpu, st.first_collective as u8 as f64]
}

/// One op of the engine's recursion on a single rank with jitter off.
#[inline]
fn step(st: &mut State, kind: Kind, dur: f64, l: &Launch) {
    match kind {
        Kind::Fork => st.aux = st.aux.max(st.main),
        Kind::Join => st.main = st.main.max(st.aux),
        Kind::Collective => {
            st.cpu += l.launch;
            let extra = if st.first_collective {
                l.first_collective
            } else {
                0.0
            };
            st.first_collective = false;
            let a = (st.main + l.gap + extra).max(st.cpu);
            if st.first_start.is_nan() {
                st.first_start = a;
            }
            st.main = a + dur;
        }
        Kind::Kernel { aux } => {
            st.cpu += l.launch;
            let free = if aux { &mut st.aux } else { &mut st.main };
            let s = (*free + l.gap).max(st.cpu);
            *free = s + dur;
            if st.first_start.is_nan() {
                st.first_start = s;
            }
        }
    }
}

/// Least squares through the SVD (rank-deficient columns get the minimum-norm solution);
/// None when the fit leaves a residual, i.e. the field is not linear in the basis.
fn fit(rows: &[Coef], ys: &[f64]) -> Option<Coef> {
    let n = rows.len();
    // Scale columns so that large products (tokens × context) do not swamp the SVD.
    let mut scale = [0.0f64; NB];
    for r in rows {
        for (c, v) in r.iter().enumerate() {
            scale[c] = f64::max(scale[c], v.abs());
        }
    }
    let a = DMatrix::from_fn(n, NB, |i, j| {
        if scale[j] > 0.0 {
            rows[i][j] / scale[j]
        } else {
            0.0
        }
    });
    let ymax = ys.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if ymax == 0.0 {
        return Some([0.0; NB]);
    }
    let b = DVector::from_iterator(n, ys.iter().map(|v| v / ymax));
    let svd = a.clone().svd(true, true);
    let sol = svd.solve(&b, 1e-10).ok()?;
    let resid = (&a * &sol - &b).amax();
    if resid > 1e-7 {
        return None;
    }
    let mut out = [0.0; NB];
    for j in 0..NB {
        out[j] = if scale[j] > 0.0 {
            sol[j] * ymax / scale[j]
        } else {
            0.0
        };
    }
    Some(out)
}

/// A scenario family in closed form: the plain step, and speculative steps at any k.
#[derive(Debug, Clone)]
pub struct FastScenario {
    pub profile: CalibrationProfile,
    target: PassModel,
    verify: Option<PassModel>,
    draft_first: Option<PassModel>,
    draft_rest: Option<PassModel>,
    host_us: f64,
    pass_gap_us: f64,
}

impl FastScenario {
    /// Fits the plain step of `s`; with `draft`, also the verify pass and the draft passes.
    pub fn new(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&super::draft::Draft>,
    ) -> Result<Self> {
        let target = PassModel::fit(s, p, &|ps, q| crate::workload::build_pass(ps, q))?;
        let (mut verify, mut draft_first, mut draft_rest) = (None, None, None);
        let (mut host_us, mut pass_gap_us) = (0.0, 0.0);
        if let Some(d) = draft {
            let sd = p.spec_decode.as_ref().ok_or_else(|| {
                Error::field(
                    &p.path,
                    "spec_decode",
                    "missing: needed for draft tokens > 0",
                )
            })?;
            host_us = sd.exposed_host_us;
            pass_gap_us = sd.pass_gap_us;
            verify = Some(PassModel::fit(s, p, &|ps, q| {
                super::spec_decode::verify_workload(ps, q.max(1) - 1)
            })?);
            let ds = d.scenario(s)?;
            let aux = match d.method {
                super::draft::Method::Eagle3 => d.limits.aux_hidden_states as u64,
                _ => 0,
            };
            draft_first = Some(PassModel::fit(&ds, p, &|ps, q| {
                let mut w = Workload {
                    ops: super::draft::proposer_bookkeeping(
                        ps.batch as u64,
                        q.max(1) as u64 - 1,
                        ps.model.hidden as u64,
                        aux,
                    ),
                    experts_touched: Vec::new(),
                    routing: Default::default(),
                };
                let pass = d.pass(ps, q, 0);
                w.ops.extend(pass.ops);
                w.experts_touched = pass.experts_touched;
                w.routing = pass.routing;
                w
            })?);
            draft_rest = Some(PassModel::fit(&ds, p, &|ps, q| d.pass(ps, q, 1))?);
        }
        Ok(FastScenario {
            profile: p.clone(),
            target,
            verify,
            draft_first,
            draft_rest,
            host_us,
            pass_gap_us,
        })
    }

    /// The plain step's time (µs) at this batch and context.
    pub fn step_us(&self, batch: u32, context: u64, launch: &Launch, coll: &Collectives) -> f64 {
        let mut st = State::new(launch);
        let v = self.target.vars(batch, 1, context);
        self.target
            .play(&mut st, &v, launch, coll, &self.profile, 1);
        st.window_us()
    }

    /// Segment shapes (ops, repeat) of the target, verify, first and later draft passes.
    pub fn shapes(&self) -> Vec<Vec<(usize, u32)>> {
        [
            Some(&self.target),
            self.verify.as_ref(),
            self.draft_first.as_ref(),
            self.draft_rest.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|m| m.shape())
        .collect()
    }

    /// The plain step's time and its busy time per category.
    pub fn step_us_busy(
        &self,
        batch: u32,
        context: u64,
        launch: &Launch,
        coll: &Collectives,
    ) -> (f64, [f64; crate::category::Category::ALL.len()]) {
        let mut st = State::new(launch);
        let v = self.target.vars(batch, 1, context);
        self.target
            .play(&mut st, &v, launch, coll, &self.profile, 1);
        (st.window_us(), st.busy)
    }

    /// [`FastScenario::spec_step_us`] with the busy time per category of both sides.
    pub fn spec_step_us_busy(
        &self,
        batch: u32,
        context: u64,
        k: u32,
        launch: &Launch,
        coll: &Collectives,
    ) -> Option<((f64, f64, f64), [f64; crate::category::Category::ALL.len()])> {
        let (verify, first, rest) = (
            self.verify.as_ref()?,
            self.draft_first.as_ref()?,
            self.draft_rest.as_ref()?,
        );
        let mut st = State::new(launch);
        verify.play(
            &mut st,
            &verify.vars(batch, k + 1, context),
            launch,
            coll,
            &self.profile,
            1,
        );
        let verify_us = st.window_us();
        let mut busy = st.busy;
        let mut st = State::new(launch);
        first.play(
            &mut st,
            &first.vars(batch, k + 1, context),
            launch,
            coll,
            &self.profile,
            1,
        );
        if k > 1 {
            rest.play(
                &mut st,
                &rest.vars(batch, 1, context),
                launch,
                coll,
                &self.profile,
                k - 1,
            );
        }
        for (b, d) in busy.iter_mut().zip(st.busy) {
            *b += d;
        }
        let draft_us = st.window_us() + k as f64 * self.pass_gap_us;
        Some((
            (draft_us, verify_us, draft_us + verify_us + self.host_us),
            busy,
        ))
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
        let (verify, first, rest) = (
            self.verify.as_ref()?,
            self.draft_first.as_ref()?,
            self.draft_rest.as_ref()?,
        );
        let mut st = State::new(launch);
        verify.play(
            &mut st,
            &verify.vars(batch, k + 1, context),
            launch,
            coll,
            &self.profile,
            1,
        );
        let verify_us = st.window_us();
        let mut st = State::new(launch);
        first.play(
            &mut st,
            &first.vars(batch, k + 1, context),
            launch,
            coll,
            &self.profile,
            1,
        );
        if k > 1 {
            rest.play(
                &mut st,
                &rest.vars(batch, 1, context),
                launch,
                coll,
                &self.profile,
                k - 1,
            );
        }
        let draft_us = st.window_us() + k as f64 * self.pass_gap_us;
        Some((draft_us, verify_us, draft_us + verify_us + self.host_us))
    }
}
