//! The probes: the shapes a pass is built at (per regime; odd row counts where expert
//! parallelism rounds), the workloads the builder writes there, and their cut into segments
//! (runs of identical layers), which every probe must share.

use super::pad_rule;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::sim::fast::ep::EpShape;
use crate::workload::{CostFamily, Stream, Workload};

/// A pass's ops cut into segments: (op indices, repeat, representative layer) each.
pub(super) type Segments = Vec<(Vec<usize>, u32, i32)>;

/// One probe: (batch, tokens per sequence, context).
pub(super) type Probe = (u32, u32, u64);

/// A probe as built: (batch, tokens per sequence, context, rows after CUDA-graph padding).
pub(super) type ProbeShape = (u32, u32, u64, u64);

/// The low regime's probes (a pass of at most the shared expert's stream threshold in tokens).
pub(in crate::sim::fast) const PROBES_LOW: [(u32, u32, u64); 14] = [
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
/// The high regime's probes (above that threshold).
pub(in crate::sim::fast) const PROBES_HIGH: [(u32, u32, u64); 14] = [
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
fn segment(w: &Workload) -> Segments {
    let mut groups: Vec<(i32, Vec<usize>)> = Vec::new();
    for (i, op) in w.ops.iter().enumerate() {
        match groups.last_mut() {
            Some((l, v)) if *l == op.layer => v.push(i),
            _ => groups.push((op.layer, vec![i])),
        }
    }
    let mut out: Segments = Vec::new();
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

/// The workloads `build` writes at each probe (with CUDA graphs, so that padded rows and real
/// tokens part; the `odd` probes without), made linear in the basis under expert parallelism
/// (`EpShape::probe`), and each one's (batch, queries, context, padded rows). Refused where
/// ranks play unevenly without expert parallelism to price it.
pub(super) fn probe_workloads(
    s: &Scenario,
    build: &(dyn Fn(&Scenario, u32) -> Workload + Sync),
    (probes, odd): (&[Probe], &[Probe]),
    verify: bool,
    ep: Option<&EpShape>,
) -> Result<(Vec<Workload>, Vec<ProbeShape>)> {
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
    Ok((ws, vars))
}

/// Each probe's workload cut into segments: the same segments (ops and repeats) in every
/// probe, or the regime is not one op sequence.
pub(super) fn segments_of(ws: &[Workload]) -> Result<Vec<Segments>> {
    let all_segs: Vec<Segments> = ws.iter().map(segment).collect();
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
    Ok(all_segs)
}
