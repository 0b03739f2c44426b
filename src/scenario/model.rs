//! A model's shape, read from its Hugging Face `config.json`.
//!
//! Supported families: DeepSeek-V3 / Kimi-K2 (MLA attention + MoE; Kimi nests the LLM under
//! `text_config`), Qwen3-MoE and MiniMax-M2 (GQA + MoE), Llama / Qwen / Mistral (GQA dense).
//! `quantization_config` is honoured: compressed-tensors pack-quantized INT4 with its `ignore`
//! list, and FP8 block quantization.

use super::check;
use super::quantization::parse_quantization;
pub use super::quantization::{Quantization, WeightFormat};
use crate::error::{Error, Result};
use serde_json::Value;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

/// Which per-layer kernel sequence the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Multi-head latent attention + mixture of experts (DeepSeek-V3, Kimi-K2).
    MlaMoe,
    /// Grouped-query attention + mixture of experts (Qwen3-MoE, MiniMax-M2).
    GqaMoe,
    /// Grouped-query attention + dense MLP (Llama).
    GqaDense,
}

impl Family {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Family::MlaMoe => "mla+moe",
            Family::GqaMoe => "gqa+moe",
            Family::GqaDense => "gqa-dense",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MlaDims {
    /// None when queries are projected directly (no LoRA), as in DeepSeek-V2-Lite.
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scoring {
    Sigmoid,
    Softmax,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MoeDims {
    pub n_routed_experts: usize,
    pub top_k: usize,
    pub moe_intermediate: usize,
    pub n_shared_experts: usize,
    /// Intermediate size of the shared expert block (n_shared × moe_intermediate for DeepSeek).
    pub shared_intermediate: usize,
    /// Layers before this index are dense (DeepSeek-V3 / Kimi `first_k_dense_replace`).
    pub first_k_dense: usize,
    /// Every this many layers from 0 is MoE (DeepSeek `moe_layer_freq`, default 1).
    moe_layer_freq: usize,
    /// Layer i is MoE only when (i + 1) is a multiple of this (Qwen-MoE `decoder_sparse_step`,
    /// default 1).
    decoder_sparse_step: usize,
    /// Layers that keep a dense MLP whatever the rules above say (Qwen-MoE `mlp_only_layers`).
    mlp_only_layers: Vec<usize>,
    pub n_group: usize,
    pub topk_group: usize,
    pub scoring: Scoring,
}

impl MoeDims {
    /// vLLM's rule for which layers are MoE (see [`ModelSpec::is_layer_moe`]).
    fn is_layer_moe(&self, layer: usize) -> bool {
        layer >= self.first_k_dense
            && layer.is_multiple_of(self.moe_layer_freq.max(1))
            && (layer + 1).is_multiple_of(self.decoder_sparse_step.max(1))
            && !self.mlp_only_layers.contains(&layer)
    }

    /// Every layer MoE (a one-layer MTP module built from the target's shape).
    pub(crate) fn all_layers_moe(&mut self) {
        self.first_k_dense = 0;
        self.moe_layer_freq = 1;
        self.decoder_sparse_step = 1;
        self.mlp_only_layers.clear();
    }
}

#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub name: String,
    pub(crate) source: PathBuf,
    pub family: Family,
    pub num_layers: usize,
    pub hidden: usize,
    pub vocab: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Intermediate size of dense MLP layers (0 when every layer is MoE).
    pub dense_intermediate: usize,
    pub mla: Option<MlaDims>,
    pub moe: Option<MoeDims>,
    /// Per-head RMSNorm on q and k (Qwen3, MiniMax-M2).
    pub qk_norm: bool,
    pub max_position_embeddings: usize,
    pub quant: Option<Quantization>,
}

/// Accepted ranges of config dimensions. Not physics but sanity: the largest public configs sit
/// far inside them (Llama-3.1-405B: hidden 16,384, 126 layers, 128 heads, intermediate 53,248;
/// Gemma: vocab 262,144; Kimi-K2: 384 experts, top-8), and every product the workload forms from
/// them (tokens × hidden × 2, tokens × vocab, experts × hidden × intermediate) stays far below
/// 2^53, so byte counts are exact in f64 and cannot wrap in u64.
pub mod limits {
    use std::ops::RangeInclusive;
    pub(crate) const LAYERS: RangeInclusive<u64> = 1..=512;
    pub const HIDDEN: RangeInclusive<u64> = 1..=65_536;
    pub const VOCAB: RangeInclusive<u64> = 1..=4_194_304;
    pub const HEADS: RangeInclusive<u64> = 1..=1_024;
    pub const HEAD_DIM: RangeInclusive<u64> = 1..=1_024;
    pub const INTERMEDIATE: RangeInclusive<u64> = 1..=1_048_576;
    /// Shared-expert width may be 0 (MiniMax-M2 has no shared expert).
    pub(crate) const SHARED_INTERMEDIATE: RangeInclusive<u64> = 0..=1_048_576;
    pub const LORA_RANK: RangeInclusive<u64> = 1..=65_536;
    /// 0 routed experts means a dense model.
    pub const EXPERTS: RangeInclusive<u64> = 0..=4_096;
    /// Routing draws `top_k` distinct experts per token per layer, so `top_k` also bounds the
    /// simulator's own run time.
    pub const TOP_K: RangeInclusive<u64> = 1..=64;
    pub const SHARED_EXPERTS: RangeInclusive<u64> = 0..=64;
    pub const MAX_POSITIONS: RangeInclusive<u64> = 1..=(1 << 32);
    /// Quantization group and block edges.
    pub(crate) const QUANT_GROUP: RangeInclusive<u64> = 1..=65_536;
}

/// Reads fields of one config object, naming the file and the field's JSON path in errors.
struct Fields<'a> {
    path: &'a Path,
    obj: &'a Value,
    /// `text_config.` when the language model is nested, else empty.
    prefix: &'a str,
}

impl Fields<'_> {
    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
    fn get(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }
    /// An optional integer in `range`; a float, string or negative number is an error.
    fn int(&self, key: &str, range: RangeInclusive<u64>) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if range.contains(&n) => Ok(Some(n as usize)),
                _ => Err(check::int_error(
                    self.path,
                    &self.name(key),
                    &v.to_string(),
                    &range,
                )),
            },
        }
    }
    fn required(&self, key: &str, range: RangeInclusive<u64>) -> Result<usize> {
        self.int(key, range.clone())?.ok_or_else(|| {
            Error::field(
                self.path,
                self.name(key),
                format!(
                    "required field is missing (expected an integer {})",
                    check::int_range_text(&range)
                ),
            )
        })
    }
    fn first_of(&self, keys: &[&str], range: RangeInclusive<u64>) -> Result<Option<usize>> {
        for k in keys {
            if let Some(v) = self.int(k, range.clone())? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
    /// An optional list of layer indices below `layers` (`mlp_only_layers`); absent is empty.
    fn int_list(&self, key: &str, layers: usize) -> Result<Vec<usize>> {
        let range = 0..=(layers as u64).saturating_sub(1);
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v.as_u64() {
                    Some(n) if range.contains(&n) => Ok(n as usize),
                    _ => Err(check::int_error(
                        self.path,
                        &format!("{}[{i}]", self.name(key)),
                        &v.to_string(),
                        &range,
                    )),
                })
                .collect(),
            Some(v) => Err(wrong_type(
                self.path,
                &self.name(key),
                v,
                "a list of layer indices",
            )),
        }
    }
    fn str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong_type(self.path, &self.name(key), v, "a string")),
        }
    }
    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong_type(self.path, &self.name(key), v, "true or false")),
        }
    }
}

/// The config.json's top level: a JSON object.
fn parse_root(text: &str, path: &Path) -> Result<Value> {
    let root: Value = serde_json::from_str(text).map_err(|e| Error::Syntax {
        path: path.to_path_buf(),
        format: "JSON",
        message: e.to_string(),
    })?;
    if !root.is_object() {
        return Err(Error::Syntax {
            path: path.to_path_buf(),
            format: "config.json",
            message: "the top level must be a JSON object".into(),
        });
    }
    Ok(root)
}

/// The attention heads: query heads, key/value heads (a divisor of them) and the head
/// width (given, or hidden_size / heads).
fn attention_heads(f: &Fields, hidden: usize) -> Result<(usize, usize, usize)> {
    let path = f.path;
    let num_heads = f.required("num_attention_heads", limits::HEADS)?;
    let num_kv_heads = f
        .int("num_key_value_heads", limits::HEADS)?
        .unwrap_or(num_heads);
    if num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
        return Err(Error::field(
            path,
            f.name("num_key_value_heads"),
            format!(
                "found {num_kv_heads}, expected a divisor of num_attention_heads ({num_heads})"
            ),
        ));
    }
    let head_dim = match f.int("head_dim", limits::HEAD_DIM)? {
        Some(d) => d,
        None => {
            let d = hidden / num_heads;
            if d == 0 || !limits::HEAD_DIM.contains(&(d as u64)) {
                return Err(Error::field(
                    path,
                    f.name("head_dim"),
                    format!(
                        "absent, and hidden_size / num_attention_heads = {hidden} / {num_heads} = {d} is not {}",
                        check::int_range_text(&limits::HEAD_DIM)
                    ),
                ));
            }
            d
        }
    };
    Ok((num_heads, num_kv_heads, head_dim))
}

/// The MLA dimensions, present when `kv_lora_rank` is.
fn mla_dims(f: &Fields) -> Result<Option<MlaDims>> {
    Ok(match f.int("kv_lora_rank", limits::LORA_RANK)? {
        Some(kv_lora_rank) => Some(MlaDims {
            q_lora_rank: f.int("q_lora_rank", limits::LORA_RANK)?,
            kv_lora_rank,
            qk_nope_head_dim: f.required("qk_nope_head_dim", limits::HEAD_DIM)?,
            qk_rope_head_dim: f.required("qk_rope_head_dim", limits::HEAD_DIM)?,
            v_head_dim: f.required("v_head_dim", limits::HEAD_DIM)?,
        }),
        None => None,
    })
}

/// The MoE dimensions, present when the config names routed experts.
fn moe_dims(f: &Fields, num_layers: usize) -> Result<Option<MoeDims>> {
    let path = f.path;
    let n_routed = f.first_of(
        &["n_routed_experts", "num_experts", "num_local_experts"],
        limits::EXPERTS,
    )?;
    Ok(match n_routed {
        Some(n) if n > 0 => {
            let top_k = f.required("num_experts_per_tok", limits::TOP_K)?;
            if top_k > n {
                return Err(Error::field(
                    path,
                    f.name("num_experts_per_tok"),
                    format!("found {top_k}, expected at most the number of experts ({n})"),
                ));
            }
            // MiniMax-M2 names the expert width `intermediate_size`; where the config also has
            // dense layers or shared experts, that field is theirs, and reading it as the
            // experts' width would price every expert at the dense MLP's size.
            let moe_intermediate = match f.int("moe_intermediate_size", limits::INTERMEDIATE)? {
                Some(v) => v,
                None => match dense_width_user(f, num_layers)? {
                    Some(why) => {
                        return Err(Error::field(
                            path,
                            f.name("moe_intermediate_size"),
                            format!(
                                "required field is missing (expected an integer {}): {why}, so `intermediate_size` is not the experts' width",
                                check::int_range_text(&limits::INTERMEDIATE)
                            ),
                        ))
                    }
                    None => f.required("intermediate_size", limits::INTERMEDIATE)?,
                },
            };
            let (n_shared, shared_intermediate) = shared_experts(f, moe_intermediate)?;
            let scoring = scoring(f)?;
            let (n_group, topk_group) = expert_groups(f, n, top_k)?;
            let mlp_only_layers = f.int_list("mlp_only_layers", num_layers)?;
            let dims = MoeDims {
                n_routed_experts: n,
                top_k,
                moe_intermediate,
                n_shared_experts: n_shared,
                shared_intermediate,
                first_k_dense: f
                    .int("first_k_dense_replace", 0..=num_layers as u64)?
                    .unwrap_or(0),
                moe_layer_freq: f.int("moe_layer_freq", 1..=num_layers as u64)?.unwrap_or(1),
                decoder_sparse_step: f
                    .int("decoder_sparse_step", 1..=num_layers as u64)?
                    .unwrap_or(1),
                mlp_only_layers,
                n_group,
                topk_group,
                scoring,
            };
            Some(dims)
        }
        _ => None,
    })
}

/// What else in an MoE config `intermediate_size` would size: dense layers or shared experts.
fn dense_width_user(f: &Fields, num_layers: usize) -> Result<Option<String>> {
    let layers = 1..=num_layers as u64;
    let first_dense = f.int("first_k_dense_replace", 0..=num_layers as u64)?;
    let every = f.int("moe_layer_freq", layers.clone())?;
    let step = f.int("decoder_sparse_step", layers)?;
    let dense_listed = !f.int_list("mlp_only_layers", num_layers)?.is_empty();
    let shared = f.int("n_shared_experts", limits::SHARED_EXPERTS)?;
    let shared_width = f.first_of(
        &[
            "shared_expert_intermediate_size",
            "shared_intermediate_size",
        ],
        limits::SHARED_INTERMEDIATE,
    )?;
    Ok(
        match (first_dense, every, step, dense_listed, shared, shared_width) {
            (Some(n), ..) if n > 0 => {
                Some(format!("first_k_dense_replace = {n} makes layers dense"))
            }
            (_, Some(n), ..) | (_, _, Some(n), ..) if n > 1 => {
                Some(format!("MoE every {n} layers leaves the others dense"))
            }
            (_, _, _, true, ..) => Some("mlp_only_layers names dense layers".into()),
            (.., Some(n), _) if n > 0 => {
                Some(format!("n_shared_experts = {n} names shared experts"))
            }
            (.., Some(w)) if w > 0 => Some(format!("the shared experts' width is {w}")),
            _ => None,
        },
    )
}

/// The shared experts and their width (a width stated without a count is one shared expert).
fn shared_experts(f: &Fields, moe_intermediate: usize) -> Result<(usize, usize)> {
    let n_shared = f
        .int("n_shared_experts", limits::SHARED_EXPERTS)?
        .unwrap_or(0);
    // n_shared ≤ 64 and the width ≤ 2^20, so the product cannot overflow.
    let shared_intermediate = f
        .first_of(
            &[
                "shared_expert_intermediate_size",
                "shared_intermediate_size",
            ],
            limits::SHARED_INTERMEDIATE,
        )?
        .unwrap_or(n_shared * moe_intermediate);
    let n_shared = if shared_intermediate > 0 {
        n_shared.max(1)
    } else {
        0
    };
    Ok((n_shared, shared_intermediate))
}

/// The router's scoring function (softmax when the config names none).
fn scoring(f: &Fields) -> Result<Scoring> {
    match f.str("scoring_func")? {
        Some("sigmoid") => Ok(Scoring::Sigmoid),
        Some("softmax") | None => Ok(Scoring::Softmax),
        Some(other) => Err(Error::field(
            f.path,
            f.name("scoring_func"),
            format!(
                "found '{}', expected 'sigmoid' or 'softmax'",
                crate::units::echo(other)
            ),
        )),
    }
}

/// Group-limited routing (vLLM's grouped top-k): the `n` experts split evenly in n_group
/// groups, and the `top_k` experts come from the topk_group best groups.
fn expert_groups(f: &Fields, n: usize, top_k: usize) -> Result<(usize, usize)> {
    let n_group = f.int("n_group", 1..=n as u64)?.unwrap_or(1);
    let topk_group = f.int("topk_group", 1..=n_group as u64)?.unwrap_or(1);
    if !n.is_multiple_of(n_group) {
        return Err(Error::field(
            f.path,
            f.name("n_group"),
            format!("found {n_group}, expected a divisor of the {n} routed experts (the groups are equal)"),
        ));
    }
    if top_k > topk_group * (n / n_group) {
        return Err(Error::field(
            f.path,
            f.name("topk_group"),
            format!(
                "found {topk_group}: {topk_group} group(s) of {} experts cannot hold the top-{top_k} experts; expected at least {}",
                n / n_group,
                top_k.div_ceil(n / n_group)
            ),
        ));
    }
    Ok((n_group, topk_group))
}

/// The model family its attention and MoE make; MLA without MoE is refused.
fn family_of(f: &Fields, mla: &Option<MlaDims>, moe: &Option<MoeDims>) -> Result<Family> {
    let path = f.path;
    Ok(match (mla, moe) {
        (Some(_), Some(_)) => Family::MlaMoe,
        (Some(_), None) => {
            return Err(Error::field(
                path,
                f.name("n_routed_experts"),
                "MLA models without MoE are not supported (expected n_routed_experts)",
            ))
        }
        (None, Some(_)) => Family::GqaMoe,
        (None, None) => Family::GqaDense,
    })
}

/// The weights' quantization: `quantization_config` of the language model, else of the
/// wrapper. Both are checked when both are present (the nested one wins), so a malformed outer
/// one is not silently ignored, and one that is not an object does not price weights as BF16.
fn quantization(
    root: &Value,
    obj: &Value,
    prefix: &str,
    path: &Path,
) -> Result<Option<Quantization>> {
    let outer = match root.get("quantization_config") {
        Some(q) if !q.is_null() && !prefix.is_empty() => {
            Some(parse_quantization(path, "quantization_config", q)?)
        }
        _ => None,
    };
    Ok(match obj.get("quantization_config") {
        Some(q) if !q.is_null() => Some(parse_quantization(
            path,
            &format!("{prefix}quantization_config"),
            q,
        )?),
        _ => outer,
    })
}

pub(super) fn wrong_type(path: &Path, field: &str, v: &Value, expected: &str) -> Error {
    Error::field(
        path,
        field,
        format!(
            "found {}, expected {expected}",
            crate::units::echo(&v.to_string())
        ),
    )
}

impl ModelSpec {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = crate::files::read_text(path, crate::files::InputKind::ModelConfig)?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .map(|s| s.trim_end_matches(".config").to_string())
            .unwrap_or_else(|| "model".into());
        Self::from_json_str(&text, path, &name)
    }

    pub fn from_json_str(text: &str, path: &Path, name: &str) -> Result<Self> {
        let root = parse_root(text, path)?;
        // Kimi-K2.5 and other multimodal wrappers keep the language model under `text_config`.
        let (obj, prefix) = match root.get("text_config") {
            None | Some(Value::Null) => (&root, ""),
            Some(v @ Value::Object(_)) => (v, "text_config."),
            Some(v) => return Err(wrong_type(path, "text_config", v, "an object")),
        };
        let f = Fields { path, obj, prefix };
        let top = Fields {
            path,
            obj: &root,
            prefix: "",
        };

        let num_layers = f.required("num_hidden_layers", limits::LAYERS)?;
        let hidden = f.required("hidden_size", limits::HIDDEN)?;
        let vocab = f.required("vocab_size", limits::VOCAB)?;
        let (num_heads, num_kv_heads, head_dim) = attention_heads(&f, hidden)?;
        let model_type = match f.str("model_type")? {
            Some(t) => t,
            None => top.str("model_type")?.unwrap_or(""),
        }
        .to_ascii_lowercase();

        let mla = mla_dims(&f)?;

        let moe = moe_dims(&f, num_layers)?;

        let family = family_of(&f, &mla, &moe)?;

        let needs_dense = match &moe {
            None => true,
            Some(m) => (0..num_layers).any(|l| !m.is_layer_moe(l)),
        };
        let dense_intermediate = if needs_dense {
            f.required("intermediate_size", limits::INTERMEDIATE)?
        } else {
            0
        };
        let qk_norm = model_type.starts_with("qwen3") || f.bool("use_qk_norm")?.unwrap_or(false);
        // Absent means unbounded: the scenario's own context ceiling applies.
        let max_position_embeddings = f
            .int("max_position_embeddings", limits::MAX_POSITIONS)?
            .unwrap_or(usize::MAX);

        let quant = quantization(&root, obj, prefix, path)?;

        Ok(ModelSpec {
            name: name.to_string(),
            source: path.to_path_buf(),
            family,
            num_layers,
            hidden,
            vocab,
            num_heads,
            num_kv_heads,
            head_dim,
            dense_intermediate,
            mla,
            moe,
            qk_norm,
            max_position_embeddings,
            quant,
        })
    }

    /// Storage format of the weight of the module with this Hugging Face name
    /// (e.g. `model.layers.3.mlp.experts.0.gate_proj`).
    pub fn weight_format(&self, module: &str) -> WeightFormat {
        let Some(q) = &self.quant else {
            return WeightFormat::Bf16;
        };
        // The router gate and the embedding are not Linear layers in the HF modelling code, and
        // vLLM builds the gate unquantized; lm_head is kept in BF16 by every config we support.
        let last = module.rsplit('.').next().unwrap_or(module);
        if last == "gate" || last == "embed_tokens" {
            return WeightFormat::Bf16;
        }
        if q.excludes(module) {
            WeightFormat::Bf16
        } else {
            q.format
        }
    }

    /// Whether decoder layer `layer` runs the routed experts, as vLLM builds it:
    /// DeepSeek-V2/V3 and Kimi (`deepseek_v2.py`): `n_routed_experts > 0`, `layer >=
    /// first_k_dense_replace` and `layer % moe_layer_freq == 0`; Qwen2/3-MoE (`qwen3_moe.py`):
    /// `layer not in mlp_only_layers`, `num_experts > 0` and `(layer + 1) % decoder_sparse_step
    /// == 0`. A config states the rules of its family; the others keep their defaults (0, 1, 1,
    /// none), which pass every layer.
    pub fn is_layer_moe(&self, layer: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| m.is_layer_moe(layer))
    }

    /// How many decoder layers run the routed experts.
    pub fn moe_layer_count(&self) -> usize {
        (0..self.num_layers)
            .filter(|&l| self.is_layer_moe(l))
            .count()
    }

    /// KV-cache bytes per token per layer, as one rank stores them for `tp` ranks.
    pub fn kv_bytes_per_token_per_layer(&self, tp: usize, elem_bytes: f64) -> f64 {
        match &self.mla {
            // The MLA latent is replicated on every rank, not split across heads.
            Some(m) => (m.kv_lora_rank + m.qk_rope_head_dim) as f64 * elem_bytes,
            None => {
                let kv_per_rank = (self.num_kv_heads as f64 / tp as f64).ceil().max(1.0);
                2.0 * kv_per_rank * self.head_dim as f64 * elem_bytes
            }
        }
    }
}
