//! vLLM's all-reduce + RMSNorm fusion (`--fuse-allreduce-rms`; vLLM's
//! `compilation_config.pass_config.fuse_allreduce_rms`, docs/sources.md §3.3): the compile pass
//! replaces each tensor-parallel all-reduce and the RMSNorm (with its residual add) that follows
//! it by one FlashInfer kernel. Here each such pair of ops becomes one collective op carrying the
//! norm's shape, FLOPs and bytes (`Op::fused_norm`); `cost::fusion` prices it. Whether vLLM can
//! fuse on the GPU is checked when the scenario is loaded (`scenario::allreduce_rules`); the
//! size above which it leaves a pair unfused is the pricing's (the op sequence stays the same at
//! every batch, as the fast path needs).

use super::op::{CostFamily, FusedNorm, Op};
use super::Workload;

/// The kernel name a profile shows for the fused op.
pub(crate) const FUSED_KERNEL: &str =
    "flashinfer::trtllm_allreduce_fusion (all-reduce + residual add + RMSNorm)";

/// Merges every TP all-reduce directly followed by a norm over the same rows into one fused op.
pub(crate) fn apply(w: &mut Workload) {
    let mut out: Vec<Op> = Vec::with_capacity(w.ops.len());
    let mut ops = std::mem::take(&mut w.ops).into_iter().peekable();
    while let Some(op) = ops.next() {
        let takes_next = op.family == CostFamily::AllReduce
            && op.group == 0
            && ops.peek().is_some_and(|n| n.family == CostFamily::Norm);
        if !takes_next {
            out.push(op);
            continue;
        }
        let norm = ops.next().expect("peeked");
        out.push(fused(op, norm));
    }
    w.ops = out;
}

fn fused(ar: Op, norm: Op) -> Op {
    // A fused-add norm reads and writes the residual too (`Builder::norm`: four passes).
    let kind = if norm
        .measure
        .is_some_and(|m| m.family == "norm_fused_add_rms")
    {
        FusedNorm::AddRms
    } else {
        FusedNorm::Rms
    };
    Op {
        name: format!("{}_rms", ar.name),
        kernel: FUSED_KERNEL,
        shape: norm.shape,
        flops: norm.flops,
        bytes: norm.bytes,
        weights: norm.weights,
        fused_norm: Some(kind),
        ..ar
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::builder::Builder;
    use crate::workload::OpRole;

    #[test]
    fn an_all_reduce_takes_the_norm_after_it_only() {
        let mut b = Builder::new();
        b.collective(
            OpRole::MlpAllReduce,
            "ar",
            "nccl",
            CostFamily::AllReduce,
            14_336,
        );
        b.norm(
            "post_norm",
            "vllm::fused_add_rms_norm_kernel",
            1,
            7168,
            true,
        );
        b.norm("q_norm", "vllm::rms_norm_kernel", 1, 1536, false);
        b.collective(
            OpRole::Collective,
            "ag",
            "nccl",
            CostFamily::AllGather,
            14_336,
        );
        b.norm("other", "vllm::rms_norm_kernel", 1, 7168, false);
        let mut w = Workload {
            ops: b.ops,
            experts_touched: Vec::new(),
            routing: Default::default(),
        };
        let norm_bytes = w.ops[1].bytes;
        apply(&mut w);
        let names: Vec<&str> = w.ops.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["ar_rms", "q_norm", "ag", "other"]);
        let f = &w.ops[0];
        assert_eq!(f.fused_norm, Some(FusedNorm::AddRms));
        assert_eq!(f.message_bytes, 14_336);
        assert_eq!(f.bytes, norm_bytes);
        assert_eq!(f.family, CostFamily::AllReduce);
        assert_eq!(f.role, OpRole::MlpAllReduce);
    }
}
