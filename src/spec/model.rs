//! A model's shape, read from its Hugging Face `config.json`.
//!
//! Supported families: DeepSeek-V3 / Kimi-K2 (MLA attention + MoE; Kimi nests the LLM under
//! `text_config`), Qwen3-MoE and MiniMax-M2 (GQA + MoE), Llama / Qwen / Mistral (GQA dense).
//! `quantization_config` is honoured: compressed-tensors pack-quantized INT4 with its `ignore`
//! list, and FP8 block quantization.

use crate::error::{Error, Result};
use regex::Regex;
use serde_json::Value;
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
    pub fn name(self) -> &'static str {
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
    /// Layers before this index are dense.
    pub first_k_dense: usize,
    pub n_group: usize,
    pub topk_group: usize,
    pub scoring: Scoring,
}

/// How a weight matrix is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WeightFormat {
    Bf16,
    /// Weight-only INT4 with one BF16 scale per `group_size` weights (W4A16).
    Int4 {
        group_size: usize,
    },
    /// FP8 e4m3 with one FP32 scale per `block[0] × block[1]` tile.
    Fp8Block {
        block: [usize; 2],
    },
}

impl WeightFormat {
    /// Bytes per stored weight, scales included.
    pub fn bytes_per_weight(self) -> f64 {
        match self {
            WeightFormat::Bf16 => 2.0,
            WeightFormat::Int4 { group_size } => 0.5 + 2.0 / group_size as f64,
            WeightFormat::Fp8Block { block } => 1.0 + 4.0 / (block[0] * block[1]) as f64,
        }
    }

    pub fn name(self) -> String {
        match self {
            WeightFormat::Bf16 => "bf16".into(),
            WeightFormat::Int4 { group_size } => format!("int4-g{group_size}"),
            WeightFormat::Fp8Block { block } => format!("fp8-block{}x{}", block[0], block[1]),
        }
    }
}

/// A module-name pattern from an `ignore` / `modules_to_not_convert` list.
#[derive(Debug, Clone)]
enum NamePattern {
    Exact(String),
    Regex(Regex),
    /// `modules_to_not_convert` entries match any module whose name contains them.
    Contains(String),
}

impl NamePattern {
    fn matches(&self, module: &str) -> bool {
        match self {
            NamePattern::Exact(s) => module == s || module.ends_with(&format!(".{s}")),
            NamePattern::Regex(r) => r.is_match(module),
            NamePattern::Contains(s) => module.split('.').any(|part| part == s),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Quantization {
    pub method: String,
    /// Format of the Linear layers the config targets.
    pub format: WeightFormat,
    exclude: Vec<NamePattern>,
}

#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub name: String,
    pub source: PathBuf,
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

/// Reads fields of one config object, naming the file and field in errors.
struct Fields<'a> {
    path: &'a Path,
    obj: &'a Value,
}

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }
    fn usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| Error::field(self.path, key, "expected a non-negative integer")),
        }
    }
    fn required(&self, key: &str) -> Result<usize> {
        match self.usize(key)? {
            Some(0) => Err(Error::field(self.path, key, "must be greater than 0")),
            Some(n) => Ok(n),
            None => Err(Error::field(
                self.path,
                key,
                "required field is missing (expected a positive integer)",
            )),
        }
    }
    fn first_of(&self, keys: &[&str]) -> Result<Option<usize>> {
        for k in keys {
            if let Some(v) = self.usize(k)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
    fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
}

impl ModelSpec {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = crate::error::read_to_string(path, crate::files::InputKind::ModelConfig)?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .map(|s| s.trim_end_matches(".config").to_string())
            .unwrap_or_else(|| "model".into());
        Self::from_json_str(&text, path, &name)
    }

    pub fn from_json_str(text: &str, path: &Path, name: &str) -> Result<Self> {
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
        // Kimi-K2.5 and other multimodal wrappers keep the language model under `text_config`.
        let text_cfg = root.get("text_config").filter(|v| v.is_object());
        let obj = text_cfg.unwrap_or(&root);
        let f = Fields { path, obj };

        let num_layers = f.required("num_hidden_layers")?;
        let hidden = f.required("hidden_size")?;
        let vocab = f.required("vocab_size")?;
        let num_heads = f.required("num_attention_heads")?;
        let num_kv_heads = f.usize("num_key_value_heads")?.unwrap_or(num_heads);
        if num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return Err(Error::field(
                path,
                "num_key_value_heads",
                format!("must divide num_attention_heads ({num_heads})"),
            ));
        }
        let head_dim = f.usize("head_dim")?.unwrap_or(hidden / num_heads);
        let model_type = f
            .str("model_type")
            .or_else(|| root.get("model_type").and_then(Value::as_str))
            .unwrap_or("")
            .to_ascii_lowercase();

        let mla = match f.usize("kv_lora_rank")? {
            Some(kv_lora_rank) => Some(MlaDims {
                q_lora_rank: f.usize("q_lora_rank")?,
                kv_lora_rank,
                qk_nope_head_dim: f.required("qk_nope_head_dim")?,
                qk_rope_head_dim: f.required("qk_rope_head_dim")?,
                v_head_dim: f.required("v_head_dim")?,
            }),
            None => None,
        };

        let n_routed = f.first_of(&["n_routed_experts", "num_experts", "num_local_experts"])?;
        let moe = match n_routed {
            Some(n) if n > 0 => {
                let top_k = f.required("num_experts_per_tok")?;
                if top_k > n {
                    return Err(Error::field(
                        path,
                        "num_experts_per_tok",
                        format!("must not exceed the number of experts ({n})"),
                    ));
                }
                // MiniMax-M2 names the expert width `intermediate_size`.
                let moe_intermediate = match f.usize("moe_intermediate_size")? {
                    Some(v) => v,
                    None => f.required("intermediate_size")?,
                };
                let n_shared = f.usize("n_shared_experts")?.unwrap_or(0);
                let shared_intermediate = f
                    .first_of(&[
                        "shared_expert_intermediate_size",
                        "shared_intermediate_size",
                    ])?
                    .unwrap_or(n_shared * moe_intermediate);
                let n_shared = if shared_intermediate > 0 {
                    n_shared.max(1)
                } else {
                    0
                };
                let scoring = match f.str("scoring_func") {
                    Some("sigmoid") => Scoring::Sigmoid,
                    Some("softmax") | None => Scoring::Softmax,
                    Some(other) => {
                        return Err(Error::field(
                            path,
                            "scoring_func",
                            format!("expected 'sigmoid' or 'softmax', found '{other}'"),
                        ))
                    }
                };
                Some(MoeDims {
                    n_routed_experts: n,
                    top_k,
                    moe_intermediate,
                    n_shared_experts: n_shared,
                    shared_intermediate,
                    first_k_dense: f.usize("first_k_dense_replace")?.unwrap_or(0),
                    n_group: f.usize("n_group")?.unwrap_or(1).max(1),
                    topk_group: f.usize("topk_group")?.unwrap_or(1).max(1),
                    scoring,
                })
            }
            _ => None,
        };

        let family = match (&mla, &moe) {
            (Some(_), Some(_)) => Family::MlaMoe,
            (Some(_), None) => {
                return Err(Error::field(
                    path,
                    "n_routed_experts",
                    "MLA models without MoE are not supported (expected n_routed_experts)",
                ))
            }
            (None, Some(_)) => Family::GqaMoe,
            (None, None) => Family::GqaDense,
        };

        let needs_dense = match &moe {
            None => true,
            Some(m) => m.first_k_dense > 0,
        };
        let dense_intermediate = if needs_dense {
            f.required("intermediate_size")?
        } else {
            0
        };
        let qk_norm = model_type.starts_with("qwen3")
            || obj
                .get("use_qk_norm")
                .and_then(Value::as_bool)
                .unwrap_or(false);
        let max_position_embeddings = f.usize("max_position_embeddings")?.unwrap_or(usize::MAX);

        let qcfg = obj
            .get("quantization_config")
            .or_else(|| root.get("quantization_config"))
            .filter(|v| v.is_object());
        let quant = match qcfg {
            Some(q) => Some(parse_quantization(path, q)?),
            None => None,
        };

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
        if q.exclude.iter().any(|p| p.matches(module)) {
            WeightFormat::Bf16
        } else {
            q.format
        }
    }

    pub fn is_layer_moe(&self, layer: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| layer >= m.first_k_dense)
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

fn parse_quantization(path: &Path, q: &Value) -> Result<Quantization> {
    let method = q
        .get("quant_method")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Error::field(
                path,
                "quantization_config.quant_method",
                "required (expected 'compressed-tensors' or 'fp8')",
            )
        })?
        .to_string();
    match method.as_str() {
        "compressed-tensors" => {
            let groups = q
                .get("config_groups")
                .and_then(Value::as_object)
                .filter(|g| !g.is_empty())
                .ok_or_else(|| {
                    Error::field(
                        path,
                        "quantization_config.config_groups",
                        "expected at least one quantization group",
                    )
                })?;
            let (gname, group) = groups.iter().next().expect("non-empty checked above");
            let field = |k: &str| format!("quantization_config.config_groups.{gname}.weights.{k}");
            let w = group
                .get("weights")
                .filter(|v| v.is_object())
                .ok_or_else(|| Error::field(path, field(""), "expected a weights object"))?;
            let bits = w
                .get("num_bits")
                .and_then(Value::as_u64)
                .ok_or_else(|| Error::field(path, field("num_bits"), "expected an integer"))?;
            let format = match (bits, w.get("type").and_then(Value::as_str)) {
                (4, Some("int") | None) => WeightFormat::Int4 {
                    group_size: w
                        .get("group_size")
                        .and_then(Value::as_u64)
                        .filter(|&g| g > 0)
                        .ok_or_else(|| {
                            Error::field(path, field("group_size"), "expected a positive integer")
                        })? as usize,
                },
                (8, Some("float")) => WeightFormat::Fp8Block { block: [128, 128] },
                (b, t) => {
                    return Err(Error::field(
                        path,
                        field("num_bits"),
                        format!(
                            "supported: 4-bit int (W4A16) or 8-bit float; found {b}-bit {}",
                            t.unwrap_or("?")
                        ),
                    ))
                }
            };
            let mut exclude = Vec::new();
            if let Some(list) = q.get("ignore").and_then(Value::as_array) {
                for item in list {
                    let s = item.as_str().ok_or_else(|| {
                        Error::field(path, "quantization_config.ignore", "expected strings")
                    })?;
                    exclude.push(match s.strip_prefix("re:") {
                        // compressed-tensors matches patterns from the start of the name.
                        Some(r) => {
                            NamePattern::Regex(Regex::new(&format!("^(?:{r})")).map_err(|e| {
                                Error::field(
                                    path,
                                    "quantization_config.ignore",
                                    format!("invalid regex '{r}': {e}"),
                                )
                            })?)
                        }
                        None => NamePattern::Exact(s.to_string()),
                    });
                }
            }
            Ok(Quantization {
                method,
                format,
                exclude,
            })
        }
        "fp8" => {
            let block = match q.get("weight_block_size").and_then(Value::as_array) {
                Some(a) if a.len() == 2 => {
                    let d: Vec<usize> = a
                        .iter()
                        .filter_map(Value::as_u64)
                        .map(|v| v as usize)
                        .filter(|&v| v > 0)
                        .collect();
                    if d.len() != 2 {
                        return Err(Error::field(
                            path,
                            "quantization_config.weight_block_size",
                            "expected two positive integers",
                        ));
                    }
                    [d[0], d[1]]
                }
                None => [128, 128],
                Some(_) => {
                    return Err(Error::field(
                        path,
                        "quantization_config.weight_block_size",
                        "expected two positive integers",
                    ))
                }
            };
            let mut exclude = vec![NamePattern::Exact("lm_head".into())];
            if let Some(list) = q.get("modules_to_not_convert").and_then(Value::as_array) {
                exclude.extend(
                    list.iter()
                        .filter_map(Value::as_str)
                        .map(|s| NamePattern::Contains(s.to_string())),
                );
            }
            Ok(Quantization {
                method,
                format: WeightFormat::Fp8Block { block },
                exclude,
            })
        }
        other => Err(Error::field(
            path,
            "quantization_config.quant_method",
            format!("supported: 'compressed-tensors', 'fp8'; found '{other}'"),
        )),
    }
}
