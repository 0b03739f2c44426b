//! Two-batch overlap (`--tbo on`): the step's batch split in two micro-batches (mb0 takes
//! ⌈B/2⌉ sequences, mb1 ⌊B/2⌋; each split over the DP ranks as a batch of its own), each
//! built as a step of its own, then interleaved so that one micro-batch's expert-parallel
//! all-to-all flies while the other computes — the schedule SGLang's and DeepSeek's decode
//! overlap run (as remembered; docs/sources.md has no entry, ASSUMPTION).
//!
//! Each micro-batch's op list is cut at its dispatch/combine all-to-alls into segments
//! s0, a2a0, s1, a2a1, ... The step plays, for k = 0, 1, ...: wait for mb0's a2a(k−1), mb0's
//! s(k), mb0's a2a(k) (asynchronous), wait for mb1's a2a(k−1), mb1's s(k), mb1's a2a(k)
//! (asynchronous). So mb1's s(k) runs while mb0's a2a(k) is in flight and mb0's s(k+1) while
//! mb1's a2a(k) is. The all-to-alls are asynchronous collectives (`Op::waits_for` names them),
//! queued on the communication stream; the low-latency RDMA mode holds no SMs, so the compute
//! they overlap runs at full speed (validation asks for `--ep-comm rdma-ll`). Other collectives
//! (TP all-reduces) stay in their segment, blocking. Both micro-batches share the auxiliary
//! stream of the shared expert: a join waits for both micro-batches' shared-expert work that
//! was forked before it (conservative). Each op carries its micro-batch (`Op::micro_batch`;
//! its name, for people, `mb0.` / `mb1.`).

use super::op::{CostFamily, Op, Shape, Stream};
use super::role::OpRole;
use super::Workload;
use crate::category::Category;
use crate::scenario::Scenario;

/// The micro-batches' scenarios: ⌈B/2⌉ and ⌊B/2⌋ sequences, overlap off, mb1's routing
/// seeded apart from mb0's.
pub(crate) fn micro_batches(s: &Scenario) -> [Scenario; 2] {
    let mut a = s.clone();
    a.layout.tbo = false;
    let mut b = a.clone();
    a.batch = s.batch.div_ceil(2);
    b.batch = s.batch / 2;
    // mb1's sequences are other sequences than mb0's: their tokens are routed by draws of
    // their own (the same seed would give mb1 mb0's routing, token for token).
    b.seed = s.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    [a, b]
}

/// The ops of each micro-batch of a step built by [`interleave`] (by their `Op::micro_batch`,
/// waits included), in program order; None for any other workload (an op of neither). Pricing
/// reads them as two passes (`cost::price`): each micro-batch runs its own kernels on its own
/// tokens.
pub(crate) fn micro_batch_ops(w: &Workload) -> Option<[Vec<usize>; 2]> {
    let mut parts = [Vec::new(), Vec::new()];
    for (i, op) in w.ops.iter().enumerate() {
        match op.micro_batch {
            Some(0) => parts[0].push(i),
            Some(1) => parts[1].push(i),
            _ => return None,
        }
    }
    (!parts[0].is_empty() && !parts[1].is_empty()).then_some(parts)
}

/// One micro-batch cut at its all-to-alls: (segment ops, the all-to-all that ends it).
fn segments(w: Workload, mb: usize) -> Vec<(Vec<Op>, Option<Op>)> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for mut op in w.ops {
        op.name = format!("mb{mb}.{}", op.name);
        op.micro_batch = Some(mb as u8);
        if op.family == CostFamily::AllToAll {
            out.push((std::mem::take(&mut cur), Some(op)));
        } else {
            cur.push(op);
        }
    }
    out.push((cur, None));
    out
}

fn wait_op(mb: usize, target: usize, layer: i32) -> Op {
    Op {
        name: format!("mb{mb}.wait"),
        role: OpRole::Sync,
        kernel: "",
        layer,
        family: CostFamily::Wait,
        category: Category::Idle,
        stream: Stream::Compute,
        shape: Shape::default(),
        weights: "-".into(),
        flops: 0.0,
        bytes: 0.0,
        message_bytes: 0,
        measure: None,
        group: 0,
        rank_scale: Vec::new(),
        waits_for: Some(target as u32),
        fused_norm: None,
        micro_batch: Some(mb as u8),
        draft_pass: None,
    }
}

/// Interleaves the two micro-batches' steps (built from [`micro_batches`]) into one step.
pub(crate) fn interleave(w0: Workload, w1: Workload) -> Workload {
    let (touched, routing) = (w0.experts_touched.clone(), w0.routing.clone());
    let mut segs = [segments(w0, 0), segments(w1, 1)];
    let n = segs[0].len().max(segs[1].len());
    let mut ops: Vec<Op> = Vec::new();
    let mut pending: [Option<usize>; 2] = [None, None];
    for k in 0..n {
        for (mb, list) in segs.iter_mut().enumerate() {
            let Some((body, a2a)) = list.get_mut(k).map(std::mem::take) else {
                continue;
            };
            if let Some(t) = pending[mb].take() {
                let layer = body.first().map_or(ops[t].layer, |o| o.layer);
                ops.push(wait_op(mb, t, layer));
            }
            ops.extend(body);
            if let Some(c) = a2a {
                pending[mb] = Some(ops.len());
                ops.push(c);
            }
        }
    }
    // An all-to-all that ends a micro-batch's list is waited for before the step ends.
    for (mb, p) in pending.iter().enumerate() {
        if let Some(&t) = p.as_ref() {
            let layer = ops[t].layer;
            ops.push(wait_op(mb, t, layer));
        }
    }
    Workload {
        ops,
        experts_touched: touched,
        routing,
    }
}
