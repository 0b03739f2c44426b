//! Feed-forward blocks: the routed mixture of experts (with its shared expert on an auxiliary
//! stream, docs/sources.md §3.1 step 12) and the dense MLP.

use super::builder::{Builder, ACT_BYTES};
use super::op::{CostFamily, MeasureKey, Shape};
use super::role::OpRole;
use super::StepShape;
use crate::category::Category;
use crate::scenario::model::{MoeDims, Scoring};
use crate::scenario::{Runtime, WeightFormat};

fn moe_kernel(w: WeightFormat) -> &'static str {
    match w {
        WeightFormat::Int4 { .. } => "marlin_moe_wna16::Marlin",
        WeightFormat::Bf16 => "fused_moe_kernel",
        WeightFormat::Fp8Block { .. } => "fused_moe_kernel (fp8 w8a8 block)",
    }
}

pub(crate) fn moe_block(b: &mut Builder, s: &StepShape, moe: &MoeDims, layer: usize) {
    let t = s.tokens;
    let hidden = s.model.hidden as u64;
    let top_k = moe.top_k as u64;
    router(b, s, moe, layer);
    let shared = moe.shared_intermediate > 0;
    let shared_on_aux = shared && t <= s.shared_expert_stream_threshold;
    if shared_on_aux {
        b.on_aux(|b| shared_expert(b, s, moe, layer));
    }
    routed_experts(b, s, moe, layer);
    let routed_rows = (t * top_k) as f64;
    let hf = hidden as f64;
    b.push(
        OpRole::MoeSum,
        "moe_sum",
        "vllm::moe::moe_sum_kernel",
        CostFamily::MoeSum,
        Category::Moe,
        Shape {
            m: t,
            n: hidden,
            k: top_k,
            batch: 1,
        },
        "-",
        routed_rows * hf,
        (routed_rows + t as f64) * hf * ACT_BYTES,
    );

    if shared_on_aux {
        b.join();
    } else if shared {
        shared_expert(b, s, moe, layer);
    }
    if shared {
        b.elementwise(
            OpRole::AddSharedAndRouted,
            "add_shared_and_routed",
            "at::native::vectorized_elementwise_kernel (add)",
            Category::Elementwise,
            2 * t * hidden,
            t * hidden,
        );
        b.measured(MeasureKey::new("elementwise_add", t, hidden, 0));
    }
}

/// The router: the gate GEMM, the top-k gating and the alignment of the routed rows to blocks.
fn router(b: &mut Builder, s: &StepShape, moe: &MoeDims, layer: usize) {
    let m = s.model;
    let t = s.tokens;
    let hidden = m.hidden as u64;
    let experts = moe.n_routed_experts as u64;
    let top_k = moe.top_k as u64;
    let mlp = |p: &str| format!("model.layers.{layer}.mlp.{p}");

    // The gate is a plain GEMM kernel: a trace cannot tell it from other GEMMs, so it is counted
    // as one (the router category holds the top-k gating kernels).
    b.gemm(
        OpRole::RouterGate,
        "router_gate",
        "gemm (cuBLAS) router gate",
        Category::Gemm,
        t,
        experts,
        hidden,
        m.weight_format(&mlp("gate")),
    );
    let topk_kernel = match (moe.scoring, moe.n_group > 1) {
        (_, true) => "vllm::moe::grouped_topk_fused_kernel",
        (Scoring::Sigmoid, false) => "vllm::moe::topkGating (sigmoid)",
        (Scoring::Softmax, false) => "vllm::moe::topkGatingSoftmax",
    };
    b.push(
        OpRole::RouterTopk,
        "topk",
        topk_kernel,
        CostFamily::RouterTopk,
        Category::Router,
        Shape {
            m: t,
            n: experts,
            k: top_k,
            batch: 1,
        },
        "-",
        (t * experts) as f64 * 4.0,
        (t * experts) as f64 * ACT_BYTES + (t * top_k) as f64 * 8.0,
    );
    b.measured(MeasureKey::new("router_topk", t, experts, top_k));
    b.push(
        OpRole::MoeAlign,
        "moe_align_block_size",
        "vllm::moe::moe_align_block_size_kernel",
        CostFamily::MoeAlign,
        Category::Moe,
        Shape {
            m: t,
            n: experts,
            k: top_k,
            batch: 1,
        },
        "-",
        0.0,
        (t * top_k) as f64 * 12.0 + experts as f64 * 4.0,
    );
}

/// The routed experts' kernels: w13 GEMM, activation, w2 GEMM (the reference step's
/// permutation first), each at the experts the layer's tokens touch.
fn routed_experts(b: &mut Builder, s: &StepShape, moe: &MoeDims, layer: usize) {
    let m = s.model;
    let t = s.tokens;
    let hidden = m.hidden as u64;
    let top_k = moe.top_k as u64;
    let inter = (moe.moe_intermediate / s.tp) as u64;
    let mlp = |p: &str| format!("model.layers.{layer}.mlp.{p}");
    let reference = s.runtime == Runtime::Reference;
    if reference {
        // The reference step gathers each token's rows into expert order before the grouped GEMM.
        b.elementwise(
            OpRole::MoePermute,
            "moe_permute",
            "at::native::index_select (moe token permutation)",
            Category::Elementwise,
            t * top_k * hidden,
            t * top_k * hidden,
        );
    }
    let w = m.weight_format(&mlp("experts.0.gate_proj"));
    let touched = s.experts_touched(layer) as f64;
    let routed_rows = (t * top_k) as f64;
    let (hf, inf) = (hidden as f64, inter as f64);
    let bpw = w.bytes_per_weight();
    b.push(
        OpRole::ExpertsW13,
        "experts_w13",
        moe_kernel(w),
        CostFamily::moe_gemm_for(w),
        Category::Moe,
        Shape {
            m: t * top_k,
            n: 2 * inter,
            k: hidden,
            batch: touched as u64,
        },
        &w.name(),
        2.0 * routed_rows * 2.0 * inf * hf,
        touched * 2.0 * inf * hf * bpw + routed_rows * (hf + 2.0 * inf) * ACT_BYTES,
    );
    if w == WeightFormat::Bf16 {
        b.measured(MeasureKey::new("moe_grouped_bf16", t, 2 * inter, hidden));
    }
    b.elementwise(
        OpRole::ExpertsAct,
        "experts_act_and_mul",
        "vllm::act_and_mul_kernel<silu>",
        Category::Elementwise,
        t * top_k * 2 * inter,
        t * top_k * inter,
    );
    b.measured(MeasureKey::new("act_silu_mul", t * top_k, inter, 0));
    b.push(
        OpRole::ExpertsW2,
        "experts_w2",
        moe_kernel(w),
        CostFamily::moe_gemm_for(w),
        Category::Moe,
        Shape {
            m: t * top_k,
            n: hidden,
            k: inter,
            batch: touched as u64,
        },
        &w.name(),
        2.0 * routed_rows * hf * inf,
        touched * hf * inf * bpw + routed_rows * (inf + hf) * ACT_BYTES,
    );
    if w == WeightFormat::Bf16 {
        b.measured(MeasureKey::new("moe_grouped_bf16", t, hidden, inter));
    }
}

/// A gated MLP: gate_up GEMM, SiLU-and-mul, down GEMM, over `t` tokens with `inter` columns
/// per rank; `module` is the Hugging Face prefix of its weights, `label` names its ops.
struct Mlp<'a> {
    label: &'a str,
    module: String,
    kernels: [&'static str; 2],
    /// The roles of its gate_up GEMM, activation and down GEMM.
    roles: [OpRole; 3],
}

fn gated_mlp(b: &mut Builder, s: &StepShape, mlp: Mlp, inter: u64) {
    let m = s.model;
    let t = s.tokens;
    let hidden = m.hidden as u64;
    let weight = |p: &str| m.weight_format(&format!("{}.{p}", mlp.module));
    b.gemm(
        mlp.roles[0],
        &format!("{}_gate_up", mlp.label),
        mlp.kernels[0],
        Category::Gemm,
        t,
        2 * inter,
        hidden,
        weight("gate_proj"),
    );
    b.elementwise(
        mlp.roles[1],
        &format!("{}_act_and_mul", mlp.label),
        "vllm::act_and_mul_kernel<silu>",
        Category::Elementwise,
        t * 2 * inter,
        t * inter,
    );
    b.measured(MeasureKey::new("act_silu_mul", t, inter, 0));
    b.gemm(
        mlp.roles[2],
        &format!("{}_down", mlp.label),
        mlp.kernels[1],
        Category::Gemm,
        t,
        hidden,
        inter,
        weight("down_proj"),
    );
}

fn shared_expert(b: &mut Builder, s: &StepShape, moe: &MoeDims, layer: usize) {
    let mlp = Mlp {
        label: "shared_expert",
        module: format!("model.layers.{layer}.mlp.shared_experts"),
        kernels: [
            "gemm (cuBLAS) shared_experts.gate_up_proj",
            "gemm (cuBLAS) shared_experts.down_proj",
        ],
        roles: [
            OpRole::SharedExpertUp,
            OpRole::SharedExpertAct,
            OpRole::SharedExpertDown,
        ],
    };
    gated_mlp(b, s, mlp, (moe.shared_intermediate / s.tp) as u64);
}

pub(crate) fn dense_mlp(b: &mut Builder, s: &StepShape, layer: usize) {
    let mlp = Mlp {
        label: "mlp",
        module: format!("model.layers.{layer}.mlp"),
        kernels: [
            "gemm (cuBLAS) mlp.gate_up_proj",
            "gemm (cuBLAS) mlp.down_proj",
        ],
        roles: [OpRole::MlpUp, OpRole::MlpAct, OpRole::MlpDown],
    };
    gated_mlp(b, s, mlp, (s.model.dense_intermediate / s.tp) as u64);
}
