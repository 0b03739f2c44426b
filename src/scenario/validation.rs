//! `Scenario::validate`: the combination of model, system, layout and knobs checked before
//! anything is built. Every error names the flag, the value and what would be accepted.

use super::deployment::{EpComm, Scenario, DEFAULT_GPU_MEMORY_UTILIZATION, MAX_BATCH, MAX_CONTEXT};
use crate::error::{Error, Result};

impl Scenario {
    /// Checks the combination; every error says what is wrong and what would be accepted.
    pub fn validate(&self) -> Result<()> {
        self.validate_tp_on_system()?;
        self.validate_tp_on_model()?;
        self.validate_batch_and_context()?;
        self.validate_memory()?;
        if let Some(moe) = &self.model.moe {
            self.routing
                .check(moe.n_routed_experts, moe.top_k, self.model.num_layers)?;
        }
        self.validate_parallel_and_link()?;
        self.validate_pp()?;
        super::allreduce_rules::check_fusion(self)?;
        Ok(())
    }

    /// `--tp` on the system: at least 1, within its GPUs, whole nodes when it spans several,
    /// and no intra-node link flags then.
    fn validate_tp_on_system(&self) -> Result<()> {
        let tp = self.layout.tp;
        if tp == 0 {
            return Err(Error::FlagUse {
                flag: "--tp",
                problem: "must be at least 1".into(),
            });
        }
        if tp > self.system.gpu_count && self.layout.dp_size() == 1 {
            return Err(Error::ScenarioSetting {
                flag: "--tp",
                value: tp.to_string(),
                problem: format!(
                    " needs {tp} GPUs but system '{}' has {}",
                    self.system.name, self.system.gpu_count
                ),
            });
        }
        let g = self.system.gpus_per_node;
        if tp > g && !tp.is_multiple_of(g) {
            return Err(Error::ScenarioSetting {
                flag: "--tp",
                value: tp.to_string(),
                problem: format!(
                    " spans nodes of {g} GPUs on system '{}' but is not a multiple of {g}: a TP group across nodes takes whole nodes",
                    self.system.name
                ),
            });
        }
        if self.system.spans_nodes(tp)
            && (self.comm.link_gbps.is_some() || self.comm.link_latency_us.is_some())
        {
            return Err(Error::FlagUse {
                flag: "--link-gbps / --link-latency-us",
                problem: format!(
                    "describe the link inside a node, but --tp {tp} spans {} nodes of system '{}', whose collectives are priced by its [network]: edit the system file's [network] instead",
                    self.system.nodes_spanned(tp),
                    self.system.name
                ),
            });
        }
        Ok(())
    }

    /// `--tp` on the model: it divides the attention heads, the KV heads as vLLM splits or
    /// replicates them, and the expert, shared-expert and MLP intermediate sizes.
    fn validate_tp_on_model(&self) -> Result<()> {
        let m = &self.model;
        let tp = self.layout.tp;
        let t = tp as usize;
        if !m.num_heads.is_multiple_of(t) {
            return Err(Error::ScenarioSetting {
                flag: "--tp",
                value: tp.to_string(),
                problem: format!(
                    " does not divide the {} attention heads of {} (use a divisor of {})",
                    m.num_heads, m.name, m.num_heads
                ),
            });
        }
        // vLLM's rule for the KV heads (QKVParallelLinear): with TP at least the KV heads, each
        // rank holds one head, replicated TP / heads times, so TP must be a multiple of them;
        // below, the heads are split, so TP must divide them. MLA keeps one latent per rank.
        let kv = m.num_kv_heads;
        if m.mla.is_none() {
            if t >= kv && !t.is_multiple_of(kv) {
                return Err(Error::ScenarioSetting {
                    flag: "--tp",
                    value: tp.to_string(),
                    problem: format!(
                        " is not a multiple of the {kv} KV heads of {} ({}: num_key_value_heads): with TP at or above the KV heads vLLM replicates each head over TP / {kv} ranks, so TP must be a multiple of {kv}",
                        m.name,
                        crate::units::path(&m.source)
                    ),
                });
            }
            if t < kv && !kv.is_multiple_of(t) {
                return Err(Error::ScenarioSetting {
                    flag: "--tp",
                    value: tp.to_string(),
                    problem: format!(
                        " does not divide the {kv} KV heads of {} ({}: num_key_value_heads): below the KV heads vLLM splits them over the ranks, so TP must divide {kv}",
                        m.name,
                        crate::units::path(&m.source)
                    ),
                });
            }
        }
        if let Some(moe) = &m.moe {
            if moe.moe_intermediate % t != 0 {
                return Err(Error::ScenarioSetting {
                    flag: "--tp",
                    value: tp.to_string(),
                    problem: format!(
                        " does not divide the expert intermediate size {} of {}",
                        moe.moe_intermediate, m.name
                    ),
                });
            }
            if moe.shared_intermediate % t != 0 {
                return Err(Error::ScenarioSetting {
                    flag: "--tp",
                    value: tp.to_string(),
                    problem: format!(
                        " does not divide the shared-expert intermediate size {} of {}",
                        moe.shared_intermediate, m.name
                    ),
                });
            }
        }
        if !m.dense_intermediate.is_multiple_of(t) {
            return Err(Error::ScenarioSetting {
                flag: "--tp",
                value: tp.to_string(),
                problem: format!(
                    " does not divide the MLP intermediate size {} of {}",
                    m.dense_intermediate, m.name
                ),
            });
        }
        Ok(())
    }

    /// `--batch` within the simulator's limit per data-parallel rank, `--context` within the
    /// model's positions and the simulator's limit.
    fn validate_batch_and_context(&self) -> Result<()> {
        let m = &self.model;
        // The limit is per data-parallel rank: each DP rank is an engine of its own, so a
        // DP72 pool holds 72 times one engine's sequences.
        let dp = self.layout.dp_size();
        let max = MAX_BATCH.saturating_mul(dp);
        if self.batch == 0 || self.batch > max {
            return Err(Error::ScenarioRange {
                flag: "--batch",
                value: self.batch.to_string(),
                expected: if dp > 1 {
                    format!("expected 1 to {max} sequences ({MAX_BATCH} per data-parallel rank × --dp {dp})")
                } else {
                    format!("expected 1 to {MAX_BATCH} sequences")
                },
            });
        }
        if self.context == 0 {
            return Err(Error::ScenarioRange {
                flag: "--context",
                value: "0".into(),
                expected: "a decode step reads at least one cached token".into(),
            });
        }
        if self.context > m.max_position_embeddings as u64 {
            return Err(Error::ScenarioSetting {
                flag: "--context",
                value: self.context.to_string(),
                problem: format!(
                    " is above {}'s max_position_embeddings = {} ({}); expected 1 to {} tokens",
                    m.name,
                    m.max_position_embeddings,
                    crate::units::path(&m.source),
                    m.max_position_embeddings
                ),
            });
        }
        if self.context > MAX_CONTEXT {
            return Err(Error::ScenarioRange {
                flag: "--context",
                value: self.context.to_string(),
                expected: format!("expected 1 to {MAX_CONTEXT} tokens"),
            });
        }
        Ok(())
    }

    /// `--gpu-memory-utilization` a share, the KV cache's element FP8 or BF16.
    fn validate_memory(&self) -> Result<()> {
        let u = self.gpu_memory_utilization;
        if !(u.is_finite() && u > 0.0 && u <= 1.0) {
            return Err(Error::ScenarioRange {
                flag: "--gpu-memory-utilization",
                value: crate::scenario::check::show(u),
                expected: format!("expected a share above 0 and at most 1 (vLLM's default is {DEFAULT_GPU_MEMORY_UTILIZATION})"),
            });
        }
        if !(self.kv_bytes == 1.0 || self.kv_bytes == 2.0) {
            return Err(Error::ScenarioSetting {
                flag: "KV-cache element size",
                value: self.kv_bytes.to_string(),
                problem: " bytes is not supported (expected 1 for FP8 or 2 for BF16)".into(),
            });
        }
        Ok(())
    }

    /// `--dp`, and `--ep` / `--ep-comm` / `--redundant-experts` / `--tbo` with it: each error
    /// names the flag, the value and what is expected.
    fn validate_dp(&self) -> Result<()> {
        let (m, tp, l, k) = (&self.model, self.layout.tp, &self.layout, &self.comm);
        if l.dp == Some(0) {
            return Err(Error::ScenarioRange {
                flag: "--dp",
                value: "0".into(),
                expected: "expected 1 (off) or more data-parallel ranks".into(),
            });
        }
        let dp = l.dp_size();
        let ranks = dp * tp;
        if dp > 1 {
            if ranks > self.system.gpu_count {
                return Err(Error::ScenarioSetting {
                    flag: "--dp",
                    value: dp.to_string(),
                    problem: format!(
                        " × --tp {tp} needs {ranks} GPUs but system '{}' has {} (expected --dp × --tp at most {})",
                        self.system.name, self.system.gpu_count, self.system.gpu_count
                    ),
                });
            }
            if m.moe.is_none() {
                return Err(Error::ScenarioSetting {
                    flag: "--dp",
                    value: dp.to_string(),
                    problem: format!(
                        ": decodesim models data parallel as vLLM's data-parallel attention with expert parallelism, and {} has no routed experts (a dense model's replicas are independent: simulate one with --tp {tp} and multiply)",
                        m.name
                    ),
                });
            }
            if let Some(ep) = l.ep.filter(|&e| e != ranks) {
                return Err(Error::ScenarioSetting {
                    flag: "--ep",
                    value: ep.to_string(),
                    problem: format!(
                        ": with --dp {dp} and --tp {tp} vLLM's expert-parallel group is DP × TP, so --ep must be {ranks} (or left out)"
                    ),
                });
            }
            if !k.ep_comm.is_all_to_all() {
                return Err(Error::ScenarioSetting {
                    flag: "--ep-comm",
                    value: k.ep_comm.name().into(),
                    problem: format!(
                        ": with --dp {dp} each data-parallel rank holds its own tokens, so the MoE layers dispatch them to the experts' ranks and combine them back: expected all-to-all or rdma-ll"
                    ),
                });
            }
        }
        self.validate_rdma_ll()?;
        self.validate_redundant_experts()?;
        self.validate_tbo()
    }

    /// `--ep-comm rdma-ll` across nodes: an RDMA network with GPUDirect RDMA.
    fn validate_rdma_ll(&self) -> Result<()> {
        let (l, k) = (&self.layout, &self.comm);
        let ep = l.ep_size();
        if k.ep_comm == EpComm::RdmaLl && ep > 1 && self.system.spans_nodes(ep) {
            let net = self.system.network.as_ref();
            let ok =
                net.is_some_and(|n| n.transport == super::network::Transport::Rdma && n.gpudirect);
            if !ok {
                return Err(Error::ScenarioSetting {
                    flag: "--ep-comm",
                    value: "rdma-ll".into(),
                    problem: format!(
                        ": the low-latency all-to-all posts RDMA writes from the GPU (DeepEP's IBGDA) and needs an RDMA network with GPUDirect RDMA; system '{}' has {} (expected all-to-all)",
                        self.system.name,
                        net.map_or("no network".to_string(), |n| format!(
                            "transport {}, gpudirect {}",
                            if n.transport == super::network::Transport::Rdma { "rdma" } else { "tcp" },
                            n.gpudirect
                        ))
                    ),
                });
            }
        }
        Ok(())
    }

    /// `--redundant-experts`: with expert parallelism, filling its ranks evenly.
    fn validate_redundant_experts(&self) -> Result<()> {
        let (m, l) = (&self.model, &self.layout);
        let ep = l.ep_size();
        if let Some(n) = l.redundant_experts.filter(|&n| n > 0) {
            let experts = m.moe.as_ref().map_or(0, |x| x.n_routed_experts as u32);
            if ep <= 1 {
                return Err(Error::FlagUse {
                    flag: "--redundant-experts",
                    problem: format!(
                        "{n} needs expert parallelism (--ep N or --dp N): replicas are placed on other ranks than the expert's own"
                    ),
                });
            }
            if n > experts || !(experts + n).is_multiple_of(ep) {
                return Err(Error::ScenarioSetting {
                    flag: "--redundant-experts",
                    value: n.to_string(),
                    problem: format!(
                        ": the {experts} routed experts of {} plus the replicas must fill the {ep} expert-parallel ranks evenly, as vLLM's EPLB requires (expected at most {experts}, with {experts} + N a multiple of {ep})",
                        m.name
                    ),
                });
            }
        }
        Ok(())
    }

    /// `--tbo on`: expert parallelism over the low-latency all-to-all, two sequences at least.
    fn validate_tbo(&self) -> Result<()> {
        let (l, k) = (&self.layout, &self.comm);
        let ep = l.ep_size();
        if l.tbo && !(ep > 1 && k.ep_comm == EpComm::RdmaLl) {
            return Err(Error::FlagUse {
                flag: "--tbo",
                problem: format!(
                    "on overlaps one micro-batch's all-to-all with the other's compute, which needs expert parallelism with a transfer that holds no SMs: expected --ep-comm rdma-ll with --ep N or --dp N (got --ep {ep}, --ep-comm {})",
                    k.ep_comm.name()
                ),
            });
        }
        if l.tbo && self.batch < 2 {
            return Err(Error::ScenarioSetting {
                flag: "--batch",
                value: self.batch.to_string(),
                problem: ": --tbo on splits the batch in two micro-batches; expected at least 2 sequences".into(),
            });
        }
        Ok(())
    }

    /// `--ep`: 1 (off) or the TP size, on a MoE model whose routed experts it divides.
    fn validate_ep(&self) -> Result<()> {
        let (m, tp, l) = (&self.model, self.layout.ranks(), &self.layout);
        if let Some(ep) = l.ep {
            if ep == 0 {
                return Err(Error::ScenarioRange {
                    flag: "--ep",
                    value: "0".into(),
                    expected: "expected 1 (off) or the TP size".into(),
                });
            }
            if ep > 1 {
                let Some(moe) = &m.moe else {
                    return Err(Error::ScenarioSetting {
                        flag: "--ep",
                        value: ep.to_string(),
                        problem: format!(
                            ": {} has no routed experts to spread (expert parallelism needs a MoE model)",
                            m.name
                        ),
                    });
                };
                // vLLM sizes the EP group as DP x TP (validate_dp checks it at --dp > 1).
                if ep != tp {
                    return Err(Error::ScenarioSetting {
                        flag: "--ep",
                        value: ep.to_string(),
                        problem: format!(
                            ": with data parallel 1 vLLM's expert-parallel group is the TP group, so --ep must be 1 or the TP size {tp} (--dp N makes it DP × TP)"
                        ),
                    });
                }
                if l.redundant() == 0 && !moe.n_routed_experts.is_multiple_of(ep as usize) {
                    return Err(Error::ScenarioSetting {
                        flag: "--ep",
                        value: ep.to_string(),
                        problem: format!(
                            " does not divide the {} routed experts of {} (use a divisor of {}, or --redundant-experts N so that {} + N is a multiple of {ep})",
                            moe.n_routed_experts, m.name, moe.n_routed_experts, moe.n_routed_experts
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// `--ep`, `--dcp`, `--link-gbps`, `--link-latency-us`: each error names the flag, the value
    /// and what is allowed.
    fn validate_parallel_and_link(&self) -> Result<()> {
        let (m, tp, k) = (&self.model, self.layout.tp, &self.comm);
        self.validate_dp()?;
        self.validate_ep()?;
        if let Some(dcp) = self.layout.dcp {
            if dcp == 0 || !tp.is_multiple_of(dcp) {
                return Err(Error::ScenarioSetting {
                    flag: "--dcp",
                    value: dcp.to_string(),
                    problem: format!(
                        " does not divide --tp {tp}: decode context parallelism shards the KV cache across ranks of the TP group (use a divisor of {tp})"
                    ),
                });
            }
            if dcp > 1 && m.mla.is_none() {
                return Err(Error::ScenarioSetting {
                    flag: "--dcp",
                    value: dcp.to_string(),
                    problem: format!(
                        ": decodesim shards the KV cache of MLA models only (vLLM's decode context parallelism began with MLA); {} uses grouped-query attention",
                        m.name
                    ),
                });
            }
        }
        if let Some(n) = k.nccl_max_nchannels {
            super::limits::flag_int_in(
                "--nccl-max-nchannels",
                n as u64,
                &super::limits::NCCL_CHANNELS,
            )?;
        }
        if let Some(n) = k.nccl_min_nchannels {
            super::limits::flag_int_in(
                "--nccl-min-nchannels",
                n as u64,
                &super::limits::NCCL_CHANNELS,
            )?;
            if let Some(m) = k.nccl_max_nchannels.filter(|&m| m < n) {
                return Err(Error::ScenarioRange {
                    flag: "--nccl-min-nchannels",
                    value: n.to_string(),
                    expected: format!("expected at most --nccl-max-nchannels ({m}): NCCL would cap the minimum at the maximum"),
                });
            }
        }
        if let Some(b) = k.nccl_buffsize {
            super::limits::flag_int_in("--nccl-buffsize", b, &super::limits::NCCL_BUFFSIZE)?;
        }
        if let Some(g) = k.link_gbps {
            super::limits::flag_in("--link-gbps", g, &super::limits::LINK_GBPS)?;
        }
        if let Some(t) = k.nccl_ll_threshold {
            if !(1..=1u64 << 34).contains(&t) {
                return Err(Error::ScenarioRange {
                    flag: "--nccl-ll-threshold",
                    value: t.to_string(),
                    expected: "expected a message size of 1 to 2^34 bytes".into(),
                });
            }
        }
        if let Some(l) = k.link_latency_us {
            super::limits::flag_in("--link-latency-us", l, &super::limits::LINK_LATENCY_US)?;
        }
        Ok(())
    }

    /// `--pp`: at least 1, tp × pp GPUs on the system, at most one stage per layer, and (when
    /// pipelined) every stage's TP group inside one node or on whole nodes. vLLM numbers the
    /// ranks stage-major (`parallel_state`: world ranks reshaped to (pp, tp)), so stage s holds
    /// ranks s·tp .. (s+1)·tp − 1, and the stages fill the nodes in order.
    fn validate_pp(&self) -> Result<()> {
        let Some(pp) = self.layout.pp else {
            return Ok(());
        };
        let (tp, sys) = (self.layout.tp, &self.system);
        if pp > 1 && (self.layout.dp_size() > 1 || self.layout.tbo) {
            return Err(Error::ScenarioSetting {
                flag: "--pp",
                value: pp.to_string(),
                problem: format!(
                    " with {}: pipeline stages combined with data-parallel attention or two-batch overlap are not modelled (expected --pp 1 with them, or --dp 1 and --tbo off with --pp)",
                    if self.layout.tbo { "--tbo on" } else { "--dp above 1" }
                ),
            });
        }
        if pp == 0 {
            return Err(Error::ScenarioRange {
                flag: "--pp",
                value: "0".into(),
                expected: "expected 1 (off) or more pipeline stages".into(),
            });
        }
        let gpus = tp as u64 * pp as u64;
        if gpus > sys.gpu_count as u64 {
            return Err(Error::ScenarioSetting {
                flag: "--pp",
                value: pp.to_string(),
                problem: format!(
                    " with --tp {tp} needs tp x pp = {gpus} GPUs but system '{}' has {} (expected tp x pp at most {})",
                    sys.name, sys.gpu_count, sys.gpu_count
                ),
            });
        }
        let layers = self.model.num_layers;
        if pp as usize > layers {
            return Err(Error::ScenarioSetting {
                flag: "--pp",
                value: pp.to_string(),
                problem: format!(
                    " is more stages than the {layers} decoder layers of {} (expected 1 to {layers}: every stage holds at least one layer)",
                    self.model.name
                ),
            });
        }
        let g = sys.gpus_per_node;
        if pp > 1 && tp < g && !g.is_multiple_of(tp) {
            return Err(Error::ScenarioSetting {
                flag: "--pp",
                value: pp.to_string(),
                problem: format!(
                    " with --tp {tp} on nodes of {g} GPUs would put a stage's TP group across two nodes (stage s holds ranks s x tp .. (s+1) x tp - 1, numbered node by node): expected --tp a divisor of {g} or a multiple of it"
                ),
            });
        }
        Ok(())
    }
}
