//! The routed experts' price from AIConfigurator's MoE rows: one layer's call split over its
//! kernels (alignment, expert GEMMs, activation, sum), each at least its roofline, with shapes
//! below the first DRAM-bound row priced by the DRAM-bound rows' line (`cost::resident`).

use super::{
    expert_format, is_moe_gemm, is_moe_module_op, moe_table_distribution, moe_tokens_for_lookup,
    quant_of, AicTables, LastDramLine, LawKernels, MoeKey, Overrides, Tally,
};
use crate::scenario::model::MoeDims;
use crate::scenario::Scenario;
use crate::workload::{Op, Workload};
use std::collections::BTreeMap;

/// The DRAM-bound rows' line (`resident::dram_line`) of the balanced rows of `key`'s shape (a
/// balanced row of x tokens touches min(x × top-k, local experts), so its working set is known),
/// remembered per thread for the last shape asked.
fn dram_line_of(
    t: &AicTables,
    key: &MoeKey,
    expert_bytes: f64,
    local: u64,
    s: &Scenario,
    bw: f64,
) -> Option<crate::cost::resident::DramLine> {
    thread_local! {
        static LAST: std::cell::RefCell<LastDramLine> =
            const { std::cell::RefCell::new(None) };
    }
    let l2 = s.system.gpu.l2_mb * 1e6;
    let mut balanced = key.clone();
    balanced.0 = "balanced".to_string();
    let tag = (expert_bytes.to_bits(), (l2 * bw).to_bits());
    if let Some(hit) = LAST.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|(k, e, g, _)| *k == balanced && *e == tag.0 && *g == tag.1)
            .map(|v| v.3)
    }) {
        return hit;
    }
    let topk = key.5.max(1) as f64;
    let line = t.moe_rows(&balanced).and_then(|rows| {
        let bytes_at = |x: f64| (x * topk).min(local as f64) * expert_bytes;
        crate::cost::resident::dram_line(rows, bytes_at, local as f64 / topk, l2, bw)
    });
    LAST.with(|c| *c.borrow_mut() = Some((balanced, tag.0, tag.1, line)));
    line
}

/// What the MoE rows' lookups of one step met, for the report's notes.
#[derive(Default)]
struct Met {
    n: Tally,
    /// The shape the table had no rows for (the law then prices every routed call).
    missing: Option<MoeKey>,
    /// An EP size read off the measured ones either side.
    between_ep: Option<u32>,
    /// (EP size, EP size read instead, experts per rank at both).
    read_as: Option<(u32, u32, u64)>,
    /// The experts the first row touches, where a call touched fewer.
    first_row: f64,
}

/// Prices each layer's routed-expert call from the MoE rows, shared over its kernels, into `o`.
pub(super) fn moe_modules(
    w: &Workload,
    s: &Scenario,
    lk: &LawKernels,
    t: &AicTables,
    o: &mut Overrides,
    dir: &str,
) {
    let Some(moe) = &s.model.moe else { return };
    // No MoE module op to price (a partial workload, e.g. the fast path's attention): skip
    // the routing's table name and the grouping.
    if !w.ops.iter().any(is_moe_module_op) {
        return;
    }
    // Under expert parallelism each rank's own load is the routing model's (`Op::rank_scale`):
    // the table prices the mean rank, which the balanced rows are (the skewed rows time a rank
    // the source does not name).
    let dist = if s.layout.ep_size() > 1 {
        "balanced"
    } else {
        moe_table_distribution(&s.routing)
    };
    let mut met = Met::default();
    for idx in routed_calls(w).values() {
        let Some(gemm) = idx
            .iter()
            .map(|&i| &w.ops[i])
            .find(|op| is_moe_gemm(op.family))
        else {
            continue;
        };
        let key = table_key(s, moe, dist, gemm);
        let Some(row_us) = call_price(w, lk, t, key, gemm, idx, &mut met) else {
            break;
        };
        share_over_kernels(w, lk, idx, row_us, o);
    }
    if let Some(k) = &met.missing {
        note!(o.quiet, o.warnings, format!(
            "moe: no AIConfigurator MoE rows for distribution {}, {} {} experts, hidden {}, inter {}, top-{}, moe_tp {}, moe_ep {} in {dir}: routed experts priced by the law",
            k.0, k.1, k.2, k.3, k.4, k.5, k.6, k.7
        ));
        for v in
            o.us.iter_mut()
                .zip(&mut o.split)
                .zip(&w.ops)
                .filter(|(_, op)| is_moe_module_op(op))
        {
            *v.0 .0 = None;
            *v.0 .1 = 0.0;
        }
        return;
    }
    if met.n.priced == 0 || o.quiet {
        return;
    }
    note_moe(w, s, o, dir, dist, &met);
}

/// The ops of each routed-expert call, one call per layer of each pass: a step of several
/// passes (a speculative step's draft passes, two-batch overlap's micro-batches) repeats a
/// layer number, and its ops' draft pass and micro-batch tell the passes apart.
fn routed_calls(w: &Workload) -> BTreeMap<(i32, Option<u32>, Option<u8>), Vec<usize>> {
    let mut layers: BTreeMap<(i32, Option<u32>, Option<u8>), Vec<usize>> = BTreeMap::new();
    for (i, op) in w.ops.iter().enumerate() {
        if is_moe_module_op(op) {
            let pass = (op.layer, op.draft_pass, op.micro_batch);
            layers.entry(pass).or_default().push(i);
        }
    }
    layers
}

/// The MoE rows' key of a layer whose expert GEMM is `gemm`.
fn table_key(s: &Scenario, moe: &MoeDims, dist: &str, gemm: &Op) -> MoeKey {
    (
        dist.to_string(),
        quant_of(gemm.family).to_string(),
        moe.n_routed_experts as u64,
        s.model.hidden as u64,
        moe.moe_intermediate as u64,
        moe.top_k as u64,
        // The experts span the TP group of every data-parallel rank; expert parallelism
        // splits them into whole experts (moe_tp 1) over the EP group.
        (s.layout.tp * s.layout.dp_size() / s.layout.ep_size()).max(1),
        s.layout.ep_size(),
    )
}

/// The whole call's price from the rows (`idx`: its ops), before its kernels' rooflines; None
/// where the table has no rows for `key` (recorded in `met.missing`).
fn call_price(
    w: &Workload,
    lk: &LawKernels,
    t: &AicTables,
    mut key: MoeKey,
    gemm: &Op,
    idx: &[usize],
    met: &mut Met,
) -> Option<f64> {
    let (s, bw) = (lk.s, lk.bw);
    let touched = gemm.shape.batch;
    // The table's num_tokens gives each rank num_tokens × top_k routed rows (under expert
    // parallelism too: at EP 64 its 8,192-token rows take 4.7 ms, the time of 65,536 rows
    // on a rank's four experts, not of 1,024), so a rank's mean routed rows over top_k is
    // the row to read: the pass's tokens in a plain or verify pass (tokens × top_k rows),
    // a rank's share of them under expert parallelism.
    let topk = key.5.max(1);
    let tokens = ((gemm.shape.m + topk / 2) / topk).max(1);
    // A rank's own experts: all of them, or its EP slice (with the redundant copies).
    let local = ((key.2 + s.layout.redundant() as u64) / key.7.max(1) as u64).max(1);
    let x = moe_tokens_for_lookup(&key.0, tokens, touched, local, key.5);
    // An EP size the table lacks whose ranks hold as many experts as a measured one's
    // (EP 144 with 32 redundant copies: two per rank, as at EP 128) reads that one's rows:
    // a rank's call is its rows on its own experts, whatever the group's size.
    if key.7 > 1 && t.moe_rows(&key).is_none() && key.2.is_multiple_of(local) {
        let mut same = key.clone();
        same.7 = (key.2 / local) as u32;
        if t.moe_rows(&same).is_some() {
            met.read_as = Some((key.7, same.7, local));
            key = same;
        }
    }
    let Some(tp) = t.moe(&key, x) else {
        met.missing = Some(key);
        return None;
    };
    if t.moe_rows(&key).is_none() {
        met.between_ep = Some(key.7);
    }
    let gemm_read: f64 = idx
        .iter()
        .filter(|&&i| is_moe_gemm(w.ops[i].family))
        .map(|&i| w.ops[i].bytes / bw)
        .sum();
    // The table's first row (one token, top_k rows) touches top_k of a rank's experts, or
    // all of them when it holds fewer. A call touching fewer (wide expert parallelism at a
    // tiny batch, under one row per expert on the mean rank) is that row less the weight
    // reads of the experts it leaves alone, at the DRAM roofline: the row's excess over its
    // own reads is the call's fixed cost, which every call pays.
    let first_touches = key.5.min(local) as f64;
    // One expert's gate, up and down weights on a rank (its 1/moe_tp slice), in bytes.
    let bpw = expert_format(s, gemm.layer as usize).bytes_per_weight();
    let expert_bytes = 3.0 * key.3 as f64 * (key.4 as f64 / key.6.max(1) as f64) * bpw;
    // Rows that ran from L2 in the collector never price a step's DRAM-bound call: below
    // the first DRAM-bound row, the line fitted to those rows prices the call's own bytes.
    let line = dram_line_of(t, &key, expert_bytes, local, s, bw);
    let n = &mut met.n;
    let (row_us, below_rows) = match line {
        Some(l) if x < l.first_dram_x => {
            n.by_dram_line += 1;
            n.line = Some(l);
            (l.us(touched as f64 * expert_bytes), false)
        }
        _ if (touched as f64) < first_touches && x <= 1.0 => {
            let us = tp.us - (first_touches - touched as f64) * expert_bytes / bw;
            (us.max(gemm_read), true)
        }
        _ => (tp.us, tp.extrapolated),
    };
    let floor = idx.iter().map(|&i| w.ops[i].bytes).sum::<f64>() / bw;
    n.floored += usize::from(row_us < floor);
    n.extrapolated += usize::from(tp.extrapolated);
    if below_rows && !tp.extrapolated {
        n.below_first_row += 1;
        met.first_row = first_touches;
    }
    n.priced += 1;
    Some(row_us)
}

/// The call's price `row_us` shared over its kernels `idx` into `o`, each at least its own
/// roofline (`physics`), and the expert GEMMs' split: their weight read.
fn share_over_kernels(
    w: &Workload,
    lk: &LawKernels,
    idx: &[usize],
    row_us: f64,
    o: &mut Overrides,
) {
    let (s, bw) = (lk.s, lk.bw);
    let laws: Vec<f64> = idx.iter().map(|&i| lk.law_or_bytes(&w.ops[i])).collect();
    let floor = idx.iter().map(|&i| w.ops[i].bytes).sum::<f64>() / bw;
    let floors: Vec<f64> = idx
        .iter()
        .map(|&i| crate::cost::physics::floor_us(&w.ops[i], s))
        .collect();
    let total = row_us.max(floor).max(floors.iter().sum());
    // The table times the whole call; its kernels share what their rooflines leave in
    // proportion to their laws.
    let sum: f64 = laws.iter().sum::<f64>().max(1e-9);
    let plain = laws.iter().zip(&floors).all(|(l, f)| total * l / sum >= *f);
    let spare = total - floors.iter().sum::<f64>();
    for ((&i, l), f) in idx.iter().zip(&laws).zip(&floors) {
        o.us[i] = Some(if plain {
            total * l / sum
        } else {
            f + spare * l / sum
        });
    }
    // The expert GEMMs' weight read: their bytes at the DRAM roofline, the floor no table
    // row may beat; the rest of their share is the per-token work.
    let gemm_read: f64 = idx
        .iter()
        .filter(|&&i| is_moe_gemm(w.ops[i].family))
        .map(|&i| w.ops[i].bytes / bw)
        .sum();
    let gemm = |i: &&usize| is_moe_gemm(w.ops[**i].family);
    let share: f64 = idx
        .iter()
        .filter(gemm)
        .map(|&i| o.us[i].unwrap_or(0.0))
        .sum();
    let f = if share > 0.0 {
        (gemm_read / share).min(1.0)
    } else {
        0.0
    };
    for &i in idx.iter().filter(gemm) {
        o.split[i] = f * o.us[i].unwrap_or(0.0);
    }
}

/// The provenance of the table-priced ops and what the lookups met, into `o`'s notes.
fn note_moe(w: &Workload, s: &Scenario, o: &mut Overrides, dir: &str, dist: &str, met: &Met) {
    let n = &met.n;
    let how = if dist == "balanced" {
        "'balanced' rows read at the token count that touches as many experts as the routing does"
    } else {
        "rows of the routing's matching distribution"
    };
    let src = format!(
        "measured: AIConfigurator moe.csv ({dir}), the whole routed-expert call per layer ({how}); its kernels share it in proportion to their laws"
    );
    for (i, op) in w.ops.iter().enumerate() {
        if o.us[i].is_some() && is_moe_module_op(op) {
            note!(o.quiet, o.families, (op.family.to_string(), src.clone()));
        }
    }
    if let Some((ep, at, local)) = met.read_as {
        note!(o.quiet, o.warnings, format!(
            "moe: no AIConfigurator MoE rows at expert parallelism {ep} in {dir}: read at EP {at}, whose ranks also hold {local} experts each"
        ));
    }
    if let Some(ep) = met.between_ep {
        note!(o.quiet, o.warnings, format!(
            "moe: no AIConfigurator MoE rows at expert parallelism {ep} in {dir}: read off the measured EP sizes either side and interpolated log-log in the EP size"
        ));
    }
    if n.extrapolated > 0 {
        note!(
            o.quiet,
            o.warnings,
            format!(
            "moe: {} layers' token counts lie outside the AIConfigurator MoE rows: extrapolated",
            n.extrapolated
        )
        );
    }
    if n.below_first_row > 0 {
        note!(o.quiet, o.warnings, format!(
            "moe: {} layers' calls touch fewer experts per rank than the AIConfigurator MoE rows' first (one token on {} experts): priced as that row less the weight reads of the experts left alone (extrapolated)",
            n.below_first_row, met.first_row
        ));
    }
    if let (Some(l), true) = (n.line, n.by_dram_line > 0) {
        note!(o.quiet, o.warnings, format!(
            "moe: {} layers' calls priced from the DRAM-bound rows' line ({:.1} µs + the touched experts' bytes at {:.0} GB/s, fitted to {} rows): the table's rows below {} tokens ran from L2 in the collector's repeated calls (working set within the GPU's {:.0} MB L2 or faster than DRAM)",
            n.by_dram_line, l.fixed_us, l.gbps(), l.rows, l.first_dram_x, s.system.gpu.l2_mb
        ));
    }
    if n.floored > 0 {
        note!(o.quiet, o.warnings, format!(
            "moe: {} layers' table price was below the DRAM roofline of the touched experts' weights (L2-resident in the collector's repeated calls, at 4 tokens or fewer) and was raised to it",
            n.floored
        ));
    }
}
