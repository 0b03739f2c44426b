//! Loading the drafter of a speculative step: an EAGLE-3 head, DeepSeek's MTP module, or a
//! separate draft model, each run at the target's TP on the same GPUs. What its passes run is
//! `workload::spec_step`; here are the files (draft configs, `data/spec_decode/methods.toml`)
//! and the checks that pair a draft with its target.

use crate::error::{Error, Result};
use crate::scenario::model::MlaDims;
use crate::scenario::{catalog, Family, ModelSpec};
use crate::workload::spec_method::DraftSource;
use crate::workload::spec_step::Drafter;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The method enum lives with the one table of methods (`workload::spec_method`); this name stays
/// for the flags and the library's callers.
pub use crate::workload::spec_step::SpecMethod as Method;

/// One method's limits, from `data/spec_decode/methods.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MethodLimits {
    pub(crate) max_draft_tokens: u32,
    aux_hidden_states: u32,
    #[serde(default)]
    default_draft: Option<String>,
    /// Where the limits come from: required in the file, read by people, not by the code.
    #[allow(dead_code)]
    source: String,
}

fn methods_file() -> PathBuf {
    catalog::data_root().join("data/spec_decode/methods.toml")
}

fn method_limits(method: Method) -> Result<MethodLimits> {
    let path = methods_file();
    let all: BTreeMap<String, MethodLimits> =
        crate::files::read_toml(&path, crate::files::InputKind::SystemToml)?;
    all.get(method.key())
        .cloned()
        .ok_or_else(|| Error::field(&path, method.key(), "missing section for this method"))
}

/// A drafter loaded and checked against its target: what its passes run
/// ([`Drafter`], whose methods a `Draft` offers through `Deref`), where it came from, and the
/// method's limits.
#[derive(Debug, Clone)]
pub struct Draft {
    pub drafter: Drafter,
    /// Where the draft came from (a config file or the target's own MTP layers).
    pub(crate) source: String,
    pub(crate) limits: MethodLimits,
}

impl std::ops::Deref for Draft {
    type Target = Drafter;
    fn deref(&self) -> &Drafter {
        &self.drafter
    }
}

impl Draft {
    /// Resolves the drafter of `method` for `target`; `draft` is `--draft-config` (eagle3) or
    /// `--draft-model` (draft-model). Pairing problems are refused here, before any work.
    pub fn load(method: Method, draft: Option<&str>, target: &ModelSpec) -> Result<Draft> {
        let limits = method_limits(method)?;
        let model = match method.spec().source {
            DraftSource::HeadConfig => {
                let path = match (draft, &limits.default_draft) {
                    (Some(p), _) => PathBuf::from(p),
                    (None, Some(d)) => catalog::models_dir().join(d),
                    (None, None) => {
                        return Err(Error::ScenarioSetting {
                            flag: "--method",
                            value: method.name().into(),
                            problem: " needs --draft-config FILE (no default draft in data/spec_decode/methods.toml)".into(),
                        })
                    }
                };
                eagle3_model(&path, target)?
            }
            DraftSource::TargetMtp => mtp_model(method, target)?,
            DraftSource::Model => {
                let Some(name) = draft else {
                    return Err(Error::ScenarioSetting {
                        flag: "--method",
                        value: method.name().into(),
                        problem:
                            " needs a draft model, a bundled model name or a config.json: --draft-model NAME|PATH in `whatif spec-decode`, --draft in `sweep`"
                                .into(),
                    });
                };
                let path = catalog::resolve_model(name)?;
                let m = ModelSpec::from_file(&path)?;
                if m.vocab != target.vocab {
                    return Err(Error::field(
                        &path,
                        "vocab_size",
                        format!(
                            "the draft model's vocabulary ({}) must equal the target's ({} for {}): vLLM verifies draft token ids against the target's",
                            m.vocab, target.vocab, target.name
                        ),
                    ));
                }
                m
            }
        };
        let source = match method.spec().source {
            DraftSource::TargetMtp => {
                format!("{} MTP layer (num_nextn_predict_layers)", target.name)
            }
            DraftSource::HeadConfig | DraftSource::Model => crate::units::path(&model.source),
        };
        Ok(Draft {
            drafter: Drafter {
                method,
                model,
                aux_hidden_states: limits.aux_hidden_states,
                max_draft_tokens: limits.max_draft_tokens,
            },
            source,
            limits,
        })
    }

    /// Refuses a k the method does not allow, naming the flag and the allowed range.
    pub(crate) fn check_k(&self, k: u32) -> Result<()> {
        let max = self.limits.max_draft_tokens;
        if k == 0 || k > max {
            return Err(Error::ScenarioSetting {
                flag: "--draft-tokens",
                value: k.to_string(),
                problem: format!(
                    " is not allowed for --method {}: expected 1..={max} ({})",
                    self.method.name(),
                    methods_file().display()
                ),
            });
        }
        Ok(())
    }
}

/// Reads an EAGLE-3 draft `config.json` (MLA or Llama-style attention, dense MLP, own lm_head
/// over `draft_vocab_size`) and checks that it can pair with the target.
fn eagle3_model(path: &Path, target: &ModelSpec) -> Result<ModelSpec> {
    let text = crate::files::read_text(path, crate::files::InputKind::ModelConfig)?;
    let root: Value = serde_json::from_str(&text).map_err(|e| Error::Syntax {
        path: path.to_path_buf(),
        format: "JSON",
        message: e.to_string(),
    })?;
    let get = |k: &str| root.get(k).and_then(Value::as_u64).map(|v| v as usize);
    let need = |k: &str| {
        get(k).filter(|&v| v > 0).ok_or_else(|| {
            Error::field(
                path,
                k,
                "required field is missing (expected a positive integer)",
            )
        })
    };
    let hidden = need("hidden_size")?;
    let vocab = get("vocab_size").unwrap_or(target.vocab);
    let draft_vocab = get("draft_vocab_size").unwrap_or(vocab);
    check_eagle3_pairing(path, target, hidden, vocab, draft_vocab)?;
    let heads = need("num_attention_heads")?;
    let kv_heads = get("num_key_value_heads").unwrap_or(heads);
    let mla = match get("kv_lora_rank") {
        Some(kv_lora_rank) => Some(MlaDims {
            q_lora_rank: get("q_lora_rank"),
            kv_lora_rank,
            qk_nope_head_dim: need("qk_nope_head_dim")?,
            qk_rope_head_dim: need("qk_rope_head_dim")?,
            v_head_dim: need("v_head_dim")?,
        }),
        None => None,
    };
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("draft")
        .to_string();
    Ok(ModelSpec {
        name,
        source: path.to_path_buf(),
        // The builder runs MLA attention for MLA+MoE models; with no MoE every layer is dense.
        family: if mla.is_some() {
            Family::MlaMoe
        } else {
            Family::GqaDense
        },
        num_layers: get("num_hidden_layers").unwrap_or(1).max(1),
        hidden,
        vocab: draft_vocab,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim: get("head_dim").unwrap_or(hidden / heads),
        dense_intermediate: need("intermediate_size")?,
        mla,
        moe: None,
        qk_norm: false,
        max_position_embeddings: get("max_position_embeddings").unwrap_or(usize::MAX),
        quant: None,
    })
}

/// An EAGLE-3 draft reads the target's hidden states and shares its tokenizer: equal hidden
/// size and vocabulary, and a draft vocabulary within the target's.
fn check_eagle3_pairing(
    path: &Path,
    target: &ModelSpec,
    hidden: usize,
    vocab: usize,
    draft_vocab: usize,
) -> Result<()> {
    if hidden != target.hidden {
        return Err(Error::field(
            path,
            "hidden_size",
            format!(
                "the draft head's hidden size ({hidden}) must equal the target's ({} for {}): the draft reads the target's hidden states",
                target.hidden, target.name
            ),
        ));
    }
    if vocab != target.vocab {
        return Err(Error::field(
            path,
            "vocab_size",
            format!(
                "the draft's vocabulary ({vocab}) must equal the target's ({} for {}): it shares the target's tokenizer and embedding",
                target.vocab, target.name
            ),
        ));
    }
    if draft_vocab == 0 || draft_vocab > target.vocab {
        return Err(Error::field(
            path,
            "draft_vocab_size",
            format!(
                "expected 1..={} (the target's vocabulary); found {draft_vocab}",
                target.vocab
            ),
        ));
    }
    Ok(())
}

/// DeepSeek-V3's MTP module: one full decoder layer (MLA + MoE) of the target's own shape with
/// the shared embedding and lm_head. Refused for models without one (Kimi-K2.5: docs/sources.md §5).
/// `method` is the one asking (named in the refusal, with the methods that need no MTP layer).
fn mtp_model(method: Method, target: &ModelSpec) -> Result<ModelSpec> {
    let text = crate::files::read_text(&target.source, crate::files::InputKind::ModelConfig)?;
    let root: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let cfg = root
        .get("text_config")
        .filter(|v| v.is_object())
        .unwrap_or(&root);
    let n = cfg
        .get("num_nextn_predict_layers")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if n == 0 {
        return Err(Error::field(
            &target.source,
            "num_nextn_predict_layers",
            format!(
                "{} has no MTP head (0 layers), so --method {} cannot run; use {}",
                target.name,
                method.name(),
                Method::choices(
                    |m| m.source != DraftSource::TargetMtp,
                    |m| format!("--method {}", m.names[0])
                )
            ),
        ));
    }
    let mut m = target.clone();
    m.name = format!("{}-mtp", target.name);
    m.num_layers = 1;
    if let Some(moe) = &mut m.moe {
        moe.all_layers_moe();
    }
    Ok(m)
}
