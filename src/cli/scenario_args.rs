//! The scenario flags shared by `simulate`, `compare` and `calibrate --from-trace`.

use crate::scenario::{Algo, Proto};
use crate::sim::ScenarioRequest;
use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtoArg {
    #[value(name = "LL", alias = "ll")]
    Ll,
    #[value(name = "LL128", alias = "ll128")]
    Ll128,
    #[value(name = "Simple", alias = "simple")]
    Simple,
    #[value(name = "auto")]
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AlgoArg {
    #[value(name = "Ring", alias = "ring")]
    Ring,
    #[value(name = "Tree", alias = "tree")]
    Tree,
    #[value(name = "auto")]
    Auto,
}

#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// Model: a bundled name (see `decodesim list`) or a path to a Hugging Face config.json.
    #[arg(long, default_value = "kimi-k2.5")]
    pub model: String,
    /// System: a bundled name (see `decodesim list`) or a path to a system TOML file.
    #[arg(long, default_value = "rtx-pro-6000-8x-pcie")]
    pub system: String,
    /// Tensor-parallel size [default: every GPU of the system].
    #[arg(long)]
    pub tp: Option<u32>,
    /// Sequences decoded per step.
    #[arg(long, default_value_t = 32)]
    pub batch: u32,
    /// Tokens already in each sequence's KV cache.
    #[arg(long, default_value_t = 4096)]
    pub context: u64,
    /// Replay the step as one CUDA graph (vLLM FULL graphs) or launch every kernel eagerly.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub cuda_graphs: OnOff,
    /// NCCL_PROTO ("auto" lets the cost model pick like NCCL's tuner).
    #[arg(long, value_enum, default_value_t = ProtoArg::Ll)]
    pub nccl_proto: ProtoArg,
    /// NCCL_ALGO.
    #[arg(long, value_enum, default_value_t = AlgoArg::Ring)]
    pub nccl_algo: AlgoArg,
    /// GPU peer-to-peer (off = NCCL_P2P_DISABLE=1: collectives go through host memory).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub p2p: OnOff,
    /// Seed of the jitter, skew and routing draws (same seed, same result).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Calibration profile: a name under data/calibration or a path to a profile TOML
    /// [default: the system's own].
    #[arg(long)]
    pub calibration: Option<String>,
    /// Kernel sequence: vLLM's decode step, or the project's PyTorch reference step
    /// (harness/refstep.py, the one the H200 traces in data/traces were captured from).
    #[arg(long, default_value = "vllm", value_parser = ["vllm", "reference"])]
    pub runtime: String,
    /// Override the model's number of decoder layers.
    #[arg(long)]
    pub layers: Option<usize>,
    /// KV-cache element: bf16 or fp8.
    #[arg(long, default_value = "bf16", value_parser = ["bf16", "fp8"])]
    pub kv_cache_dtype: String,
    /// How tokens spread over the routed experts: uniform, power-law:ALPHA (expert popularity
    /// ∝ rank^-ALPHA), or a CSV (`expert,tokens`, `layer,expert,tokens`, or
    /// `tokens,experts_touched,steps`) [default: the profile's fitted routing, else
    /// power-law:ALPHA of workload::routing::DEFAULT_ROUTING; uniform for --runtime reference].
    #[arg(long, value_name = "uniform|power-law:ALPHA|FILE", value_parser = parse_routing)]
    pub routing: Option<crate::scenario::routing::Routing>,
    /// Tensor-parallel all-reduce: NCCL, vLLM's custom kernel (an error where vLLM refuses it),
    /// or vLLM's own dispatch for the GPU and topology (8x PCIe: NCCL).
    #[arg(long, value_enum, default_value_t = AllreduceArg::Auto)]
    pub allreduce: AllreduceArg,
    /// NCCL_MAX_NCHANNELS: caps NCCL's channels (matters only below the count the profile was
    /// measured with; see the profile's [nccl] section).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub nccl_max_nchannels: Option<u32>,
    /// NCCL_BUFFSIZE in bytes: the Simple protocol's buffer per peer (matters only for Simple
    /// messages larger than one ring loop; LL never).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 34)))]
    pub nccl_buffsize: Option<u64>,
    /// Expert parallelism (vLLM's --enable-expert-parallel): each rank holds experts/N whole
    /// experts; N must be 1 or the TP size (data parallel 1).
    #[arg(long, value_name = "N")]
    pub ep: Option<u32>,
    /// How expert parallelism moves tokens: the all-reduce kept (every rank runs its experts on
    /// the whole batch; vLLM at data parallel 1), or all-to-all dispatch/combine replacing it
    /// [default: allreduce]. Only with --ep.
    #[arg(long, value_name = "allreduce|all-to-all", value_parser = parse_ep_comm)]
    pub ep_comm: Option<crate::scenario::deployment::EpComm>,
    /// Decode context parallelism (vLLM's --decode-context-parallel-size): the KV cache is
    /// sharded across N ranks of the TP group; N must divide TP.
    #[arg(long, value_name = "N")]
    pub dcp: Option<u32>,
    /// Hypothetical link bandwidth per direction (GB/s) for the collectives' path.
    #[arg(long, value_name = "GBPS")]
    pub link_gbps: Option<f64>,
    /// Hypothetical link latency per hop (µs) for the collectives' path.
    #[arg(long, value_name = "US")]
    pub link_latency_us: Option<f64>,
    /// What-if NCCL switch size under --nccl-proto auto: messages below BYTES priced as LL,
    /// from BYTES on as Simple (the measured table's regime rows, or the profile's laws).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..=(1u64 << 34)))]
    pub nccl_ll_threshold: Option<u64>,
}

fn parse_ep_comm(s: &str) -> std::result::Result<crate::scenario::deployment::EpComm, String> {
    s.parse().map_err(|e: crate::Error| e.to_string())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AllreduceArg {
    #[value(name = "nccl")]
    Nccl,
    #[value(name = "custom")]
    Custom,
    #[value(name = "auto")]
    Auto,
}

fn parse_routing(s: &str) -> std::result::Result<crate::scenario::routing::Routing, String> {
    crate::scenario::routing::Routing::parse(s).map_err(|e| e.to_string())
}

impl ScenarioArgs {
    /// Warns (standard error) about scenario flags that change nothing as given: `--ep-comm`
    /// without `--ep` (or with `--ep 1`), and `--nccl-proto LL128` where the collectives' path is not NVLink (the
    /// report also says so where it lists warnings).
    pub fn warn_noop_flags(&self) {
        // --ep 1 is no expert parallelism either: the experts stay split as with TP.
        if let (Some(c), true) = (self.ep_comm, self.ep.unwrap_or(1) <= 1) {
            super::output::warn(&format!(
                "--ep-comm {} does nothing without --ep N (expert parallelism, N > 1); ignored",
                match c {
                    crate::scenario::deployment::EpComm::AllToAll => "all-to-all",
                    crate::scenario::deployment::EpComm::AllReduce => "allreduce",
                }
            ));
        }
    }
    pub fn request(&self) -> ScenarioRequest {
        ScenarioRequest {
            model: self.model.clone(),
            system: self.system.clone(),
            tp: self.tp,
            batch: self.batch,
            context: self.context,
            cuda_graphs: self.cuda_graphs.is_on(),
            proto: match self.nccl_proto {
                ProtoArg::Ll => Proto::Ll,
                ProtoArg::Ll128 => Proto::Ll128,
                ProtoArg::Simple => Proto::Simple,
                ProtoArg::Auto => Proto::Auto,
            },
            algo: match self.nccl_algo {
                AlgoArg::Ring => Algo::Ring,
                AlgoArg::Tree => Algo::Tree,
                AlgoArg::Auto => Algo::Auto,
            },
            p2p: self.p2p.is_on(),
            seed: self.seed,
            calibration: self.calibration.clone(),
            kv_bytes: if self.kv_cache_dtype == "fp8" {
                1.0
            } else {
                2.0
            },
            runtime: if self.runtime == "reference" {
                crate::scenario::Runtime::Reference
            } else {
                crate::scenario::Runtime::Vllm
            },
            layers: self.layers,
            routing: self.routing.clone(),
            comm: crate::scenario::deployment::CommKnobs {
                allreduce: match self.allreduce {
                    AllreduceArg::Nccl => crate::scenario::deployment::AllreduceImpl::Nccl,
                    AllreduceArg::Custom => crate::scenario::deployment::AllreduceImpl::Custom,
                    AllreduceArg::Auto => crate::scenario::deployment::AllreduceImpl::Auto,
                },
                nccl_max_nchannels: self.nccl_max_nchannels,
                nccl_buffsize: self.nccl_buffsize,
                ep: self.ep,
                ep_comm: self.ep_comm.unwrap_or_default(),
                dcp: self.dcp,
                link_gbps: self.link_gbps,
                link_latency_us: self.link_latency_us,
                nccl_ll_threshold: self.nccl_ll_threshold,
            },
        }
    }
}

/// The warning for `--nccl-proto LL128` on a scenario whose collectives do not run over NVLink
/// (NCCL enables LL128 only there; the cost model prices NCCL's fallback), for the commands
/// whose report lists no per-scenario warnings (`sweep`, `whatif --vary`). None when the path
/// is NVLink or the scenario does not load (the command then reports why).
pub(super) fn ll128_warning(flag: &str, base: &ScenarioRequest) -> Option<String> {
    let mut r = base.clone();
    r.proto = Proto::Ll128;
    let (s, _) = r.load().ok()?;
    let path = s.comm_path();
    (path != crate::scenario::deployment::CommPath::Nvlink).then(|| {
        format!(
            "{flag} LL128 is not eligible on {} (the {} path): NCCL enables LL128 only over NVLink, so those collectives are priced as NCCL's fallback",
            s.system.name,
            path.name()
        )
    })
}
