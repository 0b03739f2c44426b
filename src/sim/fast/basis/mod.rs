//! Op shapes in closed form: the basis of scenario variables, each op's coefficients read
//! off the workload builder by probing it, and the regimes (runs of identical layers) of a pass.
//!
//! This module holds the shapes (`Vars` and its basis columns, an op's fitted `Fields`, the
//! `Regime`s and `PassModel` of a pass) and what reads them; the jobs are its children:
//! `probe` (the probe shapes, the workloads built at them and cut into segments), `fit` (each
//! op's fields fitted on the basis, the regime's layouts), `twins` (which ops, regimes and
//! passes play or price the same) and `price` (a layout's ops set at a basis and priced).

use super::ep::EpShape;
use super::{Busy, Category, Coef, DistinctExperts, Op, NB, NCAT};

mod fit;
mod price;
mod probe;
mod twins;

pub(super) use price::{
    keep_or_nan, latency_fractions, price_layout, price_layout_at, price_layout_in,
    price_layout_into, Scratch,
};
pub(super) use probe::{PROBES_HIGH, PROBES_LOW};

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

impl PassModel {
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
