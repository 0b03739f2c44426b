//! MLA decode attention from AIConfigurator's generation-module rows: the module's growth with
//! the KV length is the attention kernel's (its GEMMs, norms and launches are priced as their
//! own ops), shared between stage 1 and the split-KV reduce; an FP8 cache at the BF16 price or
//! the measured FP8/BF16 ratio (`cost::kv_dtype`).

use super::{AicTables, LawKernels, Overrides};
use crate::cost::kv_dtype::{KvDtypeRatios, Ratio};
use crate::cost::profile::AicSection;
use crate::cost::table::TablePrice;
use crate::scenario::Scenario;
use crate::workload::{CostFamily, OpRole, Workload};

/// Whether the MLA module rows price `s`'s attention: its model has the MLA dimensions they
/// were measured with.
pub(crate) fn mla_rows_apply(s: &Scenario, sec: &AicSection) -> bool {
    match (&s.model.mla, sec.mla_dims) {
        (Some(m), Some(dims)) => {
            dims == [
                s.model.hidden as u64,
                m.q_lora_rank.unwrap_or(0) as u64,
                m.kv_lora_rank as u64,
                m.qk_nope_head_dim as u64,
                m.qk_rope_head_dim as u64,
                m.v_head_dim as u64,
            ]
        }
        _ => false,
    }
}

/// The MLA module's two kernels priced from its growth (`mla_attention`): (µs, split) of stage 1
/// and of the split-KV reduce after it ((0, 0) without one).
pub(crate) struct MlaPair {
    pub attention: (f64, f64),
    pub reduce: (f64, f64),
}

impl MlaPair {
    /// `growth`: the module's growth from the smallest KV length (µs); `fixed_sum`: both
    /// kernels' fixed costs; `fp8`: the FP8/BF16 ratio (1 on a BF16 cache); `floor`: stage 1's
    /// bytes at the DRAM bandwidth; `reduce_law`: the reduce's own law price, when it follows.
    pub(crate) fn of(
        growth: f64,
        fixed_sum: f64,
        fp8: f64,
        floor: f64,
        reduce_law: Option<f64>,
    ) -> Self {
        let pair = ((growth + fixed_sum) * fp8).max(floor);
        let red = reduce_law.map_or(0.0, |r| r.min(0.5 * pair));
        // The pair's price at the smallest KV length (its fixed costs; a DRAM floor above them
        // is KV read, i.e. growth) is shared by both kernels in proportion to their prices.
        let fixed_part = (fixed_sum * fp8).min(pair) / pair.max(1e-12);
        MlaPair {
            attention: (pair - red, (pair - red) * fixed_part),
            reduce: (red, red * fixed_part),
        }
    }
}

/// How one step's MLA calls read the module rows: the KV dtype of the rows read, the heads per
/// rank, the rows of the first call, the KV length per rank, the FP8/BF16 ratio over BF16 rows
/// for an FP8 cache, and the module's growth at the first call.
struct MlaRead {
    kv: &'static str,
    heads: u64,
    batch: f64,
    ctx: f64,
    fp8_ratio: Option<(Ratio, &'static KvDtypeRatios)>,
    growth: TablePrice,
}

/// Prices MLA decode attention and its split-KV reduce from the module rows, into `o`.
pub(super) fn mla_attention(
    w: &Workload,
    lk: &LawKernels,
    t: &AicTables,
    sec: &AicSection,
    o: &mut Overrides,
    dir: &str,
) {
    let s = lk.s;
    if !mla_rows_apply(s, sec) {
        return;
    }
    // No attention op to price (a partial workload, e.g. the fast path's): skip the lookups.
    if !w
        .ops
        .iter()
        .any(|o| o.family == CostFamily::AttentionMlaDecode)
    {
        return;
    }
    let Some(read) = mla_read(w, s, t, o, dir) else {
        return;
    };
    if price_calls(w, lk, t, &read, o) > 0 {
        note_mla(s, &read, o, dir);
    }
}

/// How this step reads the rows ([`MlaRead`]); None where they cannot price it (the law then
/// does), with the note saying why.
fn mla_read(
    w: &Workload,
    s: &Scenario,
    t: &AicTables,
    o: &mut Overrides,
    dir: &str,
) -> Option<MlaRead> {
    let kv = if s.kv_bytes == 1.0 { "fp8" } else { "bfloat16" };
    // Decode context parallelism: every rank runs its DCP group's heads over its KV shard.
    let dcp = s.layout.dcp_size();
    let heads = (s.model.num_heads / s.layout.tp as usize) as u64 * dcp as u64;
    let ctx = s.context.div_ceil(dcp as u64) as f64;
    // One rank's sequences (under data-parallel attention a DP rank attends over its own
    // share), times the KV reads per sequence of a verify pass's layout (`workload::mla`): the
    // op's measurement key carries both.
    let batch = w
        .ops
        .iter()
        .find(|o| o.family == CostFamily::AttentionMlaDecode)
        .and_then(|o| o.measure.as_ref())
        .map_or(s.rank_batch() as f64, |m| {
            crate::scenario::mla_backend::lookup_rows(s.mla_backend.verify, m.m, m.batch, m.n)
        });
    // An FP8 cache with BF16 rows only: the BF16 rows times the measured FP8/BF16 ratio.
    // Where the ratio was measured on another GPU, the BF16 rows' price stands (`kv_dtype`).
    let (kv, fp8_ratio) = if kv == "fp8" && t.mla_min_step(kv, heads).is_none() {
        match crate::cost::kv_dtype::KvDtypeRatios::bundled() {
            Ok(r) if !r.applies_to(&s.system.gpu.compute_capability) => {
                note!(
                    o.quiet,
                    o.warnings,
                    crate::cost::kv_dtype::unmeasured_note(
                        &s.system.gpu.name,
                        r.fp8_over_bf16(heads, batch, ctx).value
                    )
                );
                ("bfloat16", None)
            }
            Ok(r) => ("bfloat16", Some((r.fp8_over_bf16(heads, batch, ctx), r))),
            Err(e) => {
                note!(o.quiet, o.warnings, format!(
                    "attention_mla_decode: FP8 KV not priced from the tables ({e}); priced by the law"
                ));
                return None;
            }
        }
    } else {
        (kv, None)
    };
    let Some(growth) = t.mla_attention_growth(kv, heads, batch, ctx) else {
        note!(o.quiet, o.warnings, format!(
            "attention_mla_decode: no AIConfigurator MLA module rows for KV {kv} at {heads} heads per rank in {dir}: priced by the law"
        ));
        return None;
    };
    Some(MlaRead {
        kv,
        heads,
        batch,
        ctx,
        fp8_ratio,
        growth,
    })
}

/// Each MLA call and the split-KV reduce after it priced from the module's growth (`read`);
/// returns how many calls it priced.
fn price_calls(
    w: &Workload,
    lk: &LawKernels,
    t: &AicTables,
    read: &MlaRead,
    o: &mut Overrides,
) -> usize {
    let (s, bw) = (lk.s, lk.bw);
    let MlaRead {
        kv,
        heads,
        batch,
        ctx,
        fp8_ratio,
        growth,
    } = *read;
    let fixed = |f: CostFamily| lk.kernels.get(f).map_or(0.0, |k| k.fixed_us);
    let mut priced = 0;
    for i in 0..w.ops.len() {
        let op = &w.ops[i];
        if op.family != CostFamily::AttentionMlaDecode {
            continue;
        }
        // Stage 1 and the split-KV reduce after it: the module's growth with the KV length is
        // theirs, plus the fixed costs a KV of 2 tokens already paid.
        let reduce = w
            .ops
            .get(i + 1)
            .filter(|n| n.role == OpRole::AttentionReduce)
            .map(|n| (i + 1, lk.law_or_bytes(n)));
        let fixed_sum = fixed(CostFamily::AttentionMlaDecode)
            + reduce.map_or(0.0, |_| fixed(CostFamily::Elementwise));
        // A step of several passes (a speculative step's verify and draft passes) holds calls
        // at different rows: each is read at its own (the growth looked up above is the first's).
        let own = op.measure.as_ref().map_or(batch, |m| {
            crate::scenario::mla_backend::lookup_rows(s.mla_backend.verify, m.m, m.batch, m.n)
        });
        let (growth_us, fp8) = if own == batch {
            (growth.us, fp8_ratio.map_or(1.0, |r| r.0.value))
        } else {
            (
                t.mla_attention_growth(kv, heads, own, ctx)
                    .map_or(growth.us, |g| g.us),
                fp8_ratio.map_or(1.0, |(_, table)| table.fp8_over_bf16(heads, own, ctx).value),
            )
        };
        let m = MlaPair::of(
            growth_us,
            fixed_sum,
            fp8,
            op.bytes / bw,
            reduce.map(|r| r.1),
        );
        (o.us[i], o.split[i]) = (Some(m.attention.0), m.attention.1);
        if let Some((j, _)) = reduce {
            (o.us[j], o.split[j]) = (Some(m.reduce.0), m.reduce.1);
        }
        priced += 1;
    }
    priced
}

/// The provenance of the MLA prices and what their reading met, into `o`'s notes.
fn note_mla(s: &Scenario, read: &MlaRead, o: &mut Overrides, dir: &str) {
    let MlaRead {
        heads,
        fp8_ratio,
        growth,
        ..
    } = *read;
    note!(o.quiet, o.families, (
        "attention_mla_decode".into(),
        format!("measured: AIConfigurator mla_generation.csv ({dir}), MLA generation module at {heads} heads/rank: its growth from KV 2 to the scenario's KV length, plus the kernels' fixed costs (the module's GEMMs, norms and launches are priced as their own ops)"),
    ));
    if let Some((r, table)) = fp8_ratio {
        note!(
            o.quiet,
            o.families,
            (
                "attention_mla_decode (FP8 KV)".into(),
                format!(
                    "the BF16 rows of mla_generation.csv ({dir}) times the {}",
                    table.source()
                ),
            )
        );
        note!(o.quiet, o.warnings, format!(
            "attention_mla_decode with an FP8 KV cache: {dir} has BF16 rows only; priced as BF16 x the FP8/BF16 ratio measured on an H200 (x{:.2} here), transferred to {}{}",
            r.value,
            s.system.gpu.name,
            if r.extrapolated { "; outside the measured batch, KV length or head count: held at the nearest" } else { "" }
        ));
    }
    if growth.extrapolated {
        note!(o.quiet, o.warnings, format!(
            "attention_mla_decode: batch {} x KV {} lies outside the AIConfigurator MLA module rows: extrapolated",
            s.rank_batch(), s.context
        ));
    }
}
