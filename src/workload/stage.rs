//! Pipeline parallelism (`--pp`, vLLM's `--pipeline-parallel-size`): which layers each stage
//! holds, what crosses from one stage to the next, and one stage's decode step.
//!
//! **Layer split.** vLLM's `get_pp_indices` (`vllm/distributed/utils.py`): every stage gets
//! `layers / pp` layers and the remainder goes one each to the stages before the last, from the
//! second-to-last backwards (`partitions[-i] += 1` for i in 2 ..= remainder + 1), so the last
//! stage, which also runs the final norm, lm_head and the sampler, keeps the smaller share.
//! ASSUMPTION: from memory of vLLM's source (docs/sources.md has no entry); `VLLM_PP_LAYER_PARTITION`
//! (a user-given split) is not modelled. Stage 0 also holds the embedding; the last stage the
//! final norm, lm_head and sampling.
//!
//! **What crosses between stages.** The decoder's `IntermediateTensors`: `hidden_states` and
//! `residual`, BF16, one row of the hidden size per token each (2 × tokens × hidden × 2 B). vLLM's
//! worker sends them with `send_tensor_dict(..., all_gather_group=tp_group)`: each TP rank
//! sends its 1/tp slice to the rank of the same TP index in the next stage (NCCL send/recv), and
//! the receiving stage all-gathers each tensor within its TP group before its first layer
//! (`pp_recv_all_gather`, two per step). ASSUMPTION: from memory of vLLM V1's `gpu_worker.py`
//! and `parallel_state.py`; the tensor-dict metadata that travels over the CPU group is not
//! priced.

use super::Workload;
use crate::scenario::Scenario;
use std::ops::Range;

/// One pipeline stage: its index among `count` and the decoder layers it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub index: u32,
    pub count: u32,
    pub layers: Range<usize>,
}

impl Stage {
    /// The whole model as one stage (no pipeline parallelism).
    pub fn whole(num_layers: usize) -> Self {
        Stage {
            index: 0,
            count: 1,
            layers: 0..num_layers,
        }
    }
    /// Holds the embedding.
    pub fn is_first(&self) -> bool {
        self.index == 0
    }
    /// Holds the final norm, lm_head and the sampler.
    pub fn is_last(&self) -> bool {
        self.index + 1 >= self.count
    }
}

/// vLLM's `get_pp_indices` for every stage: the layer ranges of `pp` stages over
/// `num_layers` layers (see the module text). `pp` of 0 is taken as 1.
pub fn layer_split(num_layers: usize, pp: u32) -> Vec<Range<usize>> {
    let pp = pp.max(1) as usize;
    let mut parts = vec![num_layers / pp; pp];
    let rem = num_layers % pp;
    for i in 2..rem + 2 {
        parts[pp - i] += 1;
    }
    let mut start = 0;
    parts
        .into_iter()
        .map(|n| {
            let r = start..start + n;
            start += n;
            r
        })
        .collect()
}

/// The stages of a scenario (one, the whole model, when `--pp` is off).
pub fn stages(s: &Scenario) -> Vec<Stage> {
    let pp = s.layout.pp_size();
    layer_split(s.model.num_layers, pp)
        .into_iter()
        .enumerate()
        .map(|(i, layers)| Stage {
            index: i as u32,
            count: pp,
            layers,
        })
        .collect()
}

/// Bytes of the intermediate tensors one stage hands to the next for `tokens` rows:
/// hidden_states and residual, BF16.
pub fn intermediate_bytes(tokens: u64, hidden: u64) -> u64 {
    2 * tokens * hidden * super::builder::ACT_BYTES as u64
}

/// Whether vLLM splits the intermediate tensors over the TP group for the send (it does when
/// their element count divides by tp; else every rank sends the whole tensors and the receiver
/// gathers nothing).
pub fn split_over_tp(tokens: u64, hidden: u64, tp: u32) -> bool {
    tp > 1 && (tokens * hidden).is_multiple_of(tp as u64)
}

/// One stage's decode step for the scenario's batch (a micro-batch: set `s.batch` to it),
/// padded to the CUDA graph's captured size as a whole step is.
pub fn build_stage(s: &Scenario, stage: &Stage) -> Workload {
    super::build_part(s, 1, crate::scenario::cudagraph::PadRule::Decode, stage)
}
