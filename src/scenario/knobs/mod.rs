//! The scenario's settings in one table: each knob's name (one canonical spelling, the flag's
//! without its dashes; `_` for `-` is accepted wherever a key is read), what it takes, its
//! parser, its default (a value of [`ScenarioRequest::default`], shown as that value) and how it
//! applies to a request. The command-line flags, `whatif --vary` keys, `sweep --grid` keys,
//! throughput-CSV columns and the JSON scenario echo are all read from [`KNOBS`].

use super::deployment::{AllreduceImpl, CommKnobs, EpComm, Layout, Scenario};
use super::routing::Routing;
use super::{Algo, Proto, Runtime};
use crate::error::{Error, Result};
use crate::names::enum_names;

pub use table::KNOBS;

mod table;

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
    /// A list whose values are each their own fitted scenario (their collectives, their memory),
    /// the rows gaining the knob's column when the list is given. Such lists nest in the table's
    /// order, within the pipeline and data-parallel sizes; `sweep`'s flag, its `--grid` key, the
    /// layouts loaded, the work bound and the columns are all read from the row.
    Layout {
        /// The values, plural, as the work bound counts them ("NCCL channel counts").
        noun: &'static str,
        /// How to list them, for the flag's help (before the default).
        how: &'static str,
    },
}

impl Sweep {
    /// Each value its own fitted scenario ([`Sweep::Layout`]).
    pub fn is_layout(self) -> bool {
        matches!(self, Sweep::Layout { .. })
    }
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
    pub(crate) fn parse(&self, text: &str) -> Result<Value> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::routing::DEFAULT_ROUTING;

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
