//! [`KNOBS`], the table itself: each scenario setting's row, and the value parsers its rows share.

use super::{Knob, KvDtype, Sweep, Value};
use crate::error::Error;
use crate::scenario::routing::{Routing, DEFAULT_ROUTING};

fn whole(text: &str, max: u64, what: &str) -> std::result::Result<u64, String> {
    text.parse::<u64>()
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| format!("expected {what}"))
}

/// A whole number within a range, with clap's wording for a value outside it.
fn whole_in(
    text: &str,
    range: std::ops::RangeInclusive<u64>,
    what: &str,
) -> std::result::Result<u64, String> {
    let n: u64 = text.parse().map_err(|_| format!("expected {what}"))?;
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n} is not in {}..={}", range.start(), range.end()))
    }
}

fn number(text: &str, what: &str) -> std::result::Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("expected {what}"))
}

fn on_off(text: &str) -> std::result::Result<Value, String> {
    match text.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(Value::Switch(true)),
        "off" | "false" | "0" => Ok(Value::Switch(false)),
        _ => Err("expected on or off".into()),
    }
}

fn text(t: &str) -> std::result::Result<Value, String> {
    if t.is_empty() {
        Err("expected a name or a path".into())
    } else {
        Ok(Value::Text(t.to_string()))
    }
}

/// `--nccl-min-nchannels` / `--nccl-max-nchannels`: a channel count within NCCL's MAXCHANNELS.
fn channels(t: &str) -> std::result::Result<Value, String> {
    Ok(Value::Whole(whole_in(
        t,
        crate::scenario::limits::NCCL_CHANNELS,
        "a whole number of channels",
    )?))
}

fn named<T: std::str::FromStr<Err = Error>>(
    t: &str,
    wrap: fn(T) -> Value,
) -> std::result::Result<Value, String> {
    t.parse::<T>().map(wrap).map_err(|e| e.to_string())
}

macro_rules! take {
    ($v:expr, $p:pat => $e:expr) => {
        match $v {
            $p => $e,
            other => unreachable!("a knob got a value of another kind: {other:?}"),
        }
    };
}

const U32: u64 = u32::MAX as u64;

/// Every scenario setting, in the flags' order.
pub static KNOBS: &[Knob] = &[
    Knob {
        flag: "--model",
        value_name: "NAME|PATH",
        help:
            "Model: a bundled name (see `decodesim list`) or a path to a Hugging Face config.json.",
        expected: "a bundled model name or a config.json path",
        sweep: Sweep::One,
        unset: None,
        parse: text,
        set: |r, v| r.model = take!(v, Value::Text(s) => s),
        get: |r| Some(Value::Text(r.model.clone())),
        loaded: Some(|s| Some(Value::Text(s.model.name.clone()))),
    },
    Knob {
        flag: "--system",
        value_name: "NAME|PATH",
        help: "System: a bundled name (see `decodesim list`) or a path to a system TOML file.",
        expected: "a bundled system name or a system TOML path",
        sweep: Sweep::One,
        unset: None,
        parse: text,
        set: |r, v| r.system = take!(v, Value::Text(s) => s),
        get: |r| Some(Value::Text(r.system.clone())),
        loaded: Some(|s| Some(Value::Text(s.system.name.clone()))),
    },
    Knob {
        flag: "--tp",
        value_name: "N",
        help: "Tensor-parallel size.",
        expected: "a whole number of GPUs",
        sweep: Sweep::One,
        unset: Some(|| "the system's GPUs over --dp × --pp".into()),
        parse: |t| Ok(Value::Whole(whole(t, U32, "a whole number of GPUs")?)),
        set: |r, v| r.tp = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.tp.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| Some(Value::Whole(s.layout.tp.into()))),
    },
    Knob {
        flag: "--batch",
        value_name: "N",
        help: "Sequences decoded per step.",
        expected: "a whole number of sequences",
        sweep: Sweep::List,
        unset: None,
        parse: |t| Ok(Value::Whole(whole(t, U32, "a whole number of sequences")?)),
        set: |r, v| r.batch = take!(v, Value::Whole(n) => n as u32),
        get: |r| Some(Value::Whole(r.batch.into())),
        loaded: Some(|s| Some(Value::Whole(s.batch.into()))),
    },
    Knob {
        flag: "--context",
        value_name: "TOKENS",
        help: "Tokens already in each sequence's KV cache.",
        expected: "a whole number of tokens",
        sweep: Sweep::List,
        unset: None,
        parse: |t| {
            Ok(Value::Whole(whole(
                t,
                u64::MAX,
                "a whole number of tokens",
            )?))
        },
        set: |r, v| r.context = take!(v, Value::Whole(n) => n),
        get: |r| Some(Value::Whole(r.context)),
        loaded: Some(|s| Some(Value::Whole(s.context))),
    },
    Knob {
        flag: "--cuda-graphs",
        value_name: "on|off",
        help:
            "Replay the step as one CUDA graph (vLLM FULL graphs) or launch every kernel eagerly.",
        expected: "on or off",
        sweep: Sweep::List,
        unset: None,
        parse: on_off,
        set: |r, v| r.cuda_graphs = take!(v, Value::Switch(b) => b),
        get: |r| Some(Value::Switch(r.cuda_graphs)),
        loaded: Some(|s| Some(Value::Switch(s.cuda_graphs))),
    },
    Knob {
        flag: "--nccl-proto",
        value_name: "LL|LL128|Simple|auto",
        help: "NCCL_PROTO (\"auto\" lets the cost model pick like NCCL's tuner).",
        expected: "LL, LL128, Simple or auto",
        sweep: Sweep::List,
        unset: None,
        parse: |t| named(t, Value::Proto),
        set: |r, v| r.proto = take!(v, Value::Proto(p) => p),
        get: |r| Some(Value::Proto(r.proto)),
        loaded: Some(|s| Some(Value::Proto(s.nccl.proto))),
    },
    Knob {
        flag: "--nccl-algo",
        value_name: "Ring|Tree|auto",
        help: "NCCL_ALGO.",
        expected: "Ring, Tree or auto",
        sweep: Sweep::List,
        unset: None,
        parse: |t| named(t, Value::Algo),
        set: |r, v| r.algo = take!(v, Value::Algo(a) => a),
        get: |r| Some(Value::Algo(r.algo)),
        loaded: Some(|s| Some(Value::Algo(s.nccl.algo))),
    },
    Knob {
        flag: "--p2p",
        value_name: "on|off",
        help: "GPU peer-to-peer (off = NCCL_P2P_DISABLE=1: collectives go through host memory).",
        expected: "on or off",
        sweep: Sweep::No,
        unset: None,
        parse: on_off,
        set: |r, v| r.p2p = take!(v, Value::Switch(b) => b),
        get: |r| Some(Value::Switch(r.p2p)),
        loaded: Some(|s| Some(Value::Switch(s.nccl.p2p))),
    },
    Knob {
        flag: "--seed",
        value_name: "N",
        help: "Seed of the jitter, skew and routing draws (same seed, same result).",
        expected: "a whole number",
        sweep: Sweep::No,
        unset: None,
        parse: |t| Ok(Value::Whole(whole(t, u64::MAX, "a whole number")?)),
        set: |r, v| r.seed = take!(v, Value::Whole(n) => n),
        get: |r| Some(Value::Whole(r.seed)),
        loaded: Some(|s| Some(Value::Whole(s.seed))),
    },
    Knob {
        flag: "--calibration",
        value_name: "NAME|PATH",
        help: "Calibration profile: a name under data/calibration or a path to a profile TOML.",
        expected: "a profile name or path",
        sweep: Sweep::One,
        unset: Some(|| "the system's own".into()),
        parse: text,
        set: |r, v| r.calibration = Some(take!(v, Value::Text(s) => s)),
        get: |r| r.calibration.clone().map(Value::Text),
        // The profile is echoed on its own (`calibration` beside `scenario`).
        loaded: None,
    },
    Knob {
        flag: "--runtime",
        value_name: "vllm|reference",
        help: "Kernel sequence: vLLM's decode step, or the project's PyTorch reference step \
               (harness/refstep.py, the one the H200 traces in data/traces were captured from).",
        expected: "vllm or reference",
        sweep: Sweep::No,
        unset: None,
        parse: |t| named(t, Value::Runtime),
        set: |r, v| r.runtime = take!(v, Value::Runtime(x) => x),
        get: |r| Some(Value::Runtime(r.runtime)),
        loaded: Some(|s| Some(Value::Runtime(s.runtime))),
    },
    Knob {
        flag: "--layers",
        value_name: "N",
        help: "Override the model's number of decoder layers.",
        expected: "a whole number of layers",
        sweep: Sweep::No,
        unset: Some(|| "the model's".into()),
        parse: |t| Ok(Value::Whole(whole(t, U32, "a whole number of layers")?)),
        set: |r, v| r.layers = Some(take!(v, Value::Whole(n) => n as usize)),
        get: |r| r.layers.map(|n| Value::Whole(n as u64)),
        loaded: Some(|s| Some(Value::Whole(s.model.num_layers as u64))),
    },
    Knob {
        flag: "--kv-cache-dtype",
        value_name: "bf16|fp8",
        help: "KV-cache element: bf16 or fp8 (vLLM's spellings too: auto, fp8_e4m3, ...).",
        expected: "bf16 or fp8",
        sweep: Sweep::One,
        unset: None,
        parse: |t| {
            KvDtype::parse(t)
                .map(Value::KvDtype)
                .ok_or_else(|| "expected bf16 or fp8".to_string())
        },
        set: |r, v| r.kv_bytes = take!(v, Value::KvDtype(d) => d.bytes()),
        get: |r| KvDtype::of_bytes(r.kv_bytes).map(Value::KvDtype),
        loaded: Some(|s| KvDtype::of_bytes(s.kv_bytes).map(Value::KvDtype)),
    },
    Knob {
        flag: "--routing",
        value_name: "uniform|power-law:ALPHA|FILE",
        help: "How tokens spread over the routed experts: uniform, power-law:ALPHA (expert \
               popularity ∝ rank^-ALPHA), or a CSV (`expert,tokens`, `layer,expert,tokens`, or \
               `tokens,experts_touched,steps`).",
        expected: "uniform, power-law:ALPHA or a routing CSV",
        sweep: Sweep::No,
        unset: Some(|| {
            format!(
                "the profile's fitted routing, else {DEFAULT_ROUTING}; uniform for --runtime reference"
            )
        }),
        parse: |t| {
            Routing::parse(t)
                .map(Value::Routing)
                .map_err(|e| e.to_string())
        },
        set: |r, v| r.routing = Some(take!(v, Value::Routing(x) => x)),
        get: |r| r.routing.clone().map(Value::Routing),
        loaded: Some(|s| Some(Value::Routing(s.routing.clone()))),
    },
    Knob {
        flag: "--allreduce",
        value_name: "nccl|custom|auto",
        help:
            "Tensor-parallel all-reduce: NCCL, vLLM's custom kernel (an error where vLLM refuses \
               it), or vLLM's own dispatch for the GPU and topology (8x PCIe: NCCL).",
        expected: "nccl, custom or auto",
        // Each choice is its own fitted scenario: it changes which kernel every all-reduce is.
        sweep: Sweep::Layout {
            noun: "all-reduce choices",
            how: "A list (nccl,custom); each choice is its own fitted scenario (the rows gain an \
                  allreduce column).",
        },
        unset: None,
        parse: |t| named(t, Value::Allreduce),
        set: |r, v| r.comm.allreduce = take!(v, Value::Allreduce(a) => a),
        get: |r| Some(Value::Allreduce(r.comm.allreduce)),
        loaded: Some(|s| Some(Value::Allreduce(s.comm.allreduce))),
    },
    Knob {
        flag: "--fuse-allreduce-rms",
        value_name: "on|off",
        help: "vLLM's all-reduce + RMSNorm fusion (compilation_config.pass_config.\
               fuse_allreduce_rms): each TP all-reduce and the residual add + RMSNorm after it \
               run as one FlashInfer kernel; refused where vLLM cannot fuse (capabilities other \
               than 9.0, 10.0, 10.3, 10.7).",
        expected: "on or off",
        sweep: Sweep::One,
        unset: None,
        parse: on_off,
        set: |r, v| r.comm.fuse_allreduce_rms = take!(v, Value::Switch(b) => b),
        get: |r| Some(Value::Switch(r.comm.fuse_allreduce_rms)),
        loaded: Some(|s| Some(Value::Switch(s.comm.fuse_allreduce_rms))),
    },
    Knob {
        flag: "--nccl-max-nchannels",
        value_name: "N",
        help: "NCCL_MAX_NCHANNELS: caps NCCL's channels (matters only below the count the profile \
               was measured with or --nccl-min-nchannels; see the profile's [nccl] section).",
        expected: "a whole number of channels, 1..=64",
        sweep: Sweep::No,
        unset: Some(|| "unset (NCCL's own)".into()),
        parse: channels,
        set: |r, v| r.comm.nccl_max_nchannels = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.comm.nccl_max_nchannels.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| s.comm.nccl_max_nchannels.map(|n| Value::Whole(n.into()))),
    },
    Knob {
        flag: "--nccl-buffsize",
        value_name: "BYTES",
        help: "NCCL_BUFFSIZE in bytes: the Simple protocol's buffer per peer (matters only for \
               Simple messages larger than one ring loop; LL never).",
        expected: "a whole number of bytes, 1024..=17179869184",
        sweep: Sweep::No,
        unset: Some(|| "unset (NCCL's 4 MiB)".into()),
        parse: |t| {
            Ok(Value::Whole(whole_in(
                t,
                crate::scenario::limits::NCCL_BUFFSIZE,
                "a whole number of bytes",
            )?))
        },
        set: |r, v| r.comm.nccl_buffsize = Some(take!(v, Value::Whole(n) => n)),
        get: |r| r.comm.nccl_buffsize.map(Value::Whole),
        loaded: Some(|s| s.comm.nccl_buffsize.map(Value::Whole)),
    },
    Knob {
        flag: "--ep",
        value_name: "N",
        help: "Expert parallelism (vLLM's --enable-expert-parallel): each rank holds experts/N \
               whole experts; N must be 1 or the TP size (data parallel 1), DP × TP with --dp.",
        expected: "1 or the TP size",
        sweep: Sweep::One,
        unset: Some(|| "1 (off)".into()),
        parse: |t| Ok(Value::Whole(whole(t, U32, "1 or the TP size")?)),
        set: |r, v| r.ep = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.ep.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| Some(Value::Whole(s.layout.ep_size().into()))),
    },
    Knob {
        flag: "--ep-comm",
        value_name: "allreduce|all-to-all|rdma-ll",
        help: "How expert parallelism moves tokens: the all-reduce kept (every rank runs its \
               experts on the whole batch; vLLM at data parallel 1), or all-to-all \
               dispatch/combine replacing it (NCCL's, holding SMs), or rdma-ll: DeepEP-style \
               low-latency RDMA, FP8 dispatch, no SMs held. Only with --ep or --dp.",
        expected: "allreduce, all-to-all or rdma-ll",
        sweep: Sweep::One,
        unset: None,
        parse: |t| named(t, Value::EpComm),
        set: |r, v| r.comm.ep_comm = take!(v, Value::EpComm(c) => c),
        get: |r| Some(Value::EpComm(r.comm.ep_comm)),
        loaded: Some(|s| Some(Value::EpComm(s.comm.ep_comm))),
    },
    Knob {
        flag: "--dcp",
        value_name: "N",
        help: "Decode context parallelism (vLLM's --decode-context-parallel-size): the KV cache \
               is sharded across N ranks of the TP group; N must divide TP.",
        expected: "a divisor of the TP size",
        sweep: Sweep::No,
        unset: Some(|| "1 (off)".into()),
        parse: |t| Ok(Value::Whole(whole(t, U32, "a divisor of the TP size")?)),
        set: |r, v| r.dcp = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.dcp.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| Some(Value::Whole(s.layout.dcp_size().into()))),
    },
    Knob {
        flag: "--link-gbps",
        value_name: "GBPS",
        help: "Hypothetical link bandwidth per direction (GB/s) for the collectives' path.",
        expected: "GB/s per direction",
        sweep: Sweep::No,
        unset: Some(|| "the system's link".into()),
        parse: |t| Ok(Value::Number(number(t, "GB/s per direction")?)),
        set: |r, v| r.comm.link_gbps = Some(take!(v, Value::Number(x) => x)),
        get: |r| r.comm.link_gbps.map(Value::Number),
        loaded: Some(|s| s.comm.link_gbps.map(Value::Number)),
    },
    Knob {
        flag: "--link-latency-us",
        value_name: "US",
        help: "Hypothetical link latency per hop (µs) for the collectives' path.",
        expected: "µs per hop",
        sweep: Sweep::No,
        unset: Some(|| "the system's link".into()),
        parse: |t| Ok(Value::Number(number(t, "µs per hop")?)),
        set: |r, v| r.comm.link_latency_us = Some(take!(v, Value::Number(x) => x)),
        get: |r| r.comm.link_latency_us.map(Value::Number),
        loaded: Some(|s| s.comm.link_latency_us.map(Value::Number)),
    },
    Knob {
        flag: "--nccl-ll-threshold",
        value_name: "BYTES",
        help: "What-if NCCL switch size under --nccl-proto auto: messages below BYTES priced as \
               LL, from BYTES on as Simple (the measured table's regime rows, or the profile's \
               laws).",
        expected: "a message size of 1 to 2^34 bytes",
        sweep: Sweep::No,
        unset: Some(|| "NCCL's own tuner choice".into()),
        parse: |t| {
            Ok(Value::Whole(whole_in(
                t,
                1..=(1u64 << 34),
                "a whole number of bytes",
            )?))
        },
        set: |r, v| r.comm.nccl_ll_threshold = Some(take!(v, Value::Whole(n) => n)),
        get: |r| r.comm.nccl_ll_threshold.map(Value::Whole),
        loaded: Some(|s| s.comm.nccl_ll_threshold.map(Value::Whole)),
    },
    Knob {
        flag: "--pp",
        value_name: "N",
        help: "Pipeline parallelism (vLLM's --pipeline-parallel-size): the layers split into N \
               stages of --tp GPUs each (tp x pp GPUs), decoding N micro-batches in flight; the \
               step time is one sequence's time per token.",
        expected: "a whole number of stages, 1 or more",
        // A list in sweeps: the fast path fits each value's stages (`sim::fast::pipeline`).
        sweep: Sweep::List,
        unset: Some(|| "1 (off)".into()),
        parse: |t| {
            Ok(Value::Whole(whole(
                t,
                U32,
                "a whole number of stages, 1 or more",
            )?))
        },
        set: |r, v| r.pp = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.pp.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| Some(Value::Whole(s.layout.pp_size().into()))),
    },
    Knob {
        flag: "--dp",
        value_name: "N",
        help: "Data-parallel attention (vLLM's --data-parallel-size with \
               --enable-expert-parallel): N replicas of attention and dense layers (TP inside \
               each), --batch split over them, routed experts over all N × TP GPUs (--ep \
               defaults to N × TP); MoE models, with --ep-comm all-to-all or rdma-ll.",
        expected: "a whole number of data-parallel ranks",
        sweep: Sweep::List,
        unset: Some(|| "1 (off)".into()),
        parse: |t| {
            Ok(Value::Whole(whole(
                t,
                U32,
                "a whole number of data-parallel ranks",
            )?))
        },
        set: |r, v| r.dp = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.dp.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| Some(Value::Whole(s.layout.dp_size().into()))),
    },
    Knob {
        flag: "--redundant-experts",
        value_name: "N",
        help: "EPLB: N extra routed-expert replicas on the hottest experts, placed to even the \
               ranks' loads (vLLM's num_redundant_experts); needs --ep or --dp.",
        expected: "a whole number of expert replicas",
        sweep: Sweep::One,
        unset: Some(|| "0 (off)".into()),
        parse: |t| {
            Ok(Value::Whole(whole(
                t,
                U32,
                "a whole number of expert replicas",
            )?))
        },
        set: |r, v| r.redundant_experts = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.redundant_experts.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| Some(Value::Whole(s.layout.redundant().into()))),
    },
    Knob {
        flag: "--tbo",
        value_name: "on|off",
        help: "Two-batch overlap: the step in two micro-batches, each one's all-to-all \
               overlapping the other's compute; needs --ep-comm rdma-ll.",
        expected: "on or off",
        // Each setting is its own fitted scenario: the fast path plays it (`sim::fast::tbo`).
        sweep: Sweep::Layout {
            noun: "two-batch-overlap settings",
            how: "off, on or off,on (each its own fitted scenario; the rows gain a tbo column).",
        },
        unset: None,
        parse: on_off,
        set: |r, v| r.tbo = take!(v, Value::Switch(b) => b),
        get: |r| Some(Value::Switch(r.tbo)),
        loaded: Some(|s| Some(Value::Switch(s.layout.tbo))),
    },
    // After --tbo: the layout settings a sweep lists nest in the table's order (overlap outside
    // the channel counts), and their columns follow it.
    Knob {
        flag: "--nccl-min-nchannels",
        value_name: "N",
        help: "NCCL_MIN_NCHANNELS: raises NCCL's channels above the count the profile was \
               measured with (the bytes term shrinks in proportion, no faster than the link; \
               see the profile's [nccl] section).",
        expected: "a whole number of channels, 1..=64",
        // Each count is its own fitted scenario: the channels change the collectives and NCCL's
        // buffers in memory.
        sweep: Sweep::Layout {
            noun: "NCCL channel counts",
            how: "A list (2,8,32); each count is its own fitted scenario (the rows gain a \
                  nccl_min_nchannels column).",
        },
        unset: Some(|| "unset (NCCL's own)".into()),
        parse: channels,
        set: |r, v| r.comm.nccl_min_nchannels = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.comm.nccl_min_nchannels.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| s.comm.nccl_min_nchannels.map(|n| Value::Whole(n.into()))),
    },
];
