//! Each op's fields fitted on the basis over the probes (`Fitter`: least squares, exact or
//! refused), its kind and pricing group, and the regime's layouts (the ops priced together per
//! group, each distinct context op once).

use super::probe::{probe_workloads, segments_of, Probe, PROBES_HIGH, PROBES_LOW};
use super::probe::{PROBES_ODD_HIGH, PROBES_ODD_LOW};
use super::twins::same_op_in_other_layer;
use super::{kernel_runs, splits, Col, Fields, Group, Kind, OpT, PassModel, Regime, Segment, Vars};
use crate::cost;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::sim::fast::ep::EpShape;
use crate::sim::fast::{Coef, NB};
use crate::workload::routing::DistinctExperts;
use crate::workload::{CostFamily, Op, Stream, Workload, SHARED_EXPERT_STREAM_TOKEN_THRESHOLD};
use nalgebra::{DMatrix, DVector};

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
struct Fitter {
    a: DMatrix<f64>,
    svd: nalgebra::linalg::SVD<f64, nalgebra::Dyn, nalgebra::Dyn>,
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
    scale: Coef,
}

/// The basis column of the experts touched (`Vars::basis`).
const TOUCHED_COL: usize = Col::Touched.at();
/// The basis column of the rounding of the mean rows per expert-parallel rank (the last).
const ROUNDING_COL: usize = Col::Rounding.at();

impl Fitter {
    fn new(rows: &[Coef]) -> Self {
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
    fn fit(&self, ys: &[f64]) -> Option<Coef> {
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
fn reads_successor(op: &Op) -> bool {
    op.measure.is_some_and(|m| m.includes_next) || op.family == CostFamily::AttentionMlaDecode
}

impl PassModel {
    /// Probes `build(scenario with batch and context set, queries per sequence)` at a few
    /// shapes per regime and fits each op's fields on the basis.
    pub(in crate::sim::fast) fn fit(
        s: &Scenario,
        build: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
        slot: usize,
        verify: bool,
    ) -> Result<Self> {
        Self::fit_probes(s, build, slot, verify, [&PROBES_LOW, &PROBES_HIGH])
    }

    /// [`PassModel::fit`] at the given probes (batch, queries, context) of the low and high
    /// regimes.
    pub(in crate::sim::fast) fn fit_probes(
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

    /// One regime of a pass: built at its probes (`probe`), cut into segments, each segment's
    /// ops fitted on the basis rows of the probes, then grouped and laid out for pricing.
    fn fit_regime(
        s: &Scenario,
        build: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
        (probes, odd): (&[Probe], &[Probe]),
        sms: u64,
        verify: bool,
        ep: Option<&EpShape>,
    ) -> Result<Regime> {
        let (ws, vars) = probe_workloads(s, build, (probes, odd), verify, ep)?;
        let all_segs = segments_of(&ws)?;
        let mut ops: Vec<OpT> = Vec::new();
        let mut segments = Vec::new();
        for (si, (idx, repeat, layer)) in all_segs[0].iter().enumerate() {
            let rows: Vec<Coef> = ws
                .iter()
                .zip(&vars)
                .map(|(w, &probe)| basis_row(w, probe, *layer, sms, ep))
                .collect();
            let fitter = Fitter::new(&rows);
            let start = ops.len();
            for j in 0..idx.len() {
                // The op in every probe: the segment's j-th op in each one's copy of it.
                let copies: Vec<&Op> = ws
                    .iter()
                    .zip(&all_segs)
                    .map(|(w, sg)| &w.ops[sg[si].0[j]])
                    .collect();
                ops.push(fit_op(&fitter, &copies, s.layout.tp, ep)?);
            }
            segments.push(Segment {
                start,
                end: ops.len(),
                repeat: *repeat,
            });
        }
        group_successors(&mut ops);
        Ok(regime_of(ops, segments))
    }
}

/// The basis at one probe (`(batch, queries, context, padded rows)`) of workload `w`'s
/// segment of `layer` (the experts touched are that layer's; none outside the layers).
fn basis_row(
    w: &Workload,
    (b, q, c, padded): (u32, u32, u64, u64),
    layer: i32,
    sms: u64,
    ep: Option<&EpShape>,
) -> Coef {
    let touched = if layer >= 0 {
        w.experts_touched.get(layer as usize).copied().unwrap_or(0) as f64
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
}

/// One op fitted from its `copies`, one per probe (the first names it): its fields on the
/// basis, whether expert loads scale it, its kind and the group it is priced in.
fn fit_op(fitter: &Fitter, copies: &[&Op], tp: u32, ep: Option<&EpShape>) -> Result<OpT> {
    let op0 = copies[0];
    let fields = fit_fields(fitter, copies)?;
    // An op some rank runs more of than another (expert loads), in any probe.
    let loaded = ep.is_some() && copies.iter().any(|o| !o.rank_scale.is_empty());
    let kind = match op0.family {
        CostFamily::Fork => Kind::Fork,
        CostFamily::Join => Kind::Join,
        f if f.is_collective() => Kind::Collective {
            wide: op0.group > tp,
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
    Ok(OpT {
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
    })
}

/// An op's numeric fields fitted on the basis from its `copies` at the probes: refused by
/// name where one is not linear in it.
fn fit_fields(fitter: &Fitter, copies: &[&Op]) -> Result<Fields> {
    let field = |get: &dyn Fn(&Op) -> f64, what: &str| -> Result<Coef> {
        let ys: Vec<f64> = copies.iter().map(|o| get(o)).collect();
        fitter.fit(&ys).ok_or_else(|| Error::NotLinear {
            what: what.to_string(),
            op: copies[0].name.clone(),
        })
    };
    let measure = match copies[0].measure {
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
    Ok(Fields {
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
    })
}

/// An op whose price reads a context-dependent successor depends on the context too; so does
/// the successor of attention (its split-KV reduce shares the module's price).
fn group_successors(ops: &mut [OpT]) {
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
}

/// The ops of group `g` priced together, in program order: (op, kept). An op whose price
/// reads its successor is followed by it (a helper: priced, its price dropped), as
/// `cost::price` sees the real sequence.
fn layout_of(ops: &[OpT], g: Group) -> Vec<(usize, bool)> {
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
}

/// The regime of fitted `ops` in `segments`: its layouts per group (each distinct context op
/// priced once), the context ops' busy-time weights, the collectives and the kernel runs.
fn regime_of(ops: Vec<OpT>, segments: Vec<Segment>) -> Regime {
    let tokens_layout = layout_of(&ops, Group::Tokens);
    let (context_layout, context_ops, context_from) =
        dedup_layout(&ops, layout_of(&ops, Group::Context));
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
    Regime {
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
