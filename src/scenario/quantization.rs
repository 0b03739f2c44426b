//! How a model's weights are stored, read from its `quantization_config`: compressed-tensors
//! pack-quantized INT4 with its `ignore` list, FP8 block quantization, and the modules each
//! keeps in BF16.

use super::check;
use super::model::{limits, wrong_type};
use crate::error::{Error, Result};
use regex::Regex;
use serde_json::Value;
use std::path::Path;

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

    pub(crate) fn name(self) -> String {
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

impl Quantization {
    /// Whether the config keeps this module (a Hugging Face name) out of its format.
    pub(crate) fn excludes(&self, module: &str) -> bool {
        self.exclude.iter().any(|p| p.matches(module))
    }
}

pub(super) fn parse_quantization(path: &Path, at: &str, q: &Value) -> Result<Quantization> {
    if !q.is_object() {
        return Err(wrong_type(path, at, q, "an object with a quant_method"));
    }
    let field = |k: &str| format!("{at}.{k}");
    let method = match q.get("quant_method") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => {
            return Err(Error::field(
                path,
                field("quant_method"),
                "required (expected 'compressed-tensors' or 'fp8')",
            ))
        }
        Some(v) => {
            return Err(wrong_type(
                path,
                &field("quant_method"),
                v,
                "'compressed-tensors' or 'fp8'",
            ))
        }
    };
    match method.as_str() {
        "compressed-tensors" => compressed_tensors(path, at, q, method),
        "fp8" => fp8(path, at, q, method),
        other => Err(Error::field(
            path,
            field("quant_method"),
            format!(
                "supported: 'compressed-tensors', 'fp8'; found '{}'",
                crate::units::echo(other)
            ),
        )),
    }
}

/// An optional list of strings at `key`: absent or null is empty, anything else is an error.
fn strings<'a>(path: &Path, at: &str, q: &'a Value, key: &str) -> Result<Vec<&'a str>> {
    let field = || format!("{at}.{key}");
    match q.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .ok_or_else(|| wrong_type(path, &field(), item, "a list of strings"))
            })
            .collect(),
        Some(v) => Err(wrong_type(path, &field(), v, "a list of strings")),
    }
}

/// compressed-tensors: the first group's weights (INT4 in groups, or FP8), with the `ignore`
/// list's names and `re:` patterns.
fn compressed_tensors(path: &Path, at: &str, q: &Value, method: String) -> Result<Quantization> {
    let groups = q
        .get("config_groups")
        .and_then(Value::as_object)
        .filter(|g| !g.is_empty())
        .ok_or_else(|| {
            Error::field(
                path,
                format!("{at}.config_groups"),
                "expected an object with at least one quantization group",
            )
        })?;
    let Some((gname, group)) = groups.iter().next() else {
        unreachable!("non-empty checked above")
    };
    let weights_at = format!("{at}.config_groups.{gname}.weights");
    let w = group
        .get("weights")
        .filter(|v| v.is_object())
        .ok_or_else(|| Error::field(path, weights_at.clone(), "expected a weights object"))?;
    let format = group_format(path, &weights_at, w)?;
    let mut exclude = Vec::new();
    for s in strings(path, at, q, "ignore")? {
        exclude.push(match s.strip_prefix("re:") {
            // compressed-tensors matches patterns from the start of the name.
            Some(r) => NamePattern::Regex(Regex::new(&format!("^(?:{r})")).map_err(|e| {
                Error::field(
                    path,
                    format!("{at}.ignore"),
                    format!("invalid regex '{}': {e}", crate::units::echo(r)),
                )
            })?),
            None => NamePattern::Exact(s.to_string()),
        });
    }
    Ok(Quantization {
        method,
        format,
        exclude,
    })
}

/// A compressed-tensors group's weight format from its `weights` object (at `weights_at`):
/// 4-bit int in groups of `group_size`, or 8-bit float in 128 × 128 blocks.
fn group_format(path: &Path, weights_at: &str, w: &Value) -> Result<WeightFormat> {
    let wfield = |k: &str| format!("{weights_at}.{k}");
    let bits = match w.get("num_bits") {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| wrong_type(path, &wfield("num_bits"), v, "4 or 8"))?,
        None => return Err(Error::field(path, wfield("num_bits"), "required (4 or 8)")),
    };
    let kind = match w.get("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(v) => return Err(wrong_type(path, &wfield("type"), v, "'int' or 'float'")),
    };
    match (bits, kind) {
        (4, Some("int") | None) => {
            let g = match w.get("group_size") {
                Some(v) => v.as_u64().filter(|g| limits::QUANT_GROUP.contains(g)),
                None => None,
            };
            let g = g.ok_or_else(|| {
                check::int_error(
                    path,
                    &wfield("group_size"),
                    &w.get("group_size")
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "nothing".into()),
                    &limits::QUANT_GROUP,
                )
            })?;
            Ok(WeightFormat::Int4 {
                group_size: g as usize,
            })
        }
        (8, Some("float")) => Ok(WeightFormat::Fp8Block { block: [128, 128] }),
        (b, t) => Err(Error::field(
            path,
            wfield("num_bits"),
            format!(
                "supported: 4-bit int (W4A16) or 8-bit float; found {b}-bit {}",
                crate::units::echo(t.unwrap_or("?"))
            ),
        )),
    }
}

/// fp8: blocks of `weight_block_size` (128 × 128 by default); `lm_head` and the
/// `modules_to_not_convert` stay in BF16.
fn fp8(path: &Path, at: &str, q: &Value, method: String) -> Result<Quantization> {
    let block = match q.get("weight_block_size") {
        None | Some(Value::Null) => [128, 128],
        Some(Value::Array(a))
            if a.len() == 2
                && a.iter()
                    .all(|v| v.as_u64().is_some_and(|n| limits::QUANT_GROUP.contains(&n))) =>
        {
            [
                a[0].as_u64().unwrap_or(1) as usize,
                a[1].as_u64().unwrap_or(1) as usize,
            ]
        }
        Some(v) => {
            return Err(Error::field(
                path,
                format!("{at}.weight_block_size"),
                format!(
                    "found {}, expected two integers {}",
                    crate::units::echo(&v.to_string()),
                    check::int_range_text(&limits::QUANT_GROUP)
                ),
            ))
        }
    };
    let mut exclude = vec![NamePattern::Exact("lm_head".into())];
    exclude.extend(
        strings(path, at, q, "modules_to_not_convert")?
            .into_iter()
            .map(|s| NamePattern::Contains(s.to_string())),
    );
    Ok(Quantization {
        method,
        format: WeightFormat::Fp8Block { block },
        exclude,
    })
}
