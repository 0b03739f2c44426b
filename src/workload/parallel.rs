//! Expert parallelism (`--ep`) and decode context parallelism (`--dcp`) applied to a built
//! tensor-parallel step: the ops change shape, some ranks get more work than others, and the
//! collectives these layouts need are added.
//!
//! **Expert parallelism** (vLLM `--enable-expert-parallel` at data parallel 1, so the EP group
//! is the TP group): attention stays tensor-parallel; rank r holds experts r·E/N ..
//! (r+1)·E/N − 1 whole (full `moe_intermediate`, no TP split), as vLLM places them. Each
//! rank's routed-expert kernels see its own experts' tokens (`RoutingSample::rank_loads`, the
//! seeded routing), so the expert GEMMs carry a per-rank factor (`Op::rank_scale`): the
//! rank's weight + activation bytes over the mean rank's (decode expert GEMMs are
//! memory-bound); the slowest rank sets the pace at the next collective. Communication
//! (`EpComm`; facts.md has no entry on vLLM's EP backends, so this is an ASSUMPTION):
//! - `all-to-all` (default): DeepEP-style. Each rank dispatches its 1/N slice of the
//!   (replicated) batch, top-k copies per token (`moe_dispatch`, all_to_all of
//!   ⌈T/N⌉·top_k·hidden·2 B per rank), combines the expert outputs back the same way
//!   (`moe_combine`), and an all-gather of T·hidden·2 B re-replicates the batch for the
//!   TP attention of the next layer. The shared expert runs on the rank's slice with whole
//!   weights (replicated), as it must once the batch is sliced. This replaces the MoE
//!   all-reduce.
//! - `allreduce`: every rank runs its experts on the whole batch (it is replicated after the
//!   attention all-reduce) and the MoE all-reduce sums routed and shared partial outputs, as
//!   with TP experts: only the expert kernels change.
//!
//! **Decode context parallelism** (vLLM `--decode-context-parallel-size` D, MLA only): the KV
//! cache is sharded across the D ranks of each DCP group (token-interleaved), so each rank
//! reads context/D tokens of latent and writes 1/D of the new tokens; the query is all-gathered
//! across the group first so each rank attends with all the group's heads (`dcp_q_all_gather`,
//! T·heads·D·576·2 B), and the partial outputs are merged with their log-sum-exps: an
//! all-gather of the LSEs (`dcp_lse_all_gather`, fp32) and a reduce-scatter of the outputs
//! (`dcp_out_reduce_scatter`, T·heads·D·kv_lora·2 B) back to each rank's own heads. The names
//! follow vLLM's `cp_lse_ag_out_rs` as remembered; facts.md has no entry (ASSUMPTION).

use super::builder::ACT_BYTES;
use super::op::{CostFamily, Op, Shape, Stream};
use super::Workload;
use crate::category::Category;
use crate::scenario::deployment::EpComm;
use crate::scenario::Scenario;

/// Applies `--ep` and `--dcp` to a step built for `real` tokens (batch × queries) padded to
/// `padded` rows (CUDA-graph padding: collectives move every row; the KV write and attention
/// cover the real tokens).
pub fn apply(s: &Scenario, real: u64, padded: u64, w: &mut Workload) {
    let ep = s.comm.ep_size();
    if ep > 1 && s.model.moe.is_some() {
        expert_parallel(s, padded, ep, w);
    }
    let dcp = s.comm.dcp_size();
    if dcp > 1 && s.model.mla.is_some() {
        context_parallel(s, real, padded, dcp, w);
    }
}

fn collective(
    layer: i32,
    name: &str,
    kernel: &'static str,
    family: CostFamily,
    bytes: u64,
    group: u32,
) -> Op {
    Op {
        name: if layer >= 0 {
            format!("L{layer}.{name}")
        } else {
            name.to_string()
        },
        kernel,
        layer,
        family,
        category: Category::Communication,
        stream: Stream::Comm,
        shape: Shape::default(),
        weights: "-".into(),
        flops: 0.0,
        bytes: bytes as f64,
        message_bytes: bytes,
        measure: None,
        group,
        rank_scale: Vec::new(),
    }
}

fn suffix(op: &Op) -> &str {
    op.name
        .rsplit_once('.')
        .map_or(op.name.as_str(), |(_, s)| s)
}

fn expert_parallel(s: &Scenario, tokens: u64, ep: u32, w: &mut Workload) {
    let moe = s.model.moe.as_ref().expect("checked");
    let n = ep as usize;
    let tp = s.tp as u64;
    let hidden = s.model.hidden as u64;
    let (hf, top_k) = (hidden as f64, moe.top_k as u64);
    let inter = moe.moe_intermediate as u64;
    let inter_tp = inter / tp;
    let shared_inter = moe.shared_intermediate as u64;
    let a2a = s.comm.ep_comm == EpComm::AllToAll;
    let slice = tokens.div_ceil(ep as u64);
    let mut out = Vec::with_capacity(w.ops.len() + 3 * s.model.num_layers);
    let ops = std::mem::take(&mut w.ops);
    for mut op in ops {
        let layer = op.layer;
        let is_moe_layer = layer >= 0 && s.model.is_layer_moe(layer as usize);
        if !is_moe_layer {
            out.push(op);
            continue;
        }
        let l = layer as usize;
        let loads = w.routing.rank_loads(l, n);
        let counts = w.routing.expert_tokens.get(l).cloned().unwrap_or_default();
        let per = counts.len().div_ceil(n).max(1);
        let touched: Vec<f64> = (0..n)
            .map(|r| {
                counts
                    .iter()
                    .skip(r * per)
                    .take(per)
                    .filter(|&&c| c > 0)
                    .count() as f64
            })
            .collect();
        let rows: Vec<f64> = loads.iter().map(|&x| x as f64).collect();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
        let (rows_mean, touched_mean) = (mean(&rows), mean(&touched));
        let ratio = |v: Vec<f64>| -> Vec<f64> {
            let m = mean(&v);
            if m > 0.0 {
                v.iter().map(|x| x / m).collect()
            } else {
                Vec::new()
            }
        };
        match suffix(&op) {
            "experts_w13" | "experts_w2" => {
                let w13 = suffix(&op) == "experts_w13";
                // Bytes per weight from the TP op: bytes = touched·(weights per expert)·bpw + acts.
                let (inf_tp, t0, rows0) =
                    (inter_tp as f64, op.shape.batch as f64, op.shape.m as f64);
                let act0 = if w13 {
                    rows0 * (hf + 2.0 * inf_tp) * ACT_BYTES
                } else {
                    rows0 * (inf_tp + hf) * ACT_BYTES
                };
                let wts0 = if w13 { 2.0 * inf_tp * hf } else { hf * inf_tp };
                let bpw = if t0 > 0.0 {
                    (op.bytes - act0) / (t0 * wts0)
                } else {
                    0.5
                };
                let inf = inter as f64;
                let wts = if w13 { 2.0 * inf * hf } else { hf * inf };
                let act_per_row = if w13 {
                    (hf + 2.0 * inf) * ACT_BYTES
                } else {
                    (inf + hf) * ACT_BYTES
                };
                let bytes_of = |t: f64, r: f64| t * wts * bpw + r * act_per_row;
                op.shape.m = rows_mean.round() as u64;
                op.shape.batch = touched_mean.round() as u64;
                if w13 {
                    op.shape.n = 2 * inter;
                } else {
                    op.shape.k = inter;
                }
                op.flops = 2.0 * rows_mean * wts;
                op.bytes = bytes_of(touched_mean, rows_mean);
                op.rank_scale = ratio((0..n).map(|r| bytes_of(touched[r], rows[r])).collect());
                op.measure = None;
                out.push(op);
            }
            "experts_act_and_mul" => {
                let r = rows_mean.round() as u64;
                op.shape.m = r * 2 * inter;
                op.shape.n = r * inter;
                op.flops = op.shape.m as f64;
                op.bytes = (op.shape.m + op.shape.n) as f64 * ACT_BYTES;
                op.rank_scale = ratio(rows.clone());
                op.measure = None;
                out.push(op);
            }
            "moe_sum" | "moe_align_block_size" | "moe_permute" => {
                op.rank_scale = ratio(rows.clone());
                if a2a && suffix(&op) == "moe_sum" {
                    // The combine sums each slice token's top-k rows after the all-to-all.
                    let t = slice as f64;
                    op.shape.m = slice;
                    op.flops = t * top_k as f64 * hf;
                    op.bytes = (t * top_k as f64 + t) * hf * ACT_BYTES;
                    op.rank_scale = Vec::new();
                }
                let align = suffix(&op) == "moe_align_block_size";
                out.push(op);
                if a2a && align {
                    // Dispatch right after the routing is known (before the expert GEMMs).
                    out.push(collective(
                        layer,
                        "moe_dispatch",
                        "ncclDevKernel_SendRecv (all_to_all dispatch)",
                        CostFamily::AllToAll,
                        slice * top_k * hidden * ACT_BYTES as u64,
                        0,
                    ));
                }
            }
            "shared_expert_gate_up" | "shared_expert_down" if a2a => {
                // Whole shared-expert weights, run on the rank's slice.
                let up = suffix(&op) == "shared_expert_gate_up";
                let (m0, n0, k0) = (op.shape.m as f64, op.shape.n as f64, op.shape.k as f64);
                let bpw =
                    ((op.bytes - m0 * k0 * ACT_BYTES - m0 * n0 * ACT_BYTES) / (n0 * k0)).max(0.0);
                if up {
                    op.shape.n = 2 * shared_inter;
                } else {
                    op.shape.k = shared_inter;
                }
                op.shape.m = slice;
                let (m, nn, k) = (slice as f64, op.shape.n as f64, op.shape.k as f64);
                op.flops = 2.0 * m * nn * k;
                op.bytes = nn * k * bpw + m * k * ACT_BYTES + m * nn * ACT_BYTES;
                op.measure = None;
                out.push(op);
            }
            "shared_expert_act_and_mul" if a2a => {
                op.shape.m = slice * 2 * shared_inter;
                op.shape.n = slice * shared_inter;
                op.flops = op.shape.m as f64;
                op.bytes = (op.shape.m + op.shape.n) as f64 * ACT_BYTES;
                op.measure = None;
                out.push(op);
            }
            "add_shared_and_routed" if a2a => {
                // Combine first, then add the shared expert's slice rows.
                out.push(collective(
                    layer,
                    "moe_combine",
                    "ncclDevKernel_SendRecv (all_to_all combine)",
                    CostFamily::AllToAll,
                    slice * top_k * hidden * ACT_BYTES as u64,
                    0,
                ));
                op.shape.m = 2 * slice * hidden;
                op.shape.n = slice * hidden;
                op.bytes = (op.shape.m + op.shape.n) as f64 * ACT_BYTES;
                op.flops = op.shape.m as f64;
                op.measure = None;
                out.push(op);
            }
            "mlp_all_reduce" if a2a => {
                out.push(collective(
                    layer,
                    "moe_all_gather",
                    "ncclDevKernel_AllGather_RING_LL",
                    CostFamily::AllGather,
                    tokens * hidden * ACT_BYTES as u64,
                    0,
                ));
            }
            _ => out.push(op),
        }
    }
    w.ops = out;
}

fn context_parallel(s: &Scenario, real: u64, tokens: u64, dcp: u32, w: &mut Workload) {
    let mla = s.model.mla.as_ref().expect("checked");
    let d = dcp as u64;
    let heads = (s.model.num_heads / s.tp as usize) as u64;
    let kv_lora = mla.kv_lora_rank as u64;
    let latent = kv_lora + mla.qk_rope_head_dim as u64;
    let ctx = s.context.div_ceil(d);
    let splits = (ctx / 512)
        .max(1)
        .next_power_of_two()
        .min(2 * s.system.gpu.sms as u64)
        .max(1);
    let seqs = s.batch as f64;
    let q = (real as f64 / seqs.max(1.0)).max(1.0);
    let hd = (heads * d) as f64;
    let mut out = Vec::with_capacity(w.ops.len() + 3 * s.model.num_layers);
    for mut op in std::mem::take(&mut w.ops) {
        let layer = op.layer;
        match suffix(&op) {
            "kv_cache_write" => {
                // Token-interleaved shards: each rank writes 1/D of the new tokens.
                let m = real.div_ceil(d);
                op.shape.m = m;
                op.bytes = 2.0 * (m * latent) as f64 * ACT_BYTES;
                if let Some(mk) = op.measure.as_mut() {
                    mk.m = m;
                }
                out.push(op);
            }
            "mla_decode" => {
                out.push(collective(
                    layer,
                    "dcp_q_all_gather",
                    "ncclDevKernel_AllGather_RING_LL (dcp q)",
                    CostFamily::AllGather,
                    tokens * heads * d * latent * ACT_BYTES as u64,
                    dcp,
                ));
                op.shape.batch = heads * d;
                op.flops = 2.0 * seqs * q * hd * ctx as f64 * (latent + kv_lora) as f64;
                op.bytes = seqs * ctx as f64 * latent as f64 * s.kv_bytes
                    + seqs * q * hd * (latent + kv_lora) as f64 * ACT_BYTES;
                if let Some(mk) = op.measure.as_mut() {
                    mk.context = ctx;
                    mk.n = heads * d;
                }
                out.push(op);
            }
            "mla_decode_reduce" => {
                let partial = seqs * q * hd * splits as f64 * (kv_lora + 1) as f64 * 4.0;
                op.shape.batch = heads * d;
                op.shape.k = splits;
                op.flops = partial / 4.0;
                op.bytes = partial + seqs * q * hd * kv_lora as f64 * ACT_BYTES;
                out.push(op);
                out.push(collective(
                    layer,
                    "dcp_lse_all_gather",
                    "ncclDevKernel_AllGather_RING_LL (dcp lse)",
                    CostFamily::AllGather,
                    tokens * heads * d * 4 * d,
                    dcp,
                ));
                out.push(collective(
                    layer,
                    "dcp_out_reduce_scatter",
                    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL (dcp out)",
                    CostFamily::ReduceScatter,
                    tokens * heads * d * kv_lora * ACT_BYTES as u64,
                    dcp,
                ));
            }
            _ => out.push(op),
        }
    }
    w.ops = out;
}
