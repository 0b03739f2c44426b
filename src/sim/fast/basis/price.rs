//! A layout's ops set at a basis and priced by `cost::price`'s own pricers: a kept workload
//! per layout (`Scratch`) whose numeric fields are set in place, the lean attention pricer
//! where it covers the ops, and the latency part of each collective (Monte Carlo draws).

use super::{Coef, Regime};
use crate::cost::{self, CalibrationProfile};
use crate::error::Result;
use crate::scenario::deployment::CommKnobs;
use crate::scenario::{Layout, NcclSettings, Scenario};
use crate::sim::fast::ep::{ExpertBytes, ExpertsAt};
use crate::sim::fast::NB;
use crate::workload::{Op, Workload};

/// Prices `layout`'s ops of `regime` at basis `x` with `cost::price`: the kept ops' µs in
/// layout order, plus their busy time over the segments' repeats.
pub(in crate::sim::fast) fn price_layout(
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
pub(in crate::sim::fast) struct Scratch {
    w: Workload,
    x: Option<Coef>,
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
    pub(in crate::sim::fast) fn new() -> Self {
        Scratch {
            w: empty_workload(),
            x: None,
            pricer: None,
            attention: None,
            prices: Vec::new(),
        }
    }
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
pub(in crate::sim::fast) fn price_layout_in(
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
pub(in crate::sim::fast) fn price_layout_at(
    scratch: &mut Scratch,
    regime: &Regime,
    layout: &[(usize, bool)],
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
    expert_batch: Option<ExpertsAt>,
) -> Result<Vec<f64>> {
    // Sized exactly: the memo boxes it without a reallocation.
    let mut us = vec![0.0; layout.iter().filter(|(_, kept)| *kept).count()];
    price_layout_into(scratch, regime, layout, x, s, p, expert_batch, &mut us)?;
    Ok(us)
}

/// [`price_layout_at`] into `out` (one value per kept op of `layout`, in order): the ops set
/// at `x` (and the expert GEMMs at `expert_batch`), priced by the lean attention pricer where
/// it covers them, else by the general one.
#[allow(clippy::too_many_arguments)]
pub(in crate::sim::fast) fn price_layout_into(
    scratch: &mut Scratch,
    regime: &Regime,
    layout: &[(usize, bool)],
    x: &Coef,
    s: &Scenario,
    p: &CalibrationProfile,
    expert_batch: Option<ExpertsAt>,
    out: &mut [f64],
) -> Result<()> {
    scratch.set_ops(regime, layout, x);
    if let Some(at) = expert_batch {
        scratch.set_expert_batch(regime, layout, x, at);
    } else if scratch.price_lean(layout, s, p, out) {
        return Ok(());
    }
    scratch.price_general(layout, s, p, out)
}

impl Scratch {
    /// Sets the kept workload's ops to `layout`'s at basis `x`: the templates cloned in only
    /// when the layout changed, then only the fields that read a column that moved.
    fn set_ops(&mut self, regime: &Regime, layout: &[(usize, bool)], x: &Coef) {
        let w = &mut self.w;
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
            self.x = None;
            self.attention = None;
        }
        // Columns that moved since the ops were last set (a sweep's next context at the same
        // batch moves the context's columns only): the other fields keep their values.
        let changed = match &self.x {
            Some(last) => (0..NB).fold(0u16, |m, j| {
                m | (((last[j].to_bits() != x[j].to_bits()) as u16) << j)
            }),
            None => u16::MAX,
        };
        for (op, &(i, _)) in w.ops.iter_mut().zip(layout) {
            regime.ops[i].instantiate_changed(x, changed, op);
        }
        self.x = Some(*x);
    }

    /// Sets the expert GEMMs' `shape.batch` and weight bytes at `at` (the other fields stay as
    /// `x` set them).
    fn set_expert_batch(
        &mut self,
        regime: &Regime,
        layout: &[(usize, bool)],
        x: &Coef,
        at: ExpertsAt,
    ) {
        for (op, &(i, _)) in self.w.ops.iter_mut().zip(layout) {
            if regime.ops[i].batch_div != 1.0 {
                op.shape.batch = at.rounded;
                if let Some(b) = ExpertBytes::of(&regime.ops[i], x, at.rows) {
                    op.bytes += b.weight * (at.touched - b.fitted);
                }
            }
        }
        // The overridden fields are set afresh by the next pricing.
        self.x = None;
    }

    /// Prices the ops with the lean pricer (a new context's attention: the same prices) into
    /// `out`; false where it does not cover them.
    fn price_lean(
        &mut self,
        layout: &[(usize, bool)],
        s: &Scenario,
        p: &CalibrationProfile,
        out: &mut [f64],
    ) -> bool {
        let w = &self.w;
        if !self.attention.as_ref().is_some_and(|a| key_is(&a.0, s, p)) {
            let ap = cost::attention::AttentionPricer::new(w, s, p);
            self.attention = Some((pricer_key(s, p), ap));
        }
        if let Some((_, Some(ap))) = &mut self.attention {
            self.prices.resize(w.ops.len(), 0.0);
            if ap.price(w, s, p, &mut self.prices) {
                let kept = layout.iter().zip(&self.prices).filter(|(l, _)| l.1);
                for (o, (_, &v)) in out.iter_mut().zip(kept) {
                    *o = v;
                }
                return true;
            }
        }
        false
    }

    /// Prices the ops with the general pricer, prepared once per setting, into `out`.
    fn price_general(
        &mut self,
        layout: &[(usize, bool)],
        s: &Scenario,
        p: &CalibrationProfile,
        out: &mut [f64],
    ) -> Result<()> {
        // Quiet: the report's warnings come from the scenario's own full pricing, never from
        // here. The pricer is prepared once per setting (what `cost::price_quiet` does per
        // call that does not depend on the shapes, batch or context).
        let key = pricer_key(s, p);
        let pricer = match &mut self.pricer {
            Some((k, pr)) if *k == key => pr,
            slot => {
                *slot = None;
                &mut slot.insert((key, cost::PreparedPricer::new(s, p, true)?)).1
            }
        };
        let pricing = pricer.price(&self.w, s, p)?;
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
}

pub(in crate::sim::fast) fn keep_or_nan(r: Result<Vec<f64>>, n: usize) -> Vec<f64> {
    // Every setting was priced once when the fast scenario and collectives were made, so a
    // failure here is a shape no check saw: NaN shows it in the output rather than a panic.
    r.unwrap_or_else(|_| vec![f64::NAN; n])
}
/// The latency part of each of `regime`'s collectives at basis `x` as a fraction of its price
/// (`cost::price`'s latency term of the chosen protocol, times the profile's latency factor);
/// 1 (all latency: decode messages are latency-bound) where the pricing names none.
pub(in crate::sim::fast) fn latency_fractions(
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
