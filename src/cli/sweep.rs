//! `decodesim sweep`: a Cartesian grid of scenarios priced by the aggregate fast path.

use super::print;
use crate::error::{Error, Result};
use crate::report::{self, Format};
use crate::sim::ScenarioRequest;
use crate::spec::{Algo, Proto};
use crate::whatif::acceptance::Acceptance;
use crate::whatif::draft::Method;
use crate::whatif::sweep::{self, SweepRequest};
use crate::whatif::{parse_f64_list, parse_u32_list};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// Model: a bundled name or a config.json.
    #[arg(long, default_value = "kimi-k2.5")]
    pub model: String,
    /// System: a bundled name or a system TOML.
    #[arg(long, default_value = "rtx-pro-6000-8x-pcie")]
    pub system: String,
    /// Tensor-parallel size [default: every GPU of the system].
    #[arg(long)]
    pub tp: Option<u32>,
    /// Calibration profile [default: the system's own].
    #[arg(long)]
    pub calibration: Option<String>,
    /// KV-cache element: bf16 or fp8.
    #[arg(long, default_value = "bf16", value_parser = ["bf16", "fp8"])]
    pub kv_cache_dtype: String,
    /// Batches: a list and/or ranges (1..=256, both ends included).
    #[arg(long, default_value = "32")]
    pub batch: String,
    /// Contexts (tokens): a list and/or ranges.
    #[arg(long, default_value = "4096")]
    pub context: String,
    /// NCCL protocols: a list of LL, LL128, Simple, auto.
    #[arg(long, default_value = "LL")]
    pub nccl_proto: String,
    /// NCCL algorithms: a list of Ring, Tree, auto.
    #[arg(long, default_value = "Ring")]
    pub nccl_algo: String,
    /// CUDA graphs: on, off or on,off.
    #[arg(long, default_value = "on")]
    pub cuda_graphs: String,
    /// Draft tokens per step (0 = no speculation): a list and/or ranges.
    #[arg(long, default_value = "0")]
    pub draft_tokens: String,
    /// Speculative method when draft tokens > 0: eagle3, mtp or draft-model.
    #[arg(long, default_value = "eagle3")]
    pub method: String,
    /// EAGLE-3 draft config.json, or the draft model for --method draft-model.
    #[arg(long)]
    pub draft: Option<String>,
    /// vLLM's draft acceptance rate (mean length 1 + k x R), for draft tokens > 0.
    #[arg(long)]
    pub acceptance_rate: Option<f64>,
    /// vLLM's per-position acceptance rates a1,a2,...
    #[arg(long, conflicts_with = "acceptance_rate")]
    pub acceptance_per_position: Option<String>,
    /// Print only the Pareto front of total vs per-user tokens/s (every row carries `pareto`).
    #[arg(long)]
    pub pareto: bool,
    /// Every row as CSV or JSON; without it, a short summary.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Write the rows to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

fn list<T>(flag: &str, text: &str, parse: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let v: Vec<T> = text
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| parse(s.trim()))
        .collect::<Result<_>>()?;
    if v.is_empty() {
        return Err(Error::Scenario(format!("{flag} '{text}': no values")));
    }
    Ok(v)
}

pub fn request(a: &SweepArgs) -> Result<SweepRequest> {
    let base = ScenarioRequest {
        model: a.model.clone(),
        system: a.system.clone(),
        tp: a.tp,
        calibration: a.calibration.clone(),
        kv_bytes: if a.kv_cache_dtype == "fp8" { 1.0 } else { 2.0 },
        ..ScenarioRequest::default()
    };
    let acceptance = match (a.acceptance_rate, &a.acceptance_per_position) {
        (Some(r), _) => Some(Acceptance::rate(r)?),
        (None, Some(l)) => Some(Acceptance::per_position(parse_f64_list(
            "--acceptance-per-position",
            l,
        )?)?),
        _ => None,
    };
    Ok(SweepRequest {
        base,
        batch: parse_u32_list("--batch", &a.batch, 1..=crate::spec::scenario::MAX_BATCH)?,
        context: parse_u32_list("--context", &a.context, 1..=10_000_000)?
            .into_iter()
            .map(u64::from)
            .collect(),
        proto: list("--nccl-proto", &a.nccl_proto, |s| s.parse::<Proto>())?,
        algo: list("--nccl-algo", &a.nccl_algo, |s| s.parse::<Algo>())?,
        cuda_graphs: list("--cuda-graphs", &a.cuda_graphs, |s| {
            match s.to_ascii_lowercase().as_str() {
                "on" => Ok(true),
                "off" => Ok(false),
                _ => Err(Error::Scenario(format!(
                    "--cuda-graphs '{s}': expected on or off"
                ))),
            }
        })?,
        draft_tokens: parse_u32_list("--draft-tokens", &a.draft_tokens, 0..=64)?,
        method: a.method.parse::<Method>()?,
        draft: a.draft.clone(),
        acceptance,
    })
}

pub fn run(a: SweepArgs) -> Result<()> {
    let req = request(&a)?;
    let started = std::time::Instant::now();
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(req.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} scenarios ({per_sec}, {eta})",
            )
            .expect("static template"),
        );
        Some(b)
    } else {
        None
    };
    let progress = |n: u64| {
        if let Some(b) = &bar {
            b.inc(n);
        }
    };
    let result = sweep::run(&req, &progress)?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let text = match a.format {
        None | Some(Format::Table) => {
            report::sweep::summary(&result, started.elapsed().as_secs_f64())
        }
        Some(Format::Csv) => report::sweep::to_csv(&result, a.pareto),
        Some(Format::Json) => {
            serde_json::to_string(&report::sweep::to_json(&result, a.pareto)).expect("JSON value")
                + "\n"
        }
    };
    match (&a.output, a.format) {
        (Some(path), Some(_)) => crate::files::write_atomic_bytes(path, text.as_bytes()),
        _ => print(&text),
    }
}
