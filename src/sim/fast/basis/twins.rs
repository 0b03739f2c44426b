//! Which ops, regimes and passes play or price the same: the same ops in other layers (a
//! pipeline's stages, each layer's attention), so that a stage is played once for its twins
//! and a layer's context op priced once for all.

use super::{Fields, OpT, PassModel, Regime, Segment};

/// Whether `a` and `b` are the same op in different layers: everything `cost::price` reads of
/// them (family, kernel, stream, weights, table key, fields at every basis, role, micro-batch
/// and draft pass) is equal, the fields to their fits' rounding.
pub(super) fn same_op_in_other_layer(a: &OpT, b: &OpT) -> bool {
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
    /// Whether `other` (an earlier pipeline stage's model) prices this model's context ops in
    /// its regime `high` at every batch and context: the same padding, routing and regime
    /// split, and the same context layout, op for op the same ops in other layers.
    pub(in crate::sim::fast) fn prices_context_as(&self, other: &PassModel, high: bool) -> bool {
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

    /// Whether `other` (another pipeline stage's model) gives this model's step at every
    /// batch, context and setting: its regimes are the same ops in other layers (each stage's
    /// layers differ only in their numbers), with the same padding and routing.
    pub(in crate::sim::fast) fn plays_as(&self, other: &PassModel) -> bool {
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
