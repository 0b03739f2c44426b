//! The one vocabulary shared by the simulator and the trace reader.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a stretch of GPU time was spent on. The simulator tags every op with one of these and
/// the trace reader classifies every kernel into one, so predictions and measurements can be
/// compared line by line. The order of the variants is the attribution priority used when
/// kernels of several categories overlap in time (see [`crate::breakdown`]): compute first,
/// then communication (so communication time is the *exposed* part), then copies, then idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Routed-expert work: expert GEMMs, token alignment/sorting, expert-output sum.
    Moe,
    /// Dense GEMMs and batched matmuls (projections, shared expert, lm_head).
    Gemm,
    /// Decode attention kernels and the KV-cache write.
    Attention,
    /// RMSNorm / LayerNorm, fused or not with the residual add.
    Norm,
    /// Pointwise kernels: activations, RoPE, adds, copies done by kernels, embedding lookups.
    Elementwise,
    /// The MoE router: gate GEMM and top-k gating.
    Router,
    /// Sampling: argmax, top-k/top-p, softmax over logits.
    Sampling,
    /// Collectives: all-reduce, all-gather, reduce-scatter, send/recv, ...
    Communication,
    /// Memcpy and memset operations.
    Memcpy,
    /// Time in the step window during which no kernel ran: launch gaps and host waits.
    Idle,
}

impl Category {
    pub const ALL: [Category; 10] = [
        Category::Moe,
        Category::Gemm,
        Category::Attention,
        Category::Norm,
        Category::Elementwise,
        Category::Router,
        Category::Sampling,
        Category::Communication,
        Category::Memcpy,
        Category::Idle,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            Category::Moe => "moe",
            Category::Gemm => "gemm",
            Category::Attention => "attention",
            Category::Norm => "norm",
            Category::Elementwise => "elementwise",
            Category::Router => "router",
            Category::Sampling => "sampling",
            Category::Communication => "communication",
            Category::Memcpy => "memcpy",
            Category::Idle => "idle",
        }
    }

    /// Position in [`Category::ALL`], for dense per-category arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn is_compute(self) -> bool {
        !matches!(
            self,
            Category::Communication | Category::Memcpy | Category::Idle
        )
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a category name: says which names are allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown category '{given}'; expected one of: {}", Category::ALL.map(|c| c.name()).join(", "))]
pub struct UnknownCategory {
    given: String,
}

impl FromStr for Category {
    type Err = UnknownCategory;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        // "allreduce" and "launch" are the words users and the seed report use.
        let alias = match lower.as_str() {
            "allreduce" | "all_reduce" | "comm" | "collective" => Some(Category::Communication),
            "launch" | "launch_gap" | "launch/idle" => Some(Category::Idle),
            "memset" => Some(Category::Memcpy),
            _ => None,
        };
        alias
            .or_else(|| Category::ALL.into_iter().find(|c| c.name() == lower))
            .ok_or(UnknownCategory {
                given: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_index_matches_order() {
        for (i, c) in Category::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
            assert_eq!(c.name().parse::<Category>().unwrap(), *c);
        }
        assert_eq!(
            "AllReduce".parse::<Category>().unwrap(),
            Category::Communication
        );
    }

    #[test]
    fn unknown_name_lists_choices() {
        let err = "gemv".parse::<Category>().unwrap_err().to_string();
        assert!(err.contains("'gemv'") && err.contains("attention") && err.contains("idle"));
    }
}
