//! vLLM's CUDA-graph capture sizes (`data/vllm/cudagraph.toml`) and the batch padding they
//! imply: with full CUDA graphs a decode step's token count is padded up to the smallest
//! captured size at or above it; above the largest captured size the step runs without a full
//! graph and is not padded. A speculative verify pass (k+1 query tokens per sequence) uses the
//! sizes adjusted to multiples of k+1 (the file's `verify_rule`).

use crate::error::{Error, Result};
use crate::files::InputKind;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Capture sizes above this are refused (a typo is likelier than intent).
const MAX_SIZE: u32 = 1 << 16;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeToml {
    start: u32,
    stop: Option<u32>,
    step: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ByCapability {
    prefix: String,
    max_capture_size: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    source: String,
    explicit: Vec<u32>,
    ranges: Vec<RangeToml>,
    max_capture_size: u32,
    #[serde(default)]
    max_capture_size_by_compute_capability: Vec<ByCapability>,
    verify_rule: String,
}

/// How the verify pass's sizes follow from the decode sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VerifyRule {
    /// Every size rounded up to a multiple of k+1 (those above the largest size dropped).
    RoundUp,
    /// Only the sizes already divisible by k+1.
    Multiples,
}

/// Which sizes a forward pass is padded to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadRule {
    /// A plain decode step (and each draft pass): the captured sizes.
    Decode,
    /// A uniform decode batch of `q` query tokens per sequence (the verify pass).
    Uniform { q: u32 },
}

/// The token count a pass runs at under CUDA graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Padding {
    /// Real tokens (batch × queries).
    pub(crate) tokens: u64,
    /// Tokens the pass's kernels run over (= `tokens` when not padded).
    pub padded: u64,
    /// False with graphs on when the pass is above the largest captured size (no full graph).
    pub captured: bool,
}

/// The capture sizes for one GPU.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CaptureSizes {
    /// Sorted, distinct, all ≤ `max`.
    sizes: Vec<u32>,
    pub(crate) max: u32,
    verify_rule: VerifyRule,
    source: String,
    pub(crate) path: PathBuf,
}

pub fn file() -> PathBuf {
    super::catalog::data_root().join("data/vllm/cudagraph.toml")
}

impl CaptureSizes {
    /// Reads the capture sizes for a GPU of `compute_capability` from `path`.
    fn from_file(path: &Path, compute_capability: &str) -> Result<Self> {
        let f: FileToml = crate::files::read_toml(path, InputKind::SystemToml)?;
        let bad = |field: &str, what: String| Err(Error::field(path, field, what));
        let mut max = f.max_capture_size;
        for c in &f.max_capture_size_by_compute_capability {
            if compute_capability.starts_with(c.prefix.as_str()) {
                max = c.max_capture_size;
            }
        }
        if max == 0 || max > MAX_SIZE {
            return bad(
                "max_capture_size",
                format!("{max} is out of range: expected 1 to {MAX_SIZE}"),
            );
        }
        let mut sizes: Vec<u32> = Vec::new();
        for &x in &f.explicit {
            if x == 0 || x > MAX_SIZE {
                return bad(
                    "explicit",
                    format!("size {x} is out of range: expected 1 to {MAX_SIZE}"),
                );
            }
            sizes.push(x);
        }
        for r in &f.ranges {
            if r.step == 0 || r.start == 0 {
                return bad(
                    "ranges",
                    format!(
                        "{{start = {}, step = {}}}: start and step must be at least 1",
                        r.start, r.step
                    ),
                );
            }
            let stop = r.stop.unwrap_or(max.saturating_add(1)).min(MAX_SIZE + 1);
            sizes.extend((r.start..stop).step_by(r.step as usize));
        }
        sizes.retain(|&x| x <= max);
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.is_empty() {
            return bad(
                "explicit",
                format!("no capture size at or below max_capture_size {max}"),
            );
        }
        let verify_rule = match f.verify_rule.as_str() {
            "round_up" => VerifyRule::RoundUp,
            "multiples" => VerifyRule::Multiples,
            other => {
                let v: String = other.chars().take(80).collect();
                return bad(
                    "verify_rule",
                    format!("'{v}' is not a rule: expected round_up or multiples"),
                );
            }
        };
        Ok(CaptureSizes {
            max: *sizes.last().expect("checked non-empty"),
            sizes,
            verify_rule,
            source: f.source,
            path: path.to_path_buf(),
        })
    }

    /// The bundled sizes (`data/vllm/cudagraph.toml`) for a GPU of `compute_capability`.
    pub(crate) fn load(compute_capability: &str) -> Result<Self> {
        Self::from_file(&file(), compute_capability)
    }

    /// The smallest captured size ≥ `tokens` under `rule`; None above the largest.
    fn pad(&self, tokens: u64, rule: PadRule) -> Option<u64> {
        match rule {
            PadRule::Uniform { q } if q > 1 => {
                let q = q as u64;
                let max = self.max as u64;
                self.sizes
                    .iter()
                    .filter_map(|&x| {
                        let x = x as u64;
                        match self.verify_rule {
                            VerifyRule::RoundUp => Some(x.div_ceil(q) * q).filter(|&r| r <= max),
                            VerifyRule::Multiples => Some(x).filter(|x| x % q == 0),
                        }
                    })
                    .filter(|&x| x >= tokens)
                    .min()
            }
            _ => self.sizes.iter().map(|&x| x as u64).find(|&x| x >= tokens),
        }
    }

    /// The padding of a pass of `tokens` real tokens, with graphs on or off.
    pub(crate) fn padding(&self, tokens: u64, rule: PadRule, graphs: bool) -> Padding {
        let padded = if graphs { self.pad(tokens, rule) } else { None };
        Padding {
            tokens,
            padded: padded.unwrap_or(tokens),
            captured: padded.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundled() -> CaptureSizes {
        CaptureSizes::load("12.0").unwrap()
    }

    #[test]
    fn bundled_sizes_are_vllms_defaults() {
        let c = bundled();
        let mut want = vec![1u32, 2, 4];
        want.extend((8..256).step_by(8));
        want.extend((256..=512).step_by(16));
        assert_eq!(c.sizes, want);
        assert_eq!(c.max, 512);
        assert_eq!(CaptureSizes::load("10.0").unwrap().max, 1024);
        assert_eq!(c.pad(33, PadRule::Decode), Some(40));
        assert_eq!(c.pad(32, PadRule::Decode), Some(32));
        assert_eq!(c.pad(3, PadRule::Decode), Some(4));
        assert_eq!(c.pad(257, PadRule::Decode), Some(272));
        assert_eq!(c.pad(513, PadRule::Decode), None);
        // Verify passes: sizes rounded up to multiples of k+1.
        assert_eq!(c.pad(9, PadRule::Uniform { q: 3 }), Some(9));
        assert_eq!(c.pad(15, PadRule::Uniform { q: 3 }), Some(18));
        assert_eq!(c.pad(12, PadRule::Uniform { q: 4 }), Some(16));
        assert_eq!(c.pad(511, PadRule::Uniform { q: 3 }), None);
        assert_eq!(c.pad(33, PadRule::Uniform { q: 1 }), Some(40));
        let g = c.padding(600, PadRule::Decode, true);
        assert_eq!((g.padded, g.captured), (600, false));
        let g = c.padding(33, PadRule::Decode, false);
        assert_eq!((g.padded, g.captured), (33, false));
    }

    #[test]
    fn bad_files_are_refused_by_field() {
        let dir = std::env::temp_dir().join(format!("decodesim-cg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = std::fs::read_to_string(file()).unwrap();
        for (field, from, to) in [
            (
                "verify_rule",
                "verify_rule = \"round_up\"",
                "verify_rule = \"nope\"",
            ),
            (
                "max_capture_size",
                "max_capture_size = 512",
                "max_capture_size = 0",
            ),
            (
                "ranges",
                "start = 8, stop = 256, step = 8",
                "start = 8, stop = 256, step = 0",
            ),
        ] {
            let p = dir.join(format!("{field}.toml"));
            std::fs::write(&p, base.replace(from, to)).unwrap();
            let e = CaptureSizes::from_file(&p, "12.0").unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
        let mut multiples = bundled();
        multiples.verify_rule = VerifyRule::Multiples;
        assert_eq!(multiples.pad(9, PadRule::Uniform { q: 3 }), Some(24));
    }
}
