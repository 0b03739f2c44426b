//! The scenario's settings in one table: each knob's name (one canonical spelling, the flag's
//! without its dashes; `_` for `-` is accepted wherever a key is read), what it takes, its
//! parser, its default (a value of [`ScenarioRequest::default`], shown as that value) and how it
//! applies to a request. The command-line flags, `whatif --vary` keys, `sweep --grid` keys,
//! throughput-CSV columns and the JSON scenario echo are all read from [`KNOBS`].

use super::deployment::{AllreduceImpl, CommKnobs, EpComm, Layout, Scenario};
use super::routing::{Routing, DEFAULT_ROUTING};
use super::{Algo, Proto, Runtime};
use crate::error::{Error, Result};
use crate::names::enum_names;

/// What a user asks for: names and paths still to load, and every knob's value. `Default` is
/// the bundled default scenario: Kimi-K2.5 on 8x RTX PRO 6000 over PCIe, TP=8, CUDA graphs,
/// NCCL Ring/LL with P2P, batch 32, context 4096. `ScenarioRequest::load` (in `sim`) loads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioRequest {
    pub model: String,
    pub system: String,
    /// Defaults to the system's GPUs shared over the data-parallel ranks and pipeline stages.
    pub tp: Option<u32>,
    /// `--pp`: with `tp` and the sizes below, the parallel layout as given (the loaded
    /// scenario's [`Layout`]; unset: off).
    pub pp: Option<u32>,
    /// `--dp`.
    pub dp: Option<u32>,
    /// `--ep` (unset: DP × TP under `--dp`, else off).
    pub ep: Option<u32>,
    /// `--dcp`.
    pub dcp: Option<u32>,
    /// `--redundant-experts`.
    pub redundant_experts: Option<u32>,
    /// `--tbo`.
    pub tbo: bool,
    pub batch: u32,
    pub context: u64,
    pub cuda_graphs: bool,
    pub proto: Proto,
    pub algo: Algo,
    pub p2p: bool,
    pub seed: u64,
    /// Profile name or path; defaults to the system's own.
    pub calibration: Option<String>,
    /// KV-cache element size in bytes.
    pub kv_bytes: f64,
    pub runtime: Runtime,
    /// Overrides the model's number of decoder layers (the reference step runs a few).
    pub layers: Option<usize>,
    /// `--routing`; None: the profile's fitted routing factor, else the runtime's default.
    pub routing: Option<Routing>,
    /// `--allreduce`, the NCCL knobs and the other communication settings.
    pub comm: CommKnobs,
}

impl Default for ScenarioRequest {
    fn default() -> Self {
        ScenarioRequest {
            model: "kimi-k2.5".into(),
            system: "rtx-pro-6000-8x-pcie".into(),
            tp: None,
            pp: None,
            dp: None,
            ep: None,
            dcp: None,
            redundant_experts: None,
            tbo: false,
            batch: 32,
            context: 4096,
            cuda_graphs: true,
            proto: Proto::Ll,
            algo: Algo::Ring,
            p2p: true,
            seed: 0,
            calibration: None,
            kv_bytes: 2.0,
            runtime: Runtime::Vllm,
            layers: None,
            routing: None,
            comm: CommKnobs::default(),
        }
    }
}

impl ScenarioRequest {
    /// The parallel layout the request gives, at tensor-parallel size `tp` (the request's
    /// own, or the default `load` works out when it gives none).
    pub fn layout(&self, tp: u32) -> Layout {
        Layout {
            tp,
            pp: self.pp,
            dp: self.dp,
            ep: self.ep,
            dcp: self.dcp,
            redundant_experts: self.redundant_experts,
            tbo: self.tbo,
        }
    }
    /// Pipeline stages the request gives (1: off), as [`Layout::pp_size`].
    pub fn pp_size(&self) -> u32 {
        self.pp.unwrap_or(1).max(1)
    }
    /// Data-parallel attention ranks the request gives (1: off), as [`Layout::dp_size`].
    pub fn dp_size(&self) -> u32 {
        self.dp.unwrap_or(1).max(1)
    }
}

/// The KV-cache element (`--kv-cache-dtype`); vLLM's own spellings are accepted too (`auto` and
/// the 16-bit types are 2 bytes, every `fp8*` 1 byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvDtype {
    Bf16,
    Fp8,
}

enum_names!(KvDtype, "KV-cache dtype",
    KvDtype::Bf16 => ["bf16", "bfloat16", "auto", "fp16", "float16", "half"],
    KvDtype::Fp8 => ["fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"]);

impl KvDtype {
    /// Bytes per element.
    pub(crate) fn bytes(self) -> f64 {
        match self {
            KvDtype::Bf16 => 2.0,
            KvDtype::Fp8 => 1.0,
        }
    }
    /// The dtype of an element size (None: not 1 or 2 bytes).
    pub(crate) fn of_bytes(b: f64) -> Option<Self> {
        if b == 1.0 {
            Some(KvDtype::Fp8)
        } else if b == 2.0 {
            Some(KvDtype::Bf16)
        } else {
            None
        }
    }
    /// A vLLM `--kv-cache-dtype` value: the names above, or any `fp8…` variant.
    pub(crate) fn parse(v: &str) -> Option<Self> {
        let l = v.trim().to_ascii_lowercase();
        match l.parse() {
            Ok(d) => Some(d),
            Err(_) if l.starts_with("fp8") => Some(KvDtype::Fp8),
            Err(_) => None,
        }
    }
}

/// One knob's value, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Whole(u64),
    Number(f64),
    /// on / off.
    Switch(bool),
    Text(String),
    Proto(Proto),
    Algo(Algo),
    Runtime(Runtime),
    KvDtype(KvDtype),
    Routing(Routing),
    Allreduce(AllreduceImpl),
    EpComm(EpComm),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Whole(n) => write!(f, "{n}"),
            Value::Number(x) => write!(f, "{x}"),
            Value::Switch(b) => f.write_str(if *b { "on" } else { "off" }),
            Value::Text(s) => f.write_str(s),
            Value::Proto(p) => f.write_str(p.name()),
            Value::Algo(a) => f.write_str(a.name()),
            Value::Runtime(r) => f.write_str(r.name()),
            Value::KvDtype(d) => f.write_str(d.name()),
            Value::Routing(r) => write!(f, "{r}"),
            Value::Allreduce(a) => f.write_str(a.name()),
            Value::EpComm(c) => f.write_str(c.name()),
        }
    }
}

impl Value {
    /// As JSON: numbers as numbers, on/off as booleans, the rest as their names.
    pub(crate) fn json(&self) -> serde_json::Value {
        match self {
            Value::Whole(n) => (*n).into(),
            Value::Number(x) => (*x).into(),
            Value::Switch(b) => (*b).into(),
            other => other.to_string().into(),
        }
    }
}

/// Where a knob may take several values in `sweep` (flags and `--grid` files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Not a sweep setting.
    No,
    /// One value for the whole grid.
    One,
    /// A list (and, for whole numbers, ranges): one grid axis.
    List,
}

/// One scenario setting.
pub struct Knob {
    /// The flag (`--nccl-proto`); the knob's name is the same without the dashes.
    pub flag: &'static str,
    pub(crate) value_name: &'static str,
    /// One line or two of help (the default is added as a value, see [`Knob::default_text`]).
    pub(crate) help: &'static str,
    /// What a value must be, in words: errors say "expected {expected}".
    pub expected: &'static str,
    pub sweep: Sweep,
    /// What leaving the knob out means, for a knob with no value by default.
    unset: Option<fn() -> String>,
    parse: fn(&str) -> std::result::Result<Value, String>,
    set: fn(&mut ScenarioRequest, Value),
    get: fn(&ScenarioRequest) -> Option<Value>,
    /// The value a loaded scenario runs with (the JSON echo); None: not echoed.
    loaded: Option<fn(&Scenario) -> Option<Value>>,
}

impl std::fmt::Debug for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Knob({})", self.flag)
    }
}

impl PartialEq for Knob {
    fn eq(&self, other: &Self) -> bool {
        self.flag == other.flag
    }
}

impl Knob {
    /// The canonical name: `nccl-proto`.
    pub fn name(&self) -> &'static str {
        &self.flag[2..]
    }
    /// The spelling with underscores: CSV columns, JSON keys, clap ids (`nccl_proto`).
    pub fn column(&self) -> String {
        self.name().replace('-', "_")
    }
    /// Parses a value; the error is what the value should have been (the caller names the
    /// knob and where the value came from).
    pub(crate) fn parse_value(&self, text: &str) -> std::result::Result<Value, String> {
        (self.parse)(text.trim())
    }
    /// Parses a value; the error names the flag, the value and what is expected.
    fn parse(&self, text: &str) -> Result<Value> {
        self.parse_value(text).map_err(|why| Error::Flag {
            flag: self.flag,
            value: crate::units::echo(text),
            expected: why,
        })
    }
    /// Sets the knob of a request to a parsed value.
    pub fn apply(&self, r: &mut ScenarioRequest, v: Value) {
        (self.set)(r, v)
    }
    /// Parses `text` and sets the knob of `r` to it.
    pub fn set(&self, r: &mut ScenarioRequest, text: &str) -> Result<()> {
        let v = self.parse(text)?;
        self.apply(r, v);
        Ok(())
    }
    /// The knob's value in `r` (None: unset, see [`Knob::default_text`]).
    pub fn get(&self, r: &ScenarioRequest) -> Option<Value> {
        (self.get)(r)
    }
    /// The value a loaded scenario runs with; None when the echo leaves this knob out.
    pub fn loaded(&self, s: &Scenario) -> Option<Option<Value>> {
        self.loaded.map(|f| f(s))
    }
    /// The default as a value (`LL`, `32`), or what leaving the knob out means.
    pub fn default_text(&self) -> String {
        match (self.get(&ScenarioRequest::default()), self.unset) {
            (Some(v), _) => v.to_string(),
            (None, Some(u)) => u(),
            (None, None) => "unset".into(),
        }
    }
    /// Help with the default: `Sequences decoded per step [default: 32]`.
    pub fn help_text(&self) -> String {
        format!("{} [default: {}]", self.help, self.default_text())
    }
}

/// The knob a key names (`nccl-proto`, `nccl_proto`, `NCCL-Proto`, `--nccl-proto`).
pub(crate) fn find(key: &str) -> Option<&'static Knob> {
    let k = key
        .trim()
        .trim_start_matches("--")
        .to_ascii_lowercase()
        .replace('_', "-");
    KNOBS.iter().find(|x| x.name() == k)
}

/// The knob of a canonical name; for names written in the code (a missing one is a bug the
/// table's tests catch).
pub fn knob(name: &str) -> &'static Knob {
    match find(name) {
        Some(k) => k,
        None => panic!("no knob named {name}"),
    }
}

/// Every knob's name, in table order, comma-separated (for "unknown key" errors).
pub fn names() -> String {
    KNOBS
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The knob of `key`, or an error naming where the key was read and listing the real keys.
pub(crate) fn lookup(key: &str, context: &str) -> Result<&'static Knob> {
    find(key).ok_or_else(|| Error::UnknownKey {
        place: context.to_string(),
        key: crate::units::echo(key).to_string(),
        allowed: names(),
    })
}

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
        super::limits::NCCL_CHANNELS,
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
        sweep: Sweep::No,
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
        flag: "--nccl-min-nchannels",
        value_name: "N",
        help: "NCCL_MIN_NCHANNELS: raises NCCL's channels above the count the profile was \
               measured with (the bytes term shrinks in proportion, no faster than the link; \
               see the profile's [nccl] section).",
        expected: "a whole number of channels, 1..=64",
        sweep: Sweep::No,
        unset: Some(|| "unset (NCCL's own)".into()),
        parse: channels,
        set: |r, v| r.comm.nccl_min_nchannels = Some(take!(v, Value::Whole(n) => n as u32)),
        get: |r| r.comm.nccl_min_nchannels.map(|n| Value::Whole(n.into())),
        loaded: Some(|s| s.comm.nccl_min_nchannels.map(|n| Value::Whole(n.into()))),
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
                super::limits::NCCL_BUFFSIZE,
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
        // A list in sweeps: the fast path plays each setting (`sim::fast::tbo`).
        sweep: Sweep::List,
        unset: None,
        parse: on_off,
        set: |r, v| r.tbo = take!(v, Value::Switch(b) => b),
        get: |r| Some(Value::Switch(r.tbo)),
        loaded: Some(|s| Some(Value::Switch(s.layout.tbo))),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_parses_its_default_to_the_default_request() {
        let d = ScenarioRequest::default();
        for k in KNOBS {
            if let Some(v) = k.get(&d) {
                let mut r = d.clone();
                k.set(&mut r, &v.to_string()).unwrap();
                assert_eq!(r, d, "{}", k.flag);
            }
            assert!(!k.default_text().is_empty(), "{}", k.flag);
        }
    }

    #[test]
    fn names_are_unique_and_spellings_resolve() {
        for (i, k) in KNOBS.iter().enumerate() {
            assert!(k.flag.starts_with("--"));
            assert!(KNOBS[..i].iter().all(|o| o.name() != k.name()));
            assert_eq!(find(&k.column()), Some(k));
            assert_eq!(find(&k.name().to_uppercase()), Some(k));
        }
        assert_eq!(knob("nccl_proto").flag, "--nccl-proto");
        let e = lookup("speed", "--vary").unwrap_err().to_string();
        assert!(e.contains("unknown key 'speed'"), "{e}");
        assert!(e.contains(&names()), "{e}");
    }

    #[test]
    fn errors_name_the_flag_and_the_choices() {
        let e = knob("nccl-proto").parse("LL9").unwrap_err().to_string();
        assert!(e.contains("--nccl-proto LL9") && e.contains("LL128"), "{e}");
        let e = knob("nccl-max-nchannels")
            .parse("65")
            .unwrap_err()
            .to_string();
        assert!(e.contains("65 is not in 1..=64"), "{e}");
        let e = knob("kv-cache-dtype")
            .parse("int4")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--kv-cache-dtype int4: expected bf16 or fp8"),
            "{e}"
        );
        assert!(knob("routing").default_text().contains(DEFAULT_ROUTING));
        assert!(knob("nccl-proto").help_text().ends_with("[default: LL]"));
        assert_eq!(
            knob("kv-cache-dtype").parse("fp8_e4m3").unwrap(),
            Value::KvDtype(KvDtype::Fp8)
        );
    }
}
