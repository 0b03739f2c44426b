//! What a trace shows of the scenario it was captured from (ranks, decoder layers, batch,
//! context), so `compare`, `validate` and `calibrate --from-trace` can refuse to hold a
//! simulation against a trace of something else: a 2-rank, 4-layer trace against an 8-rank,
//! 61-layer scenario is not a +360% error of the simulator, it is a mistake of the user.
//!
//! Each quantity is inferred only from what the trace itself says, and says how:
//! - ranks: `distributedInfo.world_size`, else the number of rank files;
//! - layers: the collectives per decode step of a tensor-parallel step, which follow vLLM's
//!   pattern of two all-reduces per decoder layer (after attention and after the MLP/MoE) plus
//!   two per step (the vocabulary-parallel embedding's all-reduce and the logits' all-gather):
//!   `layers = (collectives − 2) / 2`. A single-rank trace has no collectives: layers unknown;
//! - batch: the decode-step annotations (vLLM `execute_*_generation_{B}(...)`, SGLang and ATOM
//!   `bs={B}`);
//! - context: vLLM's `generation_{B}(sq{Q}sk{K}...)`, where K is the summed KV length of the
//!   batch including the token being decoded: context = K / B − 1 (a mean over the batch).
//!
//! Imports `trace`, `accounting` and the plain `scenario::Scenario` it is held against.

use super::TraceSummary;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use crate::trace::steps::StepKind;
use regex::Regex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// A value the trace shows, and how it was found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Found<T> {
    pub value: T,
    how: String,
}

/// What the trace shows of its scenario; `None` where it does not show it (`unknown` says why).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Inferred {
    pub ranks: Option<Found<u32>>,
    pub layers: Option<Found<usize>>,
    pub batch: Option<Found<u32>>,
    /// Mean tokens already in each sequence's KV cache.
    pub context: Option<Found<f64>>,
    /// The GPU the trace ran on (`deviceProperties`' name of the analysed device).
    pub gpu: Option<Found<String>>,
    /// Why a quantity is unknown, one line each.
    pub(crate) unknown: Vec<String>,
}

/// A mean context this close to the scenario's (relative) counts as the same: the trace's is a
/// mean over sequences of slightly different lengths.
const CONTEXT_TOLERANCE: f64 = 0.05;

/// The most common value and how many distinct values there were.
fn mode<T: Ord + Copy>(values: impl Iterator<Item = T>) -> Option<(T, usize)> {
    let mut count: BTreeMap<T, usize> = BTreeMap::new();
    for v in values {
        *count.entry(v).or_default() += 1;
    }
    let distinct = count.len();
    count
        .into_iter()
        .max_by_key(|&(v, n)| (n, std::cmp::Reverse(v)))
        .map(|(v, _)| (v, distinct))
}

fn vllm_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(r"^execute_(?:\d+_)?context_\d+\([^)]*\)_generation_(\d+)\(([^)]*)\)")
            .unwrap_or_else(|e| unreachable!("fixed regex: {e}"))
    })
}

fn bs_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(r"^(?:step|decode)\[[^\]]*\bbs=(\d+)")
            .unwrap_or_else(|e| unreachable!("fixed regex: {e}"))
    })
}

fn sk_re() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| Regex::new(r"^sq\d+sk(\d+)").unwrap_or_else(|e| unreachable!("{e}")))
}

/// Batch and summed KV length of one decode-step annotation.
fn step_batch(name: &str) -> Option<(u32, Option<u64>, &'static str)> {
    if let Some(c) = vllm_re().captures(name) {
        let b: u32 = c[1].parse().ok()?;
        let sk = sk_re()
            .captures(&c[2])
            .and_then(|k| k[1].parse::<u64>().ok());
        return Some((b, sk, "vLLM execute_*_generation_{B} annotations"));
    }
    let c = bs_re().captures(name)?;
    Some((c[1].parse().ok()?, None, "step annotations' bs={B}"))
}

impl<T> Found<T> {
    /// How the value was found (`distributedInfo.world_size`).
    pub(crate) fn how(&self) -> &str {
        &self.how
    }
}

/// The words of a GPU name that tell the model: lower-case, vendor and family words dropped
/// (`NVIDIA H200 SXM` → `h200 sxm`, `AMD Instinct MI300X` → `mi300x`).
fn gpu_words(name: &str) -> Vec<String> {
    const VENDOR: &[&str] = &[
        "nvidia", "amd", "instinct", "radeon", "geforce", "tesla", "intel",
    ];
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_ascii_lowercase)
        .filter(|w| !w.is_empty() && !VENDOR.contains(&w.as_str()))
        .collect()
}

/// Whether a trace's GPU name and a system's GPU (its display name) are one model: the first
/// word holding a digit (the model number: `h200`, `mi300x`, `6000`) is the same, and every
/// other word of the shorter name is in the longer (`RTX PRO 6000 Blackwell` is not an
/// `RTX 6000 Ada`).
pub(crate) fn same_gpu(trace: &str, system: &str) -> bool {
    let (a, b) = (gpu_words(trace), gpu_words(system));
    let model = |w: &[String]| {
        w.iter()
            .find(|x| x.chars().any(|c| c.is_ascii_digit()))
            .cloned()
    };
    match (model(&a), model(&b)) {
        (Some(x), Some(y)) if x == y => {
            // Memory sizes and form factors (`80gb`, `hbm3`, `sxm`, `pcie`, `server`,
            // `edition`) differ between how drivers and spec sheets name one GPU.
            let loose = |w: &str| {
                w.ends_with("gb")
                    || w.starts_with("hbm")
                    || [
                        "sxm",
                        "sxm5",
                        "pcie",
                        "nvl",
                        "server",
                        "edition",
                        "workstation",
                        "oam",
                    ]
                    .contains(&w)
            };
            let (short, long) = if a.len() <= b.len() {
                (&a, &b)
            } else {
                (&b, &a)
            };
            short.iter().filter(|w| !loose(w)).all(|w| long.contains(w))
        }
        (None, _) | (_, None) => a == b,
        _ => false,
    }
}

/// What `s` shows of the scenario it was captured from (module doc: the rules).
pub fn infer_scenario(s: &TraceSummary) -> Inferred {
    let mut out = Inferred {
        gpu: s
            .ranks
            .iter()
            .find_map(|r| r.device.clone())
            .map(|g| Found {
                value: g,
                how: "deviceProperties".into(),
            }),
        ..Inferred::default()
    };
    if out.gpu.is_none() {
        // Said, not passed over: a trace of another GPU would be compared without a word.
        out.unknown
            .push("GPU: the trace names no device (no deviceProperties)".into());
    }
    let world = s.ranks.iter().find_map(|r| r.world_size);
    out.ranks = Some(match world.and_then(|w| u32::try_from(w).ok()) {
        Some(w) => Found {
            value: w,
            how: "distributedInfo.world_size".into(),
        },
        None => Found {
            value: s.ranks.len() as u32,
            how: "the number of rank files".into(),
        },
    });
    let ranks = out.ranks.as_ref().map_or(1, |r| r.value);

    infer_layers(s, ranks, &mut out);
    infer_batch_context(s, &mut out);
    out
}

/// Layers, from the first rank with decode steps.
fn infer_layers(s: &TraceSummary, ranks: u32, out: &mut Inferred) {
    let decode =
        |r: &&super::summary::RankSummary| r.selected_steps().any(|st| st.kind == StepKind::Decode);
    let first = s.ranks.iter().find(decode).or(s.ranks.first());
    match first.and_then(|r| mode(r.selected_steps().map(|st| st.collectives))) {
        _ if ranks < 2 => out
            .unknown
            .push("layers: one rank, so no per-layer collectives to count".into()),
        Some((c, _)) if c >= 4 && (c - 2) % 2 == 0 => {
            out.layers = Some(Found {
                value: (c - 2) / 2,
                how: format!(
                    "{c} collectives per step = 2 per decoder layer + 2 (embedding all-reduce, logits all-gather)"
                ),
            })
        }
        Some((c, _)) => out.unknown.push(format!(
            "layers: {c} collectives per step do not follow the 2-per-layer + 2 pattern"
        )),
        None => out.unknown.push("layers: no steps".into()),
    }
}

/// Batch and context, from the decode-step annotations of every rank.
fn infer_batch_context(s: &TraceSummary, out: &mut Inferred) {
    let parsed: Vec<(u32, Option<u64>, &str)> = s
        .ranks
        .iter()
        .flat_map(|r| r.selected_steps())
        .filter(|st| st.kind == StepKind::Decode)
        .filter_map(|st| step_batch(&st.name))
        .collect();
    match mode(parsed.iter().map(|p| p.0)) {
        Some((b, distinct)) => {
            let how = parsed[0].2;
            out.batch = Some(Found {
                value: b,
                how: if distinct > 1 {
                    format!("{how} (the most common of {distinct} values)")
                } else {
                    how.to_string()
                },
            });
            let ctx: Vec<f64> = parsed
                .iter()
                .filter(|p| p.0 == b && b > 0)
                .filter_map(|p| p.1.map(|sk| sk as f64 / b as f64 - 1.0))
                .collect();
            if ctx.is_empty() {
                out.unknown
                    .push("context: the step annotations do not give KV lengths".into());
            } else {
                out.context = Some(Found {
                    value: ctx.iter().sum::<f64>() / ctx.len() as f64,
                    how: "vLLM generation_{B}(sq..sk{K}): K / B - 1, mean over the batch".into(),
                });
            }
        }
        None => {
            out.unknown
                .push("batch: no decode-step annotation gives the batch".into());
            out.unknown
                .push("context: no decode-step annotation".into());
        }
    }
}

impl Inferred {
    /// One line per quantity: what the trace shows and how, or why it is unknown.
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(r) = &self.ranks {
            v.push(format!("ranks {} ({})", r.value, r.how));
        }
        if let Some(l) = &self.layers {
            v.push(format!("layers {} ({})", l.value, l.how));
        }
        if let Some(b) = &self.batch {
            v.push(format!("batch {} ({})", b.value, b.how));
        }
        if let Some(c) = &self.context {
            v.push(format!("context {:.0} ({})", c.value, c.how));
        }
        if let Some(g) = &self.gpu {
            v.push(format!("GPU {} ({})", g.value, g.how));
        }
        v.extend(self.unknown.iter().map(|u| format!("{u} (not checked)")));
        v
    }
}

/// Holds `scenario` against what the trace shows. `Err(Error::Mismatch)` names every quantity
/// that differs (scenario value vs trace value); `Ok` carries one note per quantity checked or
/// not shown, for the report.
fn check_against(scenario: &Scenario, inferred: &Inferred) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    if let Some(r) = &inferred.ranks {
        if r.value != scenario.layout.tp {
            problems.push(format!(
                "ranks: scenario {} (--tp), trace {} ({})",
                scenario.layout.tp, r.value, r.how
            ));
        }
    }
    if let Some(l) = &inferred.layers {
        if l.value != scenario.model.num_layers {
            problems.push(format!(
                "layers: scenario {} ({}; --layers overrides), trace {} ({})",
                scenario.model.num_layers, scenario.model.name, l.value, l.how
            ));
        }
    }
    if let Some(b) = &inferred.batch {
        if b.value != scenario.batch {
            problems.push(format!(
                "batch: scenario {} (--batch), trace {} ({})",
                scenario.batch, b.value, b.how
            ));
        }
    }
    if let Some(c) = &inferred.context {
        let want = scenario.context as f64;
        if (c.value - want).abs() > CONTEXT_TOLERANCE * want.max(c.value) {
            problems.push(format!(
                "context: scenario {} (--context), trace {:.0} ({}; {:.0}% tolerance)",
                scenario.context,
                c.value,
                c.how,
                CONTEXT_TOLERANCE * 100.0
            ));
        }
    }
    if let Some(g) = &inferred.gpu {
        let sys = &scenario.system.gpu;
        if !same_gpu(&g.value, &sys.display_name) {
            problems.push(format!(
                "GPU: scenario {} ({}, --system), trace {} ({}); pass a --system of the trace's GPU (`decodesim list` shows them)",
                sys.display_name, scenario.system.name, g.value, g.how
            ));
        }
    }
    if problems.is_empty() {
        Ok(inferred.lines())
    } else {
        Err(Error::Mismatch { problems })
    }
}

/// [`check_against`], with `allow` (`--allow-mismatch`) turning the mismatches into notes.
pub(crate) fn check_or_allow(
    scenario: &Scenario,
    inferred: &Inferred,
    allow: bool,
) -> Result<Vec<String>> {
    match check_against(scenario, inferred) {
        Err(Error::Mismatch { problems }) if allow => {
            let mut notes: Vec<String> = problems
                .into_iter()
                .map(|p| format!("MISMATCH (allowed by --allow-mismatch): {p}"))
                .collect();
            notes.extend(inferred.lines());
            Ok(notes)
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_and_context_from_annotations() {
        let (b, sk, _) = step_batch(
            "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)",
        )
        .unwrap();
        assert_eq!((b, sk), (32, Some(32785)));
        let (b, sk, _) = step_batch("execute_context_0(0)_generation_16(16)").unwrap();
        assert_eq!((b, sk), (16, None));
        assert_eq!(step_batch("step[DECODE bs=8]").unwrap().0, 8);
        assert!(step_batch("ProfilerStep#3").is_none());
    }

    #[test]
    fn gpu_names_of_one_model_match_and_others_do_not() {
        assert!(same_gpu("NVIDIA H200", "NVIDIA H200 SXM"));
        assert!(same_gpu("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"));
        assert!(same_gpu(
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        ));
        assert!(!same_gpu("AMD Instinct MI300X", "NVIDIA H200 SXM"));
        assert!(!same_gpu("NVIDIA H100 80GB HBM3", "NVIDIA H200 SXM"));
        assert!(!same_gpu(
            "NVIDIA RTX 6000 Ada Generation",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        ));
    }

    #[test]
    fn mode_prefers_the_most_common() {
        assert_eq!(mode([10, 10, 12].into_iter()), Some((10, 2)));
        assert_eq!(mode(std::iter::empty::<u32>()), None);
    }
}
