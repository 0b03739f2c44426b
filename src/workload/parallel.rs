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
//! (`EpComm`; docs/sources.md has no entry on vLLM's EP backends, so this is an ASSUMPTION):
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
//! **Data-parallel attention** (`--dp D`, vLLM's `--data-parallel-size D
//! --enable-expert-parallel`): the EP group is D × TP ranks. Every rank plays the step of the
//! largest DP rank's tokens (vLLM pads each DP rank to the most across them; ASSUMPTION), the
//! routing drawn for all DP ranks' rows together; attention, KV write and sampling carry each
//! DP rank's own sequences as a `rank_scale` (`data_parallel_attention`). Dispatch/combine span
//! the whole EP group (`Op::group` = EP), each rank sending its 1/TP slice of its DP rank's
//! tokens; `rdma-ll` dispatches FP8 (`a2a_bytes_per_element`). Redundant experts (EPLB) change
//! the per-rank loads (`ep_rank_rows`).
//!
//! **Decode context parallelism** (vLLM `--decode-context-parallel-size` D, MLA only): the KV
//! cache is sharded across the D ranks of each DCP group (token-interleaved), so each rank
//! reads context/D tokens of latent and writes 1/D of the new tokens; the query is all-gathered
//! across the group first so each rank attends with all the group's heads (`dcp_q_all_gather`,
//! T·heads·D·576·2 B), and the partial outputs are merged with their log-sum-exps: an
//! all-gather of the LSEs (`dcp_lse_all_gather`, fp32) and a reduce-scatter of the outputs
//! (`dcp_out_reduce_scatter`, T·heads·D·kv_lora·2 B) back to each rank's own heads. The names
//! follow vLLM's `cp_lse_ag_out_rs` as remembered; docs/sources.md has no entry (ASSUMPTION).

use super::builder::ACT_BYTES;
use super::op::{CostFamily, Op, Shape, Stream};
use super::role::OpRole;
use super::Workload;
use crate::category::Category;
use crate::scenario::deployment::EpComm;
use crate::scenario::Scenario;

/// Applies `--ep` and `--dcp` to a step built for `real` tokens (batch × queries) padded to
/// `padded` rows (CUDA-graph padding: collectives move every row; the KV write and attention
/// cover the real tokens).
pub fn apply(s: &Scenario, real: u64, padded: u64, w: &mut Workload) {
    let ep = s.layout.ep_size();
    if ep > 1 && s.model.moe.is_some() {
        expert_parallel(s, padded, ep, w);
    }
    if s.layout.dp_size() > 1 {
        data_parallel_attention(s, w);
    }
    let dcp = s.layout.dcp_size();
    if dcp > 1 && s.model.mla.is_some() {
        context_parallel(s, real, padded, dcp, w);
    }
}

fn collective(
    layer: i32,
    role: OpRole,
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
        role,
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
        waits_for: None,
        fused_norm: None,
        micro_batch: None,
        draft_pass: None,
    }
}

/// The scenario one data-parallel rank builds its step from: the largest DP rank's share of
/// the batch (vLLM pads every DP rank's tokens to the most across DP ranks, so that the MoE
/// collectives and CUDA graphs see one size: `coordinate_batch_across_dp`, as remembered;
/// docs/sources.md has no entry, ASSUMPTION). None at `--dp 1`.
pub(crate) fn dp_rank_scenario(s: &Scenario) -> Option<Scenario> {
    (s.layout.dp_size() > 1).then(|| {
        let mut local = s.clone();
        local.batch = s.rank_batch();
        local
    })
}

/// Data-parallel attention: every rank runs the GEMMs, norms and collectives of the padded
/// (largest) DP rank's tokens, but its attention, KV-cache write and sampling follow its own
/// DP rank's real sequences: `rank_scale` = the rank's sequences over the largest DP rank's
/// (a DP rank with none runs the dummy step: GEMMs and collectives, no attention).
fn data_parallel_attention(s: &Scenario, w: &mut Workload) {
    let shares = s.dp_batches();
    let max = shares.iter().copied().max().unwrap_or(1).max(1) as f64;
    if shares.iter().all(|&b| b as f64 == max) {
        return;
    }
    let tp = s.layout.tp.max(1) as usize;
    let scale: Vec<f64> = (0..s.ranks() as usize)
        .map(|r| shares[r / tp] as f64 / max)
        .collect();
    for op in &mut w.ops {
        if per_sequence(op) {
            op.rank_scale = scale.clone();
        }
    }
}

/// An op that follows its DP rank's own sequences under data-parallel attention (attention, KV
/// write, sampling); every other op runs the largest DP rank's padded rows.
pub(crate) fn per_sequence(op: &Op) -> bool {
    op.role.per_sequence() || op.family == CostFamily::Sampling
}

/// Tokens (rows) and distinct experts with tokens on each of `n` expert-parallel ranks in one
/// layer, from the tokens each routed expert got.
///
/// Without redundant experts vLLM places experts in contiguous blocks (rank r holds experts
/// r·E/n ..). With `redundant` > 0 (EPLB), the placement rule is DeepSeek's EPLB as vLLM runs
/// it (`vllm/distributed/eplb/rebalance_algo.py`, as remembered; docs/sources.md has no entry,
/// ASSUMPTION): each extra replica goes, one at a time, to the expert with the most tokens
/// per replica, an expert's tokens split evenly over its replicas; then the (E + N) replicas,
/// heaviest first, each go to the rank with the fewest tokens that still has one of its
/// (E + N)/n slots free (ties: the lowest rank). The loads it balances are this step's own
/// sampled counts, so this is EPLB with a perfect estimate of the load (its best case; the
/// real one balances a window of past steps). Replicas of one expert may share a rank.
pub(crate) fn ep_rank_rows(counts: &[u32], n: usize, redundant: usize) -> (Vec<f64>, Vec<f64>) {
    let n = n.max(1);
    let e = counts.len();
    if e == 0 {
        return (vec![0.0; n], vec![0.0; n]);
    }
    if redundant == 0 {
        let per = e.div_ceil(n).max(1);
        let mut rows = vec![0.0; n];
        let mut touched = vec![0.0; n];
        for (x, &c) in counts.iter().enumerate() {
            let r = (x / per).min(n - 1);
            rows[r] += c as f64;
            touched[r] += f64::from(u8::from(c > 0));
        }
        return (rows, touched);
    }
    let mut replicas = vec![1u32; e];
    for _ in 0..redundant {
        let hot = (0..e)
            .max_by(|&a, &b| {
                let (la, lb) = (
                    counts[a] as f64 / replicas[a] as f64,
                    counts[b] as f64 / replicas[b] as f64,
                );
                la.total_cmp(&lb).then(b.cmp(&a))
            })
            .unwrap_or(0);
        replicas[hot] += 1;
    }
    let mut physical: Vec<f64> = (0..e)
        .flat_map(|x| {
            let each = counts[x] as f64 / replicas[x] as f64;
            std::iter::repeat_n(each, replicas[x] as usize)
        })
        .collect();
    physical.sort_by(|a, b| b.total_cmp(a));
    let slots = physical.len().div_ceil(n);
    let (mut rows, mut touched, mut used) = (vec![0.0f64; n], vec![0.0f64; n], vec![0usize; n]);
    // The least-loaded rank with a free slot (ties: the lowest rank) from a heap of the ranks
    // with free slots, not a scan of every rank per replica (288 replicas × 144 ranks per layer
    // at EP 144); a full rank leaves the heap.
    let mut open: std::collections::BinaryHeap<LeastLoaded> =
        (0..n).map(|r| LeastLoaded(0.0, r)).collect();
    for load in physical {
        let r = open.pop().map_or(0, |LeastLoaded(_, r)| r);
        rows[r] += load;
        used[r] += 1;
        touched[r] += f64::from(u8::from(load > 0.0));
        if used[r] < slots {
            open.push(LeastLoaded(rows[r], r));
        }
    }
    (rows, touched)
}

/// A rank and its load, ordered so that a max-heap yields the least load, then the lowest rank.
struct LeastLoaded(f64, usize);

impl Ord for LeastLoaded {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.total_cmp(&self.0).then(other.1.cmp(&self.1))
    }
}
impl PartialOrd for LeastLoaded {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for LeastLoaded {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for LeastLoaded {}

/// Bytes per token of one all-to-all message: BF16 rows, except the low-latency RDMA mode's
/// dispatch, which DeepEP sends in FP8 with one FP32 scale per 128 elements
/// (`low_latency_dispatch(use_fp8=True)`, its default, as remembered; docs/sources.md has no entry,
/// UNVERIFIED). The combine returns BF16 rows in both modes.
pub fn a2a_bytes_per_element(comm: EpComm, dispatch: bool) -> f64 {
    if comm == EpComm::RdmaLl && dispatch {
        1.0 + 4.0 / 128.0
    } else {
        ACT_BYTES
    }
}

/// One rank's send buffer of a dispatch or combine: its `tokens` × top-k copies × hidden
/// elements (`cost::internode::AllToAllBytes::moe` counts the same buffer).
pub fn a2a_message_bytes(tokens: u64, top_k: u64, hidden: u64, per_element: f64) -> u64 {
    (tokens as f64 * top_k as f64 * hidden as f64 * per_element).round() as u64
}

/// What every MoE op of an expert-parallel step is reshaped with: the model's MoE sizes, the
/// rank's dispatch slice and the all-to-all's kernels and messages.
struct EpPlan {
    /// Ranks of the EP group.
    n: usize,
    /// The step's (padded) tokens.
    tokens: u64,
    hidden: u64,
    top_k: u64,
    inter: u64,
    inter_tp: u64,
    shared_inter: u64,
    a2a: bool,
    /// Each rank dispatches its 1/TP slice of its (DP rank's, padded) tokens; at --dp 1 the EP
    /// group is the TP group, so this is the 1/EP slice of the replicated batch.
    slice: u64,
    /// The dispatch/combine spans the whole EP group; at --dp 1 that is the TP group (0).
    a2a_group: u32,
    dispatch_kernel: &'static str,
    combine_kernel: &'static str,
    dispatch_bytes: u64,
    combine_bytes: u64,
}

/// One MoE layer's routed work over the EP ranks, and the shape its kernels are priced at.
struct LayerLoads {
    /// Each rank's routed rows and experts with tokens.
    rows: Vec<f64>,
    touched: Vec<f64>,
    rows_mean: f64,
    touched_mean: f64,
    rows_priced: u64,
    touched_priced: f64,
    /// Priced at one row of one expert, each rank's work scaled from that shape.
    thin: bool,
}

impl EpPlan {
    fn new(s: &Scenario, tokens: u64, ep: u32) -> Self {
        let moe = s.model.moe.as_ref().expect("checked");
        let tp = s.layout.tp as u64;
        let hidden = s.model.hidden as u64;
        let top_k = moe.top_k as u64;
        let inter = moe.moe_intermediate as u64;
        let slice = tokens.div_ceil(tp);
        let (dispatch_kernel, combine_kernel) = if s.comm.ep_comm == EpComm::RdmaLl {
            (
                "deep_ep::internode_ll::dispatch (rdma-ll)",
                "deep_ep::internode_ll::combine (rdma-ll)",
            )
        } else {
            (
                "ncclDevKernel_SendRecv (all_to_all dispatch)",
                "ncclDevKernel_SendRecv (all_to_all combine)",
            )
        };
        EpPlan {
            n: ep as usize,
            tokens,
            hidden,
            top_k,
            inter,
            inter_tp: inter / tp,
            shared_inter: moe.shared_intermediate as u64,
            a2a: s.comm.ep_comm.is_all_to_all(),
            slice,
            a2a_group: if s.layout.dp_size() > 1 { ep } else { 0 },
            dispatch_kernel,
            combine_kernel,
            dispatch_bytes: a2a_message_bytes(
                slice,
                top_k,
                hidden,
                a2a_bytes_per_element(s.comm.ep_comm, true),
            ),
            combine_bytes: a2a_message_bytes(
                slice,
                top_k,
                hidden,
                a2a_bytes_per_element(s.comm.ep_comm, false),
            ),
        }
    }

    fn mean(&self, v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / self.n as f64
    }

    /// Each rank's value over the mean rank's (none when the mean is zero).
    fn ratio(&self, v: &[f64]) -> Vec<f64> {
        let m = self.mean(v);
        if m > 0.0 {
            v.iter().map(|x| x / m).collect()
        } else {
            Vec::new()
        }
    }

    /// Layer `l`'s routed rows per rank from the seeded routing, with `redundant` EPLB slots.
    fn layer_loads(&self, w: &Workload, l: usize, redundant: usize) -> LayerLoads {
        let counts = w.routing.expert_tokens.get(l).map_or(&[][..], |c| &c[..]);
        let (rows, touched) = ep_rank_rows(counts, self.n, redundant);
        let (rows_mean, touched_mean) = (self.mean(&rows), self.mean(&touched));
        // The kernels' rows: the mean rounded, taken from the routed rows' whole count (the
        // ranks' rows summed in floating point are off by an ulp under EPLB's split loads,
        // which would round a mean of exactly half a row either way).
        let routed: u64 = w
            .routing
            .expert_tokens
            .get(l)
            .map_or(0, |c| c.iter().map(|&x| x as u64).sum());
        let rows_rounded = (routed as f64 / self.n as f64).round() as u64;
        // Wide expert parallelism at a tiny batch leaves fewer than half a routed row (or
        // expert with tokens) per rank on average: the mean rank's shape would round to
        // nothing, which no table or law prices (a table read at zero rows extrapolates to
        // seconds). The kernels are then priced at one row of one expert, each rank's work
        // scaled from that shape (`thin`): a rank with one row of one expert runs that kernel.
        let (rows_priced, touched_priced) = if routed > 0 {
            (rows_rounded.max(1), touched_mean.round().max(1.0))
        } else {
            (rows_rounded, touched_mean.round())
        };
        LayerLoads {
            thin: rows_priced != rows_rounded || touched_priced != touched_mean.round(),
            rows,
            touched,
            rows_mean,
            touched_mean,
            rows_priced,
            touched_priced,
        }
    }

    /// The routed rows' way back to their tokens' ranks, once per MoE layer.
    fn combine(&self, layer: i32) -> Op {
        collective(
            layer,
            OpRole::Combine,
            "moe_combine",
            self.combine_kernel,
            CostFamily::AllToAll,
            self.combine_bytes,
            self.a2a_group,
        )
    }

    fn dispatch(&self, layer: i32) -> Op {
        collective(
            layer,
            OpRole::Dispatch,
            "moe_dispatch",
            self.dispatch_kernel,
            CostFamily::AllToAll,
            self.dispatch_bytes,
            self.a2a_group,
        )
    }

    /// A routed-expert GEMM (w13 or w2) at whole experts: the mean rank's shape, each rank's
    /// bytes over it.
    fn expert_gemm(&self, op: &mut Op, loads: &LayerLoads) {
        let w13 = op.role == OpRole::ExpertsW13;
        let hf = self.hidden as f64;
        // Bytes per weight from the TP op: bytes = touched·(weights per expert)·bpw + acts.
        let (inf_tp, t0, rows0) = (
            self.inter_tp as f64,
            op.shape.batch as f64,
            op.shape.m as f64,
        );
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
        let inf = self.inter as f64;
        let wts = if w13 { 2.0 * inf * hf } else { hf * inf };
        let act_per_row = if w13 {
            (hf + 2.0 * inf) * ACT_BYTES
        } else {
            (inf + hf) * ACT_BYTES
        };
        let bytes_of = |t: f64, r: f64| t * wts * bpw + r * act_per_row;
        op.shape.m = loads.rows_priced;
        op.shape.batch = loads.touched_priced as u64;
        if w13 {
            op.shape.n = 2 * self.inter;
        } else {
            op.shape.k = self.inter;
        }
        op.flops = 2.0 * loads.rows_mean * wts;
        op.bytes = bytes_of(loads.touched_mean, loads.rows_mean);
        let per_rank: Vec<f64> = (0..self.n)
            .map(|r| bytes_of(loads.touched[r], loads.rows[r]))
            .collect();
        op.rank_scale = if loads.thin {
            let priced = bytes_of(loads.touched_priced, loads.rows_priced as f64);
            per_rank.iter().map(|b| b / priced).collect()
        } else {
            self.ratio(&per_rank)
        };
        op.measure = None;
    }

    /// The routed experts' activation at the mean rank's rows.
    fn expert_act(&self, op: &mut Op, loads: &LayerLoads) {
        let r = loads.rows_priced;
        op.shape.m = r * 2 * self.inter;
        op.shape.n = r * self.inter;
        op.flops = op.shape.m as f64;
        op.bytes = (op.shape.m + op.shape.n) as f64 * ACT_BYTES;
        op.rank_scale = if loads.thin {
            loads.rows.iter().map(|x| x / r as f64).collect()
        } else {
            self.ratio(&loads.rows)
        };
        op.measure = None;
    }

    /// The routing's bookkeeping kernels (sum, align, permute) scaled by each rank's rows;
    /// under all-to-all the sum runs on the slice, then the combine where no shared expert
    /// comes before it, and the dispatch right after the align.
    fn bookkeeping(&self, mut op: Op, loads: &LayerLoads, out: &mut Vec<Op>) {
        let layer = op.layer;
        // Thin: priced at one row, so a rank's rows are its multiple of that (the
        // ratio to a mean of under one row would multiply the price many times over).
        op.rank_scale = if loads.thin {
            loads
                .rows
                .iter()
                .map(|x| x / loads.rows_priced as f64)
                .collect()
        } else {
            self.ratio(&loads.rows)
        };
        if self.a2a && op.role == OpRole::MoeSum {
            // The combine sums each slice token's top-k rows after the all-to-all.
            let (t, hf) = (self.slice as f64, self.hidden as f64);
            op.shape.m = self.slice;
            op.flops = t * self.top_k as f64 * hf;
            op.bytes = (t * self.top_k as f64 + t) * hf * ACT_BYTES;
            op.rank_scale = Vec::new();
        }
        let align = op.role == OpRole::MoeAlign;
        let combine_here = self.a2a && self.shared_inter == 0 && op.role == OpRole::MoeSum;
        out.push(op);
        if combine_here {
            // Without a shared expert there is no add to combine before: the routed
            // rows go back to their tokens' ranks right after the sum.
            out.push(self.combine(layer));
        }
        if self.a2a && align {
            // Dispatch right after the routing is known (before the expert GEMMs).
            out.push(self.dispatch(layer));
        }
    }

    /// A shared-expert GEMM with whole weights, run on the rank's slice.
    fn shared_gemm(&self, op: &mut Op) {
        let up = op.role == OpRole::SharedExpertUp;
        let (m0, n0, k0) = (op.shape.m as f64, op.shape.n as f64, op.shape.k as f64);
        let bpw = ((op.bytes - m0 * k0 * ACT_BYTES - m0 * n0 * ACT_BYTES) / (n0 * k0)).max(0.0);
        if up {
            op.shape.n = 2 * self.shared_inter;
        } else {
            op.shape.k = self.shared_inter;
        }
        op.shape.m = self.slice;
        let (m, nn, k) = (self.slice as f64, op.shape.n as f64, op.shape.k as f64);
        op.flops = 2.0 * m * nn * k;
        op.bytes = nn * k * bpw + m * k * ACT_BYTES + m * nn * ACT_BYTES;
        op.measure = None;
    }

    fn shared_act(&self, op: &mut Op) {
        op.shape.m = self.slice * 2 * self.shared_inter;
        op.shape.n = self.slice * self.shared_inter;
        op.flops = op.shape.m as f64;
        op.bytes = (op.shape.m + op.shape.n) as f64 * ACT_BYTES;
        op.measure = None;
    }

    /// The shared expert's slice rows added to the combined routed rows.
    fn add_shared(&self, op: &mut Op) {
        op.shape.m = 2 * self.slice * self.hidden;
        op.shape.n = self.slice * self.hidden;
        op.bytes = (op.shape.m + op.shape.n) as f64 * ACT_BYTES;
        op.flops = op.shape.m as f64;
        op.measure = None;
    }

    /// The all-gather that re-replicates the batch for the next layer's TP attention.
    fn all_gather(&self, layer: i32) -> Op {
        collective(
            layer,
            OpRole::Collective,
            "moe_all_gather",
            "ncclDevKernel_AllGather_RING_LL",
            CostFamily::AllGather,
            self.tokens * self.hidden * ACT_BYTES as u64,
            0,
        )
    }
}

fn expert_parallel(s: &Scenario, tokens: u64, ep: u32, w: &mut Workload) {
    let plan = EpPlan::new(s, tokens, ep);
    let a2a = plan.a2a;
    let redundant = s.layout.redundant() as usize;
    let mut out = Vec::with_capacity(w.ops.len() + 3 * s.model.num_layers);
    let ops = std::mem::take(&mut w.ops);
    // Once per layer (every MoE op of the layer reads the same placement).
    let mut cached: Option<(usize, LayerLoads)> = None;
    for mut op in ops {
        let layer = op.layer;
        let is_moe_layer = layer >= 0 && s.model.is_layer_moe(layer as usize);
        if !is_moe_layer {
            out.push(op);
            continue;
        }
        let l = layer as usize;
        if cached.as_ref().is_none_or(|c| c.0 != l) {
            cached = Some((l, plan.layer_loads(w, l, redundant)));
        }
        let (_, loads) = cached.as_ref().expect("just set");
        match op.role {
            OpRole::ExpertsW13 | OpRole::ExpertsW2 => {
                plan.expert_gemm(&mut op, loads);
                out.push(op);
            }
            OpRole::ExpertsAct => {
                plan.expert_act(&mut op, loads);
                out.push(op);
            }
            OpRole::MoeSum | OpRole::MoeAlign | OpRole::MoePermute => {
                plan.bookkeeping(op, loads, &mut out);
            }
            OpRole::SharedExpertUp | OpRole::SharedExpertDown if a2a => {
                plan.shared_gemm(&mut op);
                out.push(op);
            }
            OpRole::SharedExpertAct if a2a => {
                plan.shared_act(&mut op);
                out.push(op);
            }
            OpRole::AddSharedAndRouted if a2a => {
                // Combine first, then add the shared expert's slice rows.
                out.push(plan.combine(layer));
                plan.add_shared(&mut op);
                out.push(op);
            }
            // An all-reduce fused with the next norm (`--fuse-allreduce-rms`) stays as it is.
            OpRole::MlpAllReduce if a2a && op.fused_norm.is_none() => {
                out.push(plan.all_gather(layer));
            }
            _ => out.push(op),
        }
    }
    w.ops = out;
}

fn context_parallel(s: &Scenario, real: u64, tokens: u64, dcp: u32, w: &mut Workload) {
    let mla = s.model.mla.as_ref().expect("checked");
    let d = dcp as u64;
    let heads = (s.model.num_heads / s.layout.tp as usize) as u64;
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
        match op.role {
            OpRole::KvWrite => {
                // Token-interleaved shards: each rank writes 1/D of the new tokens.
                let m = real.div_ceil(d);
                op.shape.m = m;
                op.bytes = 2.0 * (m * latent) as f64 * ACT_BYTES;
                if let Some(mk) = op.measure.as_mut() {
                    mk.m = m;
                }
                out.push(op);
            }
            OpRole::AttentionDecode => {
                out.push(collective(
                    layer,
                    OpRole::Collective,
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
            OpRole::AttentionReduce => {
                let partial = seqs * q * hd * splits as f64 * (kv_lora + 1) as f64 * 4.0;
                op.shape.batch = heads * d;
                op.shape.k = splits;
                op.flops = partial / 4.0;
                op.bytes = partial + seqs * q * hd * kv_lora as f64 * ACT_BYTES;
                out.push(op);
                out.push(collective(
                    layer,
                    OpRole::Collective,
                    "dcp_lse_all_gather",
                    "ncclDevKernel_AllGather_RING_LL (dcp lse)",
                    CostFamily::AllGather,
                    tokens * heads * d * 4 * d,
                    dcp,
                ));
                out.push(collective(
                    layer,
                    OpRole::Collective,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eplb_places_replicas_on_the_hottest_experts_and_evens_the_ranks() {
        // Contiguous (no replicas): experts 0,1 on rank 0, 2,3 on rank 1.
        let (rows, touched) = ep_rank_rows(&[8, 4, 2, 0], 2, 0);
        assert_eq!((rows, touched), (vec![12.0, 2.0], vec![2.0, 1.0]));
        // Two replicas: expert 0 (8 per replica) gets one (4 each), then expert 0 and 1 tie at
        // 4 per replica and the lower index takes it (8/3 each). Replicas heaviest first onto
        // the lighter rank with a free slot (3 each): 4 -> r0, 8/3 -> r1, 8/3 -> r1,
        // 8/3 -> r0, 2 -> r1, 0 -> r0.
        let (rows, touched) = ep_rank_rows(&[8, 4, 2, 0], 2, 2);
        let t = 8.0 / 3.0;
        assert!((rows[0] - (4.0 + t)).abs() < 1e-12, "{rows:?}");
        assert!((rows[1] - (2.0 * t + 2.0)).abs() < 1e-12, "{rows:?}");
        assert_eq!(touched, vec![2.0, 3.0]);
        assert!((rows.iter().sum::<f64>() - 14.0).abs() < 1e-12);
    }

    #[test]
    fn eplb_heap_places_as_the_scan_of_every_rank_does() {
        // The placement rule as first written: scan every rank with a free slot per replica.
        fn by_scan(mut physical: Vec<f64>, n: usize) -> (Vec<f64>, Vec<f64>) {
            physical.sort_by(|a, b| b.total_cmp(a));
            let slots = physical.len().div_ceil(n);
            let (mut rows, mut touched, mut used) =
                (vec![0.0f64; n], vec![0.0f64; n], vec![0usize; n]);
            for load in physical {
                let r = (0..n)
                    .filter(|&r| used[r] < slots)
                    .min_by(|&a, &b| rows[a].total_cmp(&rows[b]).then(a.cmp(&b)))
                    .unwrap();
                rows[r] += load;
                used[r] += 1;
                touched[r] += f64::from(u8::from(load > 0.0));
            }
            (rows, touched)
        }
        use rand::Rng;
        let mut rng = crate::rng::seeded(5);
        for (e, n, redundant) in [(256, 144, 32), (256, 16, 0), (64, 8, 8), (16, 8, 0)] {
            // Skewed counts with zeros and ties.
            let counts: Vec<u32> = (0..e)
                .map(|_| (rng.random::<f64>().powi(3) * 40.0) as u32)
                .collect();
            let mut replicas = vec![1u32; e];
            for _ in 0..redundant {
                let hot = (0..e)
                    .max_by(|&a, &b| {
                        let la = counts[a] as f64 / replicas[a] as f64;
                        let lb = counts[b] as f64 / replicas[b] as f64;
                        la.total_cmp(&lb).then(b.cmp(&a))
                    })
                    .unwrap();
                replicas[hot] += 1;
            }
            let physical: Vec<f64> = (0..e)
                .flat_map(|x| {
                    let each = counts[x] as f64 / replicas[x] as f64;
                    std::iter::repeat_n(each, replicas[x] as usize)
                })
                .collect();
            let got = ep_rank_rows(&counts, n, redundant);
            if redundant > 0 {
                assert_eq!(got, by_scan(physical, n), "E={e} EP={n} R={redundant}");
            }
            let total: f64 = got.0.iter().sum();
            let want: u32 = counts.iter().sum();
            assert!((total - want as f64).abs() < 1e-9, "{total} vs {want}");
        }
    }

    #[test]
    fn all_to_all_bytes_per_element() {
        assert_eq!(a2a_bytes_per_element(EpComm::AllToAll, true), 2.0);
        assert_eq!(a2a_bytes_per_element(EpComm::RdmaLl, true), 1.03125);
        assert_eq!(a2a_bytes_per_element(EpComm::RdmaLl, false), 2.0);
        assert_eq!(a2a_message_bytes(16, 8, 7168, 2.0), 1_835_008);
    }
}
