//! Op shapes in closed form: the basis of scenario variables, each op's coefficients read
//! off the workload builder by probing it, and the regimes (runs of identical layers) of a pass.

use super::ep::EpShape;
use super::{
    cost, Busy, CalibrationProfile, Category, Coef, CommKnobs, CostFamily, DMatrix, DVector,
    DistinctExperts, Error, NcclSettings, Op, Result, Scenario, Stream, Workload, NB, NCAT,
    SHARED_EXPERT_STREAM_TOKEN_THRESHOLD,
};
use crate::scenario::Layout;

#[derive(Debug, Clone, Copy)]
pub(super) struct Vars {
    pub(super) tokens: f64,
    pub(super) seqs: f64,
    pub(super) context: f64,
    pub(super) splits: f64,
    pub(super) touched: f64,
    /// Rows after CUDA-graph padding (`scenario::cudagraph`; = tokens when not padded).
    pub(super) padded: f64,
    /// One rank's slice of the padded rows under an expert-parallel all-to-all
    /// (⌈padded / TP⌉: what it dispatches; 0 when the pass has no all-to-all).
    pub(super) slice: f64,
    /// Expert parallelism: the rounding of the mean rows per EP rank (the expert GEMMs' m,
    /// `EpShape::rounding`); 0 where that mean is always whole.
    pub(super) rounding: f64,
}

/// The basis's columns, each a product of [`Vars`]: a column is named here, and its place in a
/// [`Coef`] is its place in [`Col::ALL`] (checked below), so no list of places can drift from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Col {
    One,
    Tokens,
    Seqs,
    TokensContext,
    SeqsContext,
    TokensSplits,
    /// The experts touched.
    Touched,
    Context,
    Splits,
    Padded,
    Slice,
    /// The rounding of the mean rows per expert-parallel rank: the last column (a fit without
    /// it drops the last column).
    Rounding,
}

impl Col {
    /// Every column, in the basis's order.
    pub(super) const ALL: [Col; NB] = [
        Col::One,
        Col::Tokens,
        Col::Seqs,
        Col::TokensContext,
        Col::SeqsContext,
        Col::TokensSplits,
        Col::Touched,
        Col::Context,
        Col::Splits,
        Col::Padded,
        Col::Slice,
        Col::Rounding,
    ];

    /// The column's place in a [`Coef`].
    pub(super) const fn at(self) -> usize {
        self as usize
    }

    /// Whether the column carries the context (directly or through the split-KV count).
    pub(super) const fn carries_context(self) -> bool {
        matches!(
            self,
            Col::TokensContext | Col::SeqsContext | Col::TokensSplits | Col::Context | Col::Splits
        )
    }
}

// A column's place is its place in `Col::ALL`, and the rounding column is the last.
const _: () = {
    let mut i = 0;
    while i < NB {
        assert!(Col::ALL[i].at() == i);
        i += 1;
    }
    assert!(Col::Rounding.at() == NB - 1);
};

impl Vars {
    pub(super) fn basis(&self) -> Coef {
        Col::ALL.map(|c| match c {
            Col::One => 1.0,
            Col::Tokens => self.tokens,
            Col::Seqs => self.seqs,
            Col::TokensContext => self.tokens * self.context,
            Col::SeqsContext => self.seqs * self.context,
            Col::TokensSplits => self.tokens * self.splits,
            Col::Touched => self.touched,
            Col::Context => self.context,
            Col::Splits => self.splits,
            Col::Padded => self.padded,
            Col::Slice => self.slice,
            Col::Rounding => self.rounding,
        })
    }
}

pub(super) fn dot(a: &Coef, b: &Coef) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// `loaded`: an expert-parallel op whose slowest rank is priced into its duration (`ep`):
    /// its jitter is in that expectation, so it adds nothing to the straggler spread.
    Kernel {
        aux: bool,
        loaded: bool,
    },
    /// `wide`: the collective syncs the whole expert-parallel group (data-parallel attention's
    /// dispatch and combine), not one tensor-parallel group.
    Collective {
        wide: bool,
    },
    Fork,
    Join,
}

/// What an op's price depends on, hence where it is memoised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Group {
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
pub(super) struct Fields {
    pub(super) flops: Coef,
    pub(super) bytes: Coef,
    pub(super) message_bytes: Coef,
    pub(super) shape: [Coef; 4],
    /// m, n, k, batch, context of the measurement-table key.
    pub(super) measure: Option<[Coef; 5]>,
}

impl Fields {
    pub(super) fn all(&self) -> impl Iterator<Item = &Coef> {
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
pub(super) struct Sparse {
    pub(super) n: u8,
    /// Basis columns read (bit j for column j).
    pub(super) cols: u16,
    pub(super) idx: [u8; NB],
    pub(super) val: [f64; NB],
}

impl Sparse {
    pub(super) fn new(c: &Coef) -> Self {
        let mut s = Sparse {
            n: 0,
            cols: 0,
            idx: [0; NB],
            val: [0.0; NB],
        };
        for (j, &v) in c.iter().enumerate() {
            if v != 0.0 {
                s.idx[s.n as usize] = j as u8;
                s.val[s.n as usize] = v;
                s.cols |= 1 << j;
                s.n += 1;
            }
        }
        s
    }

    /// `dot(full, x)` for `full` the coefficients this was made from (x finite, as the basis
    /// of counts always is).
    #[inline]
    pub(super) fn eval(&self, full: &Coef, x: &Coef) -> f64 {
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
pub(super) struct OpT {
    pub(super) kind: Kind,
    pub(super) group: Group,
    pub(super) category: Category,
    /// The representative op (name, kernel, family, stream, weights, table key): the numeric
    /// fields are overwritten from `fields` before pricing.
    pub(super) template: Op,
    pub(super) fields: Fields,
    /// `fields` as nonzero coefficients: flops, bytes, message bytes, shape (4), table key (5;
    /// none without a key).
    pub(super) sparse: [Sparse; 12],
    /// Expert parallelism: the op's work follows its rank's share of the routed tokens
    /// (`Op::rank_scale` in the timeline), so the slowest rank sets its time (`ep`).
    pub(super) loaded: bool,
    /// The expert GEMMs' `shape.batch` under expert parallelism is the mean over the EP ranks
    /// of the experts each holds with tokens, rounded (`workload::parallel`): it is fitted as
    /// the sum over ranks (linear in the experts touched) and divided by this before rounding
    /// (1: the field as fitted).
    pub(super) batch_div: f64,
}

/// `v.round().max(0.0) as u64`, bit for bit, without the libm `round` call (it runs a dozen
/// times per op priced): truncate, then add one from a fractional part of a half up. Exact for
/// v below 2^52 (the fraction is exact) and above (v is an integer; past u64 it saturates, as the
/// cast does); NaN and negatives give 0.
#[inline]
pub(super) fn round_u64(v: f64) -> u64 {
    let t = v as u64;
    t.saturating_add((v - t as f64 >= 0.5) as u64)
}

impl OpT {
    pub(super) fn instantiate(&self, x: &Coef) -> Op {
        let mut op = self.template.clone();
        self.instantiate_into(x, &mut op);
        op
    }

    /// Sets `op`'s numeric fields (an instance of this op's template) at basis `x`: the names
    /// and table keys it shares with the template are left as they are (no allocation).
    pub(super) fn instantiate_into(&self, x: &Coef, op: &mut Op) {
        self.instantiate_changed(x, u16::MAX, op)
    }

    /// [`OpT::instantiate_into`] for an `op` last set at a basis that differs from `x` only in
    /// the columns of `changed` (bit j: column j): fields that read none of them keep their
    /// value. A float field whose value was zero is evaluated anyway (a zero sum's sign comes
    /// from the full dot over every column); integer fields round either zero to 0.
    pub(super) fn instantiate_changed(&self, x: &Coef, changed: u16, op: &mut Op) {
        let sp = &self.sparse;
        let f = |i: usize, c: &Coef| sp[i].eval(c, x);
        let moved = |i: usize| sp[i].cols & changed != 0;
        if moved(0) || op.flops == 0.0 {
            op.flops = f(0, &self.fields.flops);
        }
        if moved(1) || op.bytes == 0.0 {
            op.bytes = f(1, &self.fields.bytes);
        }
        let u = |i: usize, c: &Coef, v: &mut u64| {
            if moved(i) {
                *v = round_u64(f(i, c));
            }
        };
        u(2, &self.fields.message_bytes, &mut op.message_bytes);
        let s = &self.fields.shape;
        u(3, &s[0], &mut op.shape.m);
        u(4, &s[1], &mut op.shape.n);
        u(5, &s[2], &mut op.shape.k);
        if moved(6) {
            op.shape.batch = round_u64(f(6, &s[3]) / self.batch_div);
            if self.batch_div != 1.0 {
                // An expert GEMM under expert parallelism: at least one expert with tokens
                // (`parallel::expert_parallel`).
                op.shape.batch = op.shape.batch.max(1);
            }
        }
        if let (Some(mk), Some(c)) = (op.measure.as_mut(), &self.fields.measure) {
            u(7, &c[0], &mut mk.m);
            u(8, &c[1], &mut mk.n);
            u(9, &c[2], &mut mk.k);
            u(10, &c[3], &mut mk.batch);
            u(11, &c[4], &mut mk.context);
        }
    }

    pub(super) fn sparse_of(fields: &Fields) -> [Sparse; 12] {
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
pub(super) struct Segment {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) repeat: u32,
}

/// One regime of a pass (the op sequence is fixed within it).
#[derive(Debug, Clone)]
pub(super) struct Regime {
    pub(super) ops: Vec<OpT>,
    /// `ops[i].kind`, packed: the recursion walks this, not the (large) ops.
    pub(super) kinds: Vec<Kind>,
    /// For each op, the end of the run of kernels on its stream that it starts within its
    /// segment (`i + 1` for an op that is not such a kernel): the recursion plays a run of
    /// kernels in one tight loop (`replay::play_regime`).
    pub(super) run_end: Vec<u32>,
    pub(super) segments: Vec<Segment>,
    /// Ops priced together per group, in program order: (op, kept). An op whose price reads
    /// its successor (a table entry that includes the next kernel, attention's split-KV
    /// reduce) is followed by it, priced and dropped, as `cost::price` sees the real sequence.
    pub(super) tokens_layout: Vec<(usize, bool)>,
    pub(super) context_layout: Vec<(usize, bool)>,
    /// Kept ops of the context layout, and the collectives.
    pub(super) context_ops: Vec<usize>,
    /// For each of `context_ops`, its price's position among the kept ops of `context_layout`:
    /// the layout prices each distinct op once (every layer's attention has the same shape, and
    /// the context's prices are the sweep's per-row cost).
    pub(super) context_from: Vec<usize>,
    /// For each of `context_ops`, its category's index and its segment's repeat (busy time).
    pub(super) context_busy: Vec<(usize, f64)>,
    pub(super) collective_ops: Vec<usize>,
}

/// A forward pass (or any workload shape) in closed form, for one model, system and profile.
#[derive(Debug, Clone)]
pub(super) struct PassModel {
    /// Sequences of ops for T ≤ threshold (shared expert on the auxiliary stream) and above.
    pub(super) low: Regime,
    pub(super) high: Regime,
    pub(super) threshold: f64,
    /// Expected distinct experts touched per MoE layer under the scenario's routing.
    pub(super) experts: Option<DistinctExperts>,
    pub(super) sms: u64,
    /// This pass's slot in the memo.
    pub(super) slot: usize,
    /// The pass is a verify pass (padded to the sizes adjusted for k+1 queries), else padded
    /// like a decode step of its own token count.
    pub(super) verify: bool,
    /// The scenario's capture sizes.
    pub(super) sizes: std::sync::Arc<crate::scenario::cudagraph::CaptureSizes>,
    /// Expert parallelism (`--ep` or `--dp`), if any.
    pub(super) ep: Option<EpShape>,
    /// A pass without expert parallelism that runs on one DP rank's share of the batch (a
    /// dense drafter under data-parallel attention: `Drafter::scenario`): the DP size the
    /// batch is divided by for its shapes; 1 otherwise.
    pub(super) dp_share: u32,
    /// Per regime (low, high): an earlier pass's slot whose regime prices the same context ops
    /// (a pipeline's stages each hold layers of the same attention), whose context prices this
    /// one takes rather than pricing them again.
    pub(super) context_twin: [Option<usize>; 2],
}

/// One probe: (batch, tokens per sequence, context).
pub(super) type Probe = (u32, u32, u64);

pub(super) const PROBES_LOW: [(u32, u32, u64); 14] = [
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
pub(super) const PROBES_HIGH: [(u32, u32, u64); 14] = [
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

/// Probes made without CUDA graphs where expert parallelism rounds the expert kernels' rows
/// (`EpShape::rounds`): odd row counts in each regime (the capture sizes are mostly even).
pub(super) const PROBES_ODD_LOW: [(u32, u32, u64); 4] =
    [(3, 1, 2048), (45, 1, 5000), (13, 3, 700), (127, 1, 30_000)];
pub(super) const PROBES_ODD_HIGH: [(u32, u32, u64); 4] = [
    (1001, 1, 2048),
    (301, 3, 4096),
    (777, 1, 20_000),
    (257, 1, 1024),
];

/// The padding rule of a pass (as `workload::build_verify` / `build_pass` apply it).
pub(super) fn pad_rule(verify: bool, q: u32) -> crate::scenario::cudagraph::PadRule {
    use crate::scenario::cudagraph::PadRule;
    if verify {
        PadRule::Uniform { q }
    } else {
        PadRule::Decode
    }
}

/// TRITON_MLA's split count, as `StepShape::kv_splits`.
pub(super) fn splits(context: u64, sms: u64) -> u64 {
    (context / 512)
        .max(1)
        .next_power_of_two()
        .min(2 * sms)
        .max(1)
}

pub(super) fn layer_signature<'a>(
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
pub(super) fn segment(w: &Workload) -> Vec<(Vec<usize>, u32, i32)> {
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
///
/// The experts touched saturate at the model's expert count once a step has a few hundred
/// tokens, so in the high regime's probes their column is nearly the constant column: a
/// minimum-norm solution then spreads a constant field (a norm's width) over both, and the
/// field moves with the touched count wherever it is evaluated off the probes. Each field is
/// therefore fitted without that column first, and with it only when it does not fit exactly
/// without (the expert GEMMs' weight bytes).
///
/// The rounding column (`Vars::rounding`) is likewise tried last: only the fields written from
/// the rounded mean rows per expert-parallel rank need it. Where no probe has a rounding (every
/// layout whose mean rows are whole), it is left out of the matrices altogether, so that their
/// fits are the very numbers they were before the column existed.
pub(super) struct Fitter {
    pub(super) a: DMatrix<f64>,
    pub(super) svd: nalgebra::linalg::SVD<f64, nalgebra::Dyn, nalgebra::Dyn>,
    /// `a` with the touched (and rounding) columns zeroed, and its SVD.
    untouched: (
        DMatrix<f64>,
        nalgebra::linalg::SVD<f64, nalgebra::Dyn, nalgebra::Dyn>,
    ),
    /// `a` with the rounding column zeroed, and its SVD (None: no rounding column).
    unrounded: Option<(
        DMatrix<f64>,
        nalgebra::linalg::SVD<f64, nalgebra::Dyn, nalgebra::Dyn>,
    )>,
    pub(super) scale: Coef,
}

/// The basis column of the experts touched (`Vars::basis`).
const TOUCHED_COL: usize = Col::Touched.at();
/// The basis column of the rounding of the mean rows per expert-parallel rank (the last).
const ROUNDING_COL: usize = Col::Rounding.at();

impl Fitter {
    pub(super) fn new(rows: &[Coef]) -> Self {
        // Scale columns so that large products (tokens × context) do not swamp the SVD.
        let mut scale = [0.0f64; NB];
        for r in rows {
            for (c, v) in r.iter().enumerate() {
                scale[c] = f64::max(scale[c], v.abs());
            }
        }
        let rounding = scale[ROUNDING_COL] > 0.0;
        let cols = if rounding { NB } else { ROUNDING_COL };
        let a = DMatrix::from_fn(rows.len(), cols, |i, j| {
            if scale[j] > 0.0 {
                rows[i][j] / scale[j]
            } else {
                0.0
            }
        });
        let svd = a.clone().svd(true, true);
        let without = |zeroed: &[usize]| {
            let mut u = a.clone();
            for &j in zeroed {
                u.column_mut(j).fill(0.0);
            }
            let usvd = u.clone().svd(true, true);
            (u, usvd)
        };
        let (untouched, unrounded) = if rounding {
            (
                without(&[TOUCHED_COL, ROUNDING_COL]),
                Some(without(&[ROUNDING_COL])),
            )
        } else {
            (without(&[TOUCHED_COL]), None)
        };
        Fitter {
            a,
            svd,
            untouched,
            unrounded,
            scale,
        }
    }

    /// None when the field is not linear in the basis (the fit leaves a residual).
    pub(super) fn fit(&self, ys: &[f64]) -> Option<Coef> {
        let ymax = ys.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if ymax == 0.0 {
            return Some([0.0; NB]);
        }
        let b = DVector::from_iterator(ys.len(), ys.iter().map(|v| v / ymax));
        let exact = |a: &DMatrix<f64>, svd: &nalgebra::linalg::SVD<f64, _, _>| {
            let sol = svd.solve(&b, 1e-10).ok()?;
            ((a * &sol - &b).amax() <= 1e-7).then_some(sol)
        };
        let sol = exact(&self.untouched.0, &self.untouched.1)
            .or_else(|| self.unrounded.as_ref().and_then(|(u, svd)| exact(u, svd)))
            .or_else(|| exact(&self.a, &self.svd))?;
        let mut out = [0.0; NB];
        for j in 0..sol.len() {
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
pub(super) fn reads_successor(op: &Op) -> bool {
    op.measure.is_some_and(|m| m.includes_next) || op.family == CostFamily::AttentionMlaDecode
}

impl PassModel {
    /// Probes `build(scenario with batch and context set, queries per sequence)` at a few
    /// shapes per regime and fits each op's fields on the basis.
    pub(super) fn fit(
        s: &Scenario,
        build: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
        slot: usize,
        verify: bool,
    ) -> Result<Self> {
        Self::fit_probes(s, build, slot, verify, [&PROBES_LOW, &PROBES_HIGH])
    }

    /// [`PassModel::fit`] at the given probes (batch, queries, context) of the low and high
    /// regimes.
    pub(super) fn fit_probes(
        s: &Scenario,
        build: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
        slot: usize,
        verify: bool,
        probes: [&[(u32, u32, u64)]; 2],
    ) -> Result<Self> {
        let sms = s.system.gpu.sms as u64;
        let experts = s
            .model
            .moe
            .as_ref()
            .map(|m| DistinctExperts::new(&s.routing, m.n_routed_experts, m.top_k));
        let ep = EpShape::of(s);
        // Where the expert kernels' rows are rounded (`EpShape::rounding`), the capture sizes
        // the probes pad to are mostly even: a few probes without CUDA graphs add odd row
        // counts, so that the rounding column is told apart from the padded rows in both
        // regimes.
        let odd: [&[(u32, u32, u64)]; 2] = match &ep {
            Some(e) if e.rounds() => [&PROBES_ODD_LOW, &PROBES_ODD_HIGH],
            _ => [&[], &[]],
        };
        let (low, high) = rayon::join(
            || Self::fit_regime(s, build, (probes[0], odd[0]), sms, verify, ep.as_ref()),
            || Self::fit_regime(s, build, (probes[1], odd[1]), sms, verify, ep.as_ref()),
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
            ep,
            dp_share: 1,
            context_twin: [None; 2],
        })
    }

    pub(super) fn fit_regime(
        s: &Scenario,
        build: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
        (probes, odd): (&[Probe], &[Probe]),
        sms: u64,
        verify: bool,
        ep: Option<&EpShape>,
    ) -> Result<Regime> {
        let mut ws = Vec::new();
        let mut vars = Vec::new();
        let graphs = probes.iter().map(|p| (p, true));
        for (&(b, q, c), graphs) in graphs.chain(odd.iter().map(|p| (p, false))) {
            let mut ps = s.clone();
            // Shapes are linear in the experts touched whatever the routing; uniform draws
            // are the cheapest to sample (the probes' touched counts are read off each build).
            ps.routing = crate::scenario::routing::Routing::Uniform;
            ps.batch = b;
            ps.context = c.min(s.model.max_position_embeddings as u64);
            // Probed with CUDA graphs on, so that padded rows and real tokens part (the
            // probes include batches that are not capture sizes); the odd probes without.
            ps.cuda_graphs = graphs;
            let mut w = build(&ps, q);
            if let Some(ep) = ep {
                ep.probe(&mut w);
            }
            ws.push(w);
            let padded = ps.padding(q, pad_rule(verify, q)).padded;
            vars.push((b, q, ps.context, padded));
        }
        if ep.is_none()
            && ws
                .iter()
                .flat_map(|w| &w.ops)
                .any(|o| !o.rank_scale.is_empty())
        {
            // One rank's recursion stands for all only when every rank plays the same.
            return Err(Error::FastPathRefused(
                "the sweep's fast path needs every rank to play the same step; expert parallelism loads ranks unevenly (simulate each scenario instead)",
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
                return Err(Error::Invariant(
                    "fast path: the workload's op sequence changes within a regime",
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
                        slice: ep.map_or(0.0, |e| e.slice(padded)),
                        rounding: ep.map_or(0.0, |e| e.rounding(padded)),
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
                    fitter.fit(&ys).ok_or_else(|| Error::NotLinear {
                        what: what.to_string(),
                        op: op0.name.clone(),
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
                // An op some rank runs more of than another (expert loads), in any probe.
                let loaded = ep.is_some()
                    && ws
                        .iter()
                        .zip(&all_segs)
                        .any(|(w, sg)| !w.ops[sg[si].0[j]].rank_scale.is_empty());
                let kind = match op0.family {
                    CostFamily::Fork => Kind::Fork,
                    CostFamily::Join => Kind::Join,
                    f if f.is_collective() => Kind::Collective {
                        wide: op0.group > s.layout.tp,
                    },
                    _ => Kind::Kernel {
                        aux: op0.stream == Stream::Aux,
                        loaded,
                    },
                };
                let with_context = fields.all().any(|c| {
                    Col::ALL
                        .iter()
                        .any(|k| k.carries_context() && c[k.at()] != 0.0)
                }) || matches!(
                    op0.family,
                    CostFamily::AttentionMlaDecode | CostFamily::AttentionGqaDecode
                );
                let group = match kind {
                    Kind::Fork | Kind::Join => Group::Sync,
                    Kind::Collective { .. } => Group::Collective,
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
                    loaded,
                    batch_div: match ep {
                        Some(e) if loaded && EpShape::is_expert_gemm(op0) => e.n as f64,
                        _ => 1.0,
                    },
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
        let (context_layout, context_ops, context_from) =
            dedup_layout(&ops, layout(Group::Context));
        let context_busy: Vec<(usize, f64)> = context_ops
            .iter()
            .map(|&i| {
                let repeat = segments
                    .iter()
                    .find(|s| s.start <= i && i < s.end)
                    .map_or(1, |s| s.repeat);
                (ops[i].category.index(), repeat as f64)
            })
            .collect();
        let collective_ops = (0..ops.len())
            .filter(|&i| ops[i].group == Group::Collective)
            .collect();
        let kinds: Vec<Kind> = ops.iter().map(|o| o.kind).collect();
        Ok(Regime {
            run_end: kernel_runs(&kinds, &segments, false),
            kinds,
            ops,
            segments,
            tokens_layout,
            context_layout,
            context_ops,
            context_busy,
            context_from,
            collective_ops,
        })
    }

    /// Segment shapes (ops, repeat) of the low regime.
    pub(super) fn shape(&self) -> Vec<(usize, u32)> {
        self.low
            .segments
            .iter()
            .map(|s| (s.end - s.start, s.repeat))
            .collect()
    }

    pub(super) fn regime(&self, tokens: f64) -> &Regime {
        if tokens <= self.threshold {
            &self.low
        } else {
            &self.high
        }
    }

    /// Rows of a pass of `batch` × `queries` tokens after CUDA-graph padding.
    pub(super) fn padded(&self, batch: u32, queries: u32, graphs: bool) -> u64 {
        let q = queries.max(1);
        self.sizes
            .padding(batch as u64 * q as u64, pad_rule(self.verify, q), graphs)
            .padded
    }

    pub(super) fn vars(
        &self,
        batch: u32,
        queries: u32,
        context: u64,
        touched: f64,
        padded: u64,
    ) -> Vars {
        Vars {
            padded: padded as f64,
            tokens: batch as f64 * queries.max(1) as f64,
            seqs: batch as f64,
            context: context as f64,
            splits: splits(context, self.sms) as f64,
            touched,
            slice: self.ep.as_ref().map_or(0.0, |e| e.slice(padded)),
            rounding: self.ep.as_ref().map_or(0.0, |e| e.rounding(padded)),
        }
    }

    /// Expected experts touched by `tokens` real tokens; padding rows add one more top-k
    /// draw (they share one routing), as the workload's sampler draws them.
    pub(super) fn touched(&self, tokens: u64, padded: u64) -> f64 {
        let draws = tokens + u64::from(padded > tokens);
        self.experts.as_ref().map_or(0.0, |e| e.at(draws))
    }
}

/// Whether `a` and `b` are the same op in different layers: everything `cost::price` reads of
/// them (family, kernel, stream, weights, table key, fields at every basis, role, micro-batch
/// and draft pass) is equal, the fields to their fits' rounding.
fn same_op_in_other_layer(a: &OpT, b: &OpT) -> bool {
    let (x, y) = (&a.template, &b.template);
    // Each segment's ops are fitted on their own probes, so the same shape's coefficients may
    // differ in the last bits: equal to 1e-9 relative is the same op.
    let close = |a: &f64, b: &f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    let fields_close = |f: &Fields, g: &Fields| {
        f.all().count() == g.all().count()
            && f.all()
                .zip(g.all())
                .all(|(u, v)| u.iter().zip(v).all(|(a, b)| close(a, b)))
    };
    a.kind == b.kind
        && a.group == b.group
        && a.loaded == b.loaded
        && a.batch_div == b.batch_div
        && a.category == b.category
        && x.family == y.family
        && std::ptr::eq(x.kernel, y.kernel)
        && x.stream == y.stream
        && x.weights == y.weights
        && x.measure == y.measure
        && x.group == y.group
        && x.rank_scale == y.rank_scale
        && x.waits_for == y.waits_for
        && x.role == y.role
        && x.micro_batch == y.micro_batch
        && x.draft_pass == y.draft_pass
        && a.fields.measure.is_some() == b.fields.measure.is_some()
        && fields_close(&a.fields, &b.fields)
}

/// Whether two regimes play and price the same: the same op sequence (op for op the same ops in
/// other layers), segments, layouts and collectives.
fn same_regime(a: &Regime, b: &Regime) -> bool {
    let seg = |x: &Segment, y: &Segment| (x.start, x.end, x.repeat) == (y.start, y.end, y.repeat);
    a.ops.len() == b.ops.len()
        && a.kinds == b.kinds
        && a.segments.len() == b.segments.len()
        && a.segments.iter().zip(&b.segments).all(|(x, y)| seg(x, y))
        && a.tokens_layout == b.tokens_layout
        && a.context_layout == b.context_layout
        && a.context_ops == b.context_ops
        && a.context_from == b.context_from
        && a.context_busy == b.context_busy
        && a.collective_ops == b.collective_ops
        && a.ops
            .iter()
            .zip(&b.ops)
            .all(|(x, y)| same_op_in_other_layer(x, y))
}

impl PassModel {
    /// Whether `other` (another pipeline stage's model) gives this model's step at every
    /// batch, context and setting: its regimes are the same ops in other layers (each stage's
    /// layers differ only in their numbers), with the same padding and routing.
    /// Whether `other` (an earlier pipeline stage's model) prices this model's context ops in
    /// its regime `high` at every batch and context: the same padding, routing and regime
    /// split, and the same context layout, op for op the same ops in other layers.
    pub(super) fn prices_context_as(&self, other: &PassModel, high: bool) -> bool {
        let (a, b) = if high {
            (&self.high, &other.high)
        } else {
            (&self.low, &other.low)
        };
        self.threshold == other.threshold
            && self.experts == other.experts
            && self.sizes == other.sizes
            && self.verify == other.verify
            && self.ep.is_none()
            && other.ep.is_none()
            && a.context_layout.len() == b.context_layout.len()
            && a.context_layout
                .iter()
                .zip(&b.context_layout)
                .all(|(&(i, ki), &(j, kj))| {
                    ki == kj && same_op_in_other_layer(&a.ops[i], &b.ops[j])
                })
    }

    pub(super) fn plays_as(&self, other: &PassModel) -> bool {
        self.threshold == other.threshold
            && self.experts == other.experts
            && self.sms == other.sms
            && self.verify == other.verify
            && self.sizes == other.sizes
            && self.ep.is_none()
            && other.ep.is_none()
            && same_regime(&self.low, &other.low)
            && same_regime(&self.high, &other.high)
    }
}

/// Splits a layout into its units (a kept op and the helpers priced after it), keeps the first
/// of each set of units that are the same ops in different layers, and says where each kept op
/// of the full layout finds its price: (deduplicated layout, kept ops, their price positions).
fn dedup_layout(
    ops: &[OpT],
    full: Vec<(usize, bool)>,
) -> (Vec<(usize, bool)>, Vec<usize>, Vec<usize>) {
    let mut units: Vec<&[(usize, bool)]> = Vec::new();
    let mut start = 0;
    for i in 1..=full.len() {
        if i == full.len() || full[i].1 {
            units.push(&full[start..i]);
            start = i;
        }
    }
    let same = |u: &[(usize, bool)], v: &[(usize, bool)]| {
        u.len() == v.len()
            && u.iter()
                .zip(v)
                .all(|(a, b)| a.1 == b.1 && same_op_in_other_layer(&ops[a.0], &ops[b.0]))
    };
    let (mut layout, mut kept, mut from) = (Vec::new(), Vec::new(), Vec::new());
    // Per distinct unit: its first position among the priced kept ops.
    let mut distinct: Vec<(&[(usize, bool)], usize)> = Vec::new();
    let mut priced = 0;
    for u in units {
        let base = match distinct.iter().find(|(v, _)| same(u, v)) {
            Some(&(_, at)) => at,
            None => {
                distinct.push((u, priced));
                layout.extend_from_slice(u);
                let at = priced;
                priced += u.iter().filter(|x| x.1).count();
                at
            }
        };
        for (k, &(i, _)) in u.iter().filter(|x| x.1).enumerate() {
            kept.push(i);
            from.push(base + k);
        }
    }
    (layout, kept, from)
}

/// Prices `layout`'s ops of `regime` at basis `x` with `cost::price`: the kept ops' µs in
/// layout order, plus their busy time over the segments' repeats.
pub(super) fn price_layout(
    regime: &Regime,
    layout: &[(usize, bool)],
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
) -> Result<Vec<f64>> {
    price_layout_in(&mut Scratch::new(), regime, layout, x, s, p)
}

/// A workload kept for one layout (`price_layout_in`), the basis its ops were last set at, and
/// the pricer prepared for the scenario they were last priced under.
pub(super) struct Scratch {
    pub(super) w: Workload,
    pub(super) x: Option<Coef>,
    pricer: Option<(PricerKey, cost::PreparedPricer)>,
    /// The lean pricer of these ops under that setting, where it covers them (None inside:
    /// the general pricer's): `cost::attention`.
    attention: Option<(PricerKey, Option<cost::attention::AttentionPricer>)>,
    /// Its prices, one per op of `w`.
    prices: Vec<f64>,
}

/// What of the memo's scenario a prepared pricer depends on and a sweep moves (the NCCL
/// setting, `--allreduce` and the other communication knobs, the launch mode; batch and context
/// are read per price), the layout it was prepared over, and the profile it was prepared from.
type PricerKey = (usize, NcclSettings, CommKnobs, Layout, bool);

fn pricer_key(s: &Scenario, p: &CalibrationProfile) -> PricerKey {
    (
        p as *const CalibrationProfile as usize,
        s.nccl,
        s.comm,
        s.layout,
        s.cuda_graphs,
    )
}

/// `pricer_key(s, p) == *k`, without copying the settings out.
#[inline]
fn key_is(k: &PricerKey, s: &Scenario, p: &CalibrationProfile) -> bool {
    k.0 == p as *const CalibrationProfile as usize
        && k.4 == s.cuda_graphs
        && k.1 == s.nccl
        && k.2 == s.comm
        && k.3 == s.layout
}

impl Scratch {
    pub(super) fn new() -> Self {
        Scratch {
            w: empty_workload(),
            x: None,
            pricer: None,
            attention: None,
            prices: Vec::new(),
        }
    }
}

pub(super) fn empty_workload() -> Workload {
    Workload {
        ops: Vec::new(),
        experts_touched: Vec::new(),
        routing: Default::default(),
    }
}

/// [`price_layout`] in `w`, a workload kept for this layout (its ops are the layout's templates
/// once filled): only the numeric fields are set per pricing, nothing is cloned.
pub(super) fn price_layout_in(
    scratch: &mut Scratch,
    regime: &Regime,
    layout: &[(usize, bool)],
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
) -> Result<Vec<f64>> {
    price_layout_at(scratch, regime, layout, x, s, p, None)
}

/// [`price_layout_in`] with the expert GEMMs' `shape.batch` (the rounded mean over expert-
/// parallel ranks of the experts with tokens, `OpT::batch_div`) and their weights' bytes set
/// where `expert_batch` is given, every other field as `x` gives it.
pub(super) fn price_layout_at(
    scratch: &mut Scratch,
    regime: &Regime,
    layout: &[(usize, bool)],
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
    expert_batch: Option<super::ep::ExpertsAt>,
) -> Result<Vec<f64>> {
    // Sized exactly: the memo boxes it without a reallocation.
    let mut us = vec![0.0; layout.iter().filter(|(_, kept)| *kept).count()];
    price_layout_into(scratch, regime, layout, x, s, p, expert_batch, &mut us)?;
    Ok(us)
}

/// [`price_layout_at`] into `out` (one value per kept op of `layout`, in order).
#[allow(clippy::too_many_arguments)]
pub(super) fn price_layout_into(
    scratch: &mut Scratch,
    regime: &Regime,
    layout: &[(usize, bool)],
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
    expert_batch: Option<super::ep::ExpertsAt>,
    out: &mut [f64],
) -> Result<()> {
    let w = &mut scratch.w;
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
        scratch.x = None;
        scratch.attention = None;
    }
    // Columns that moved since the ops were last set (a sweep's next context at the same
    // batch moves the context's columns only): the other fields keep their values.
    let changed = match &scratch.x {
        Some(last) => (0..NB).fold(0u16, |m, j| {
            m | (((last[j].to_bits() != x[j].to_bits()) as u16) << j)
        }),
        None => u16::MAX,
    };
    for (op, &(i, _)) in w.ops.iter_mut().zip(layout) {
        regime.ops[i].instantiate_changed(x, changed, op);
    }
    scratch.x = Some(*x);
    if let Some(at) = expert_batch {
        for (op, &(i, _)) in w.ops.iter_mut().zip(layout) {
            if regime.ops[i].batch_div != 1.0 {
                op.shape.batch = at.rounded;
                if let Some(b) = super::ep::ExpertBytes::of(&regime.ops[i], x, at.rows) {
                    op.bytes += b.weight * (at.touched - b.fitted);
                }
            }
        }
        // The overridden fields are set afresh by the next pricing.
        scratch.x = None;
    }
    if expert_batch.is_none() {
        // The ops the lean pricer covers (a new context's attention): the same prices.
        if !scratch
            .attention
            .as_ref()
            .is_some_and(|a| key_is(&a.0, s, p))
        {
            let ap = cost::attention::AttentionPricer::new(w, s, p);
            scratch.attention = Some((pricer_key(s, p), ap));
        }
        if let Some((_, Some(ap))) = &mut scratch.attention {
            scratch.prices.resize(w.ops.len(), 0.0);
            if ap.price(w, s, p, &mut scratch.prices) {
                let kept = layout.iter().zip(&scratch.prices).filter(|(l, _)| l.1);
                for (o, (_, &v)) in out.iter_mut().zip(kept) {
                    *o = v;
                }
                return Ok(());
            }
        }
    }
    // Quiet: the report's warnings come from the scenario's own full pricing, never from here.
    // The pricer is prepared once per setting (what `cost::price_quiet` does per call that
    // does not depend on the shapes, batch or context).
    let key = pricer_key(s, p);
    let pricer = match &mut scratch.pricer {
        Some((k, pr)) if *k == key => pr,
        slot => {
            *slot = None;
            &mut slot.insert((key, cost::PreparedPricer::new(s, p, true)?)).1
        }
    };
    let pricing = pricer.price(w, s, p)?;
    let kept = layout
        .iter()
        .zip(&pricing.base_us)
        .filter(|((_, kept), _)| *kept)
        .map(|(_, &us)| us);
    for (o, v) in out.iter_mut().zip(kept) {
        *o = v;
    }
    Ok(())
}

/// [`Regime::run_end`]: runs of kernels on one stream, each within one segment, that add no
/// expert-parallel excess (not `loaded`); with `loaded_too`, runs of loaded kernels too (a run
/// is all of one or all of the other).
pub(super) fn kernel_runs(kinds: &[Kind], segments: &[Segment], loaded_too: bool) -> Vec<u32> {
    let mut end: Vec<u32> = (1..=kinds.len() as u32).collect();
    let stream = |k: Kind| match k {
        Kind::Kernel { aux, loaded } if loaded_too || !loaded => Some((aux, loaded)),
        _ => None,
    };
    for seg in segments {
        for i in (seg.start..seg.end).rev() {
            if let Some(a) = stream(kinds[i]) {
                if i + 1 < seg.end && stream(kinds[i + 1]) == Some(a) {
                    end[i] = end[i + 1];
                }
            }
        }
    }
    end
}

/// Busy time per category of `ops` at durations `us`, over their segments' repeats.
pub(super) fn busy_of(regime: &Regime, ops: impl Iterator<Item = usize>, us: &[f64]) -> Busy {
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

pub(super) fn keep_or_nan(r: Result<Vec<f64>>, n: usize) -> Vec<f64> {
    // Every setting was priced once when the fast scenario and collectives were made, so a
    // failure here is a shape no check saw: NaN shows it in the output rather than a panic.
    r.unwrap_or_else(|_| vec![f64::NAN; n])
}
/// The latency part of each of `regime`'s collectives at basis `x` as a fraction of its price
/// (`cost::price`'s latency term of the chosen protocol, times the profile's latency factor);
/// 1 (all latency: decode messages are latency-bound) where the pricing names none.
pub(super) fn latency_fractions(
    regime: &Regime,
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
) -> Vec<f64> {
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

#[cfg(test)]
mod sparse_tests {
    use super::*;

    /// The sparse dot gives `dot`'s bits, zeros and their signs included, over coefficients
    /// with runs of zeros, negative and cancelling terms, and bases with zero columns.
    #[test]
    pub(super) fn sparse_dot_is_the_full_dot() {
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
    pub(super) fn round_u64_is_round_then_clamp() {
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
mod dedup_tests {
    use super::*;

    /// Every layer's attention has the same shape: the default Kimi-K2.5 step prices its MLA
    /// decode and split-KV reduce once per context (the dense layer 0 and the MoE layers share
    /// them), and each kept op finds a price of its own kernel.
    #[test]
    fn context_ops_priced_once_per_distinct_shape() {
        let (s, _) = crate::sim::ScenarioRequest::default()
            .load()
            .expect("default scenario");
        let build = |ps: &Scenario, q: u32| crate::workload::build_pass(ps, q);
        let pm = PassModel::fit(&s, &build, 0, false).expect("fitted");
        for regime in [&pm.low, &pm.high] {
            let priced: Vec<usize> = regime
                .context_layout
                .iter()
                .filter(|x| x.1)
                .map(|x| x.0)
                .collect();
            assert_eq!(priced.len(), 2, "{:?}", regime.context_layout);
            assert_eq!(regime.context_ops.len(), 4);
            for (&i, &j) in regime.context_ops.iter().zip(&regime.context_from) {
                let (a, b) = (&regime.ops[i].template, &regime.ops[priced[j]].template);
                assert_eq!(a.kernel, b.kernel);
                assert_ne!(a.layer == b.layer, i != priced[j]);
            }
        }
    }
}
