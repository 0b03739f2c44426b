//! `decodesim sweep`: a Cartesian grid of scenarios priced by the aggregate fast path.

use crate::error::{Error, Result};
use crate::report::sweep::{Kind, Writer};
use crate::report::Format;
use crate::scenario::knobs::{knob, Knob, Value};
use crate::scenario::Proto;
use crate::sim::ScenarioRequest;
use crate::whatif::acceptance::Acceptance;
use crate::whatif::draft::Method;
use crate::whatif::sweep::{self, KvBudget, SweepRequest};
use crate::whatif::{parse_f64_list, parse_u32_list};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

mod axes;
mod grid;
pub use axes::LayoutAxisArgs;
use grid::grid_args;

/// Most pipeline stages a sweep list may name (each is validated against the system's GPUs and
/// the model's layers when loaded; this only bounds the list's parsing).
const MAX_PP: u32 = 1024;

/// The grid flags, which `--grid` replaces (a grid file holds the same keys); the layout
/// settings' flags conflict with it where they are made (`LayoutAxisArgs`).
const GRID_FLAGS: [&str; 21] = [
    "model",
    "system",
    "tp",
    "calibration",
    "kv_cache_dtype",
    "batch",
    "context",
    "nccl_proto",
    "nccl_algo",
    "cuda_graphs",
    "draft_tokens",
    "method",
    "draft",
    "acceptance_rate",
    "acceptance_per_position",
    "pp",
    "dp",
    "ep",
    "ep_comm",
    "redundant_experts",
    "fuse_allreduce_rms",
];

#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// The grid as a TOML file with the flags' own keys (batch = "1..=256",
    /// context = [1024, 4096], nccl-proto = ["LL", "Simple"], cuda-graphs = "on,off", ...),
    /// instead of the grid flags.
    #[arg(long, value_name = "FILE.toml", conflicts_with_all = GRID_FLAGS)]
    grid: Option<PathBuf>,
    #[arg(long, default_value_t = knob("model").default_text(), hide_default_value = true, help = knob("model").help_text())]
    pub model: String,
    #[arg(long, default_value_t = knob("system").default_text(), hide_default_value = true, help = knob("system").help_text())]
    pub system: String,
    #[arg(long, help = knob("tp").help_text())]
    tp: Option<u32>,
    /// Data-parallel attention: a list and/or ranges, each value its own fitted layout.
    #[arg(long, help = list_help("dp", "A list and/or ranges (1,2,4); each value uses dp x tp GPUs."))]
    dp: Option<String>,
    #[arg(long, help = knob("ep").help_text())]
    ep: Option<u32>,
    /// The layout settings' lists (`--tbo`, `--nccl-min-nchannels`, ...), from the knob table.
    #[command(flatten)]
    pub(crate) layout_axes: LayoutAxisArgs,
    #[arg(long, help = knob("ep-comm").help_text())]
    ep_comm: Option<String>,
    #[arg(long, help = knob("redundant-experts").help_text())]
    redundant_experts: Option<u32>,
    #[arg(long, value_name = "on|off", help = knob("fuse-allreduce-rms").help_text())]
    fuse_allreduce_rms: Option<String>,
    #[arg(long, help = knob("calibration").help_text())]
    calibration: Option<String>,
    #[arg(long, default_value_t = knob("kv-cache-dtype").default_text(), hide_default_value = true, help = knob("kv-cache-dtype").help_text())]
    kv_cache_dtype: String,
    #[arg(long, default_value_t = knob("batch").default_text(), hide_default_value = true, help = list_help("batch", "A list and/or ranges (1..=256, both ends included)."))]
    batch: String,
    #[arg(long, default_value_t = knob("context").default_text(), hide_default_value = true, help = list_help("context", "A list and/or ranges."))]
    context: String,
    #[arg(long, default_value_t = knob("nccl-proto").default_text(), hide_default_value = true, help = list_help("nccl-proto", "A list of LL, LL128, Simple, auto."))]
    nccl_proto: String,
    #[arg(long, default_value_t = knob("nccl-algo").default_text(), hide_default_value = true, help = list_help("nccl-algo", "A list of Ring, Tree, auto."))]
    nccl_algo: String,
    #[arg(long, default_value_t = knob("cuda-graphs").default_text(), hide_default_value = true, help = list_help("cuda-graphs", "on, off or on,off."))]
    cuda_graphs: String,
    /// Draft tokens per step (0 = no speculation): a list and/or ranges.
    #[arg(long, default_value = "0")]
    draft_tokens: String,
    #[arg(long, default_value = Method::DEFAULT.name(), help = method_help())]
    method: String,
    #[arg(long, help = draft_help())]
    pub draft: Option<String>,
    /// vLLM's draft acceptance rate (mean length 1 + k x R), for draft tokens > 0.
    #[arg(long)]
    acceptance_rate: Option<f64>,
    /// vLLM's per-position acceptance rates a1,a2,...
    #[arg(long, conflicts_with = "acceptance_rate")]
    acceptance_per_position: Option<String>,
    /// Print only the Pareto front of total vs per-user tokens/s (every row carries `pareto`).
    #[arg(long)]
    pareto: bool,
    /// Every row as CSV or JSON; without it, a short summary.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Write the rows to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Share of each GPU's memory vLLM may use: a scenario fits when weights, activations,
    /// CUDA graphs, buffers and its KV cache do (the `fits` column; `capacity`'s accounting).
    #[arg(long, default_value_t = crate::scenario::deployment::DEFAULT_GPU_MEMORY_UTILIZATION, value_name = "SHARE")]
    gpu_memory_utilization: f64,
    /// Rank scenarios that do not fit in memory too (best rows and the Pareto front).
    #[arg(long)]
    include_infeasible: bool,
    /// Most work the sweep may take, in units of about 1 µs of CPU (one per scenario); a larger
    /// grid is refused before it starts.
    #[arg(long, default_value_t = crate::error::DEFAULT_MAX_WORK, value_name = "UNITS")]
    max_work: u64,
    /// Add p5/p95 of tokens/s to every row (CSV columns tokens_per_s_p5, tokens_per_s_p95;
    /// JSON `tokens_per_s_interval`): Monte Carlo draws of the uncertain prices (`--draws`).
    #[arg(long)]
    intervals: bool,
    #[command(flatten)]
    pub(crate) interval_args: super::intervals::IntervalArgs,
    /// Pipeline stages: a list and/or ranges (each value is priced with its own stages; tp x pp
    /// GPUs each).
    #[arg(long, help = list_help("pp", "A list and/or ranges (1,2,4); each value uses tp x pp GPUs."))]
    pp: Option<String>,
}

/// A sweep axis's help: the knob's, how to list values, and its default as a value.
fn list_help(name: &str, how: &str) -> String {
    let k = knob(name);
    format!("{} {how} [default: {}]", k.help, k.default_text())
}

/// `--method`'s help, listing the table of methods.
fn method_help() -> String {
    format!(
        "Speculative method when draft tokens > 0: {}",
        Method::names_where(|_| true)
    )
}

/// `--draft`'s help: the methods that take a draft file.
fn draft_help() -> String {
    use crate::workload::spec_method::DraftSource;
    format!(
        "{} draft config.json, or the draft model for --method {}",
        Method::choices(|m| m.source == DraftSource::HeadConfig, |m| m.label.into()),
        Method::names_where(|m| m.source == DraftSource::Model)
    )
}

/// A list of one knob's values, each read by the knob's own parser and applied to a request,
/// then taken back out by `read`.
fn axis<T>(name: &str, text: &str, read: fn(&ScenarioRequest) -> T) -> Result<Vec<T>> {
    let k = knob(name);
    list(k.flag, text, |s| {
        let mut r = ScenarioRequest::default();
        k.set(&mut r, s)?;
        Ok(read(&r))
    })
}

fn list<T>(flag: &str, text: &str, parse: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let v: Vec<T> = text
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| parse(s.trim()))
        .collect::<Result<_>>()?;
    if v.is_empty() {
        return Err(Error::FlagList {
            flag: flag.to_string(),
            text: text.to_string(),
            problem: "no values".into(),
            expected: "at least one value".into(),
        });
    }
    Ok(v)
}

/// Keeps the first of each value, and says which were listed more than once (a duplicate
/// would only repeat rows).
fn dedup<T: PartialEq>(
    flag: &str,
    v: Vec<T>,
    show: impl Fn(&T) -> String,
    warnings: &mut Vec<String>,
) -> Vec<T> {
    // By the values' shown names (one per value), in a hash set: a range of a million values
    // is deduplicated in linear time.
    let mut seen: std::collections::HashSet<String> =
        std::collections::HashSet::with_capacity(v.len());
    let mut kept: Vec<T> = Vec::with_capacity(v.len());
    let mut repeated: Vec<String> = Vec::new();
    for x in v {
        let s = show(&x);
        if seen.contains(&s) {
            if !repeated.contains(&s) {
                repeated.push(s);
            }
        } else {
            seen.insert(s);
            kept.push(x);
        }
    }
    if !repeated.is_empty() {
        warnings.push(format!(
            "{flag} lists {} more than once; each value is swept once",
            repeated.join(", ")
        ));
    }
    kept
}

pub fn request(a: &SweepArgs) -> Result<SweepRequest> {
    request_with_warnings(a).map(|(r, _)| r)
}

/// The request, each list without repeated values, and the warnings saying which were repeated.
fn request_with_warnings(a: &SweepArgs) -> Result<(SweepRequest, Vec<String>)> {
    if let Some(path) = &a.grid {
        return request_with_warnings(&grid_args(path, a)?);
    }
    let mut w = Vec::new();
    let base = base_request(a)?;
    let acceptance = acceptance(a)?;
    let (pp, dp) = layout_lists(a, &mut w)?;
    let settings = layout_settings(&a.layout_axes, &mut w)?;
    let num = |x: &u32| x.to_string();
    let req = SweepRequest {
        base,
        pp,
        dp,
        settings,
        batch: dedup(
            "--batch",
            parse_u32_list(
                "--batch",
                &a.batch,
                1..=crate::scenario::deployment::MAX_BATCH_ANY_DP,
            )?,
            num,
            &mut w,
        ),
        context: dedup(
            "--context",
            parse_u32_list("--context", &a.context, 1..=10_000_000)?,
            num,
            &mut w,
        )
        .into_iter()
        .map(u64::from)
        .collect(),
        proto: dedup(
            "--nccl-proto",
            axis("nccl-proto", &a.nccl_proto, |r| r.proto)?,
            |p| p.to_string(),
            &mut w,
        ),
        algo: dedup(
            "--nccl-algo",
            axis("nccl-algo", &a.nccl_algo, |r| r.algo)?,
            |x| x.to_string(),
            &mut w,
        ),
        cuda_graphs: dedup(
            "--cuda-graphs",
            axis("cuda-graphs", &a.cuda_graphs, |r| r.cuda_graphs)?,
            |on| if *on { "on" } else { "off" }.to_string(),
            &mut w,
        ),
        draft_tokens: dedup(
            "--draft-tokens",
            parse_u32_list("--draft-tokens", &a.draft_tokens, 0..=64)?,
            num,
            &mut w,
        ),
        method: a.method.parse::<Method>()?,
        draft: a.draft.clone(),
        acceptance,
        max_work: a.max_work,
        include_infeasible: a.include_infeasible,
    };
    w.extend(grid_warnings(a, &req));
    Ok((req, w))
}

/// The scenario every grid point starts from: the flags that take one value.
fn base_request(a: &SweepArgs) -> Result<ScenarioRequest> {
    let mut base = ScenarioRequest::default();
    knob("model").set(&mut base, &a.model)?;
    knob("system").set(&mut base, &a.system)?;
    knob("kv-cache-dtype").set(&mut base, &a.kv_cache_dtype)?;
    base.tp = a.tp;
    base.ep = a.ep;
    base.redundant_experts = a.redundant_experts;
    if let Some(c) = &a.ep_comm {
        knob("ep-comm").set(&mut base, c)?;
    }
    if let Some(f) = &a.fuse_allreduce_rms {
        knob("fuse-allreduce-rms").set(&mut base, f)?;
    }
    base.calibration = a.calibration.clone();
    Ok(base)
}

/// The acceptance the draft-token counts above 0 need, where given.
fn acceptance(a: &SweepArgs) -> Result<Option<Acceptance>> {
    Ok(match (a.acceptance_rate, &a.acceptance_per_position) {
        (Some(r), _) => Some(Acceptance::rate(r)?),
        (None, Some(l)) => Some(Acceptance::per_position(parse_f64_list(
            "--acceptance-per-position",
            l,
        )?)?),
        _ => None,
    })
}

/// The layout shapes: pp and dp (each empty when its flag is absent), without repeats.
fn layout_lists(a: &SweepArgs, w: &mut Vec<String>) -> Result<(Vec<u32>, Vec<u32>)> {
    let num = |x: &u32| x.to_string();
    let pp = match &a.pp {
        Some(text) => dedup("--pp", parse_u32_list("--pp", text, 1..=MAX_PP)?, num, w),
        None => Vec::new(),
    };
    let dp = match &a.dp {
        Some(text) => dedup("--dp", parse_u32_list("--dp", text, 1..=MAX_PP)?, num, w),
        None => Vec::new(),
    };
    Ok((pp, dp))
}

/// The layout settings' lists given, in the knob table's order, each value read by its knob's
/// parser, without repeats.
fn layout_settings(
    a: &LayoutAxisArgs,
    w: &mut Vec<String>,
) -> Result<Vec<(&'static Knob, Vec<Value>)>> {
    let mut out = Vec::new();
    for k in LayoutAxisArgs::knobs() {
        if let Some(text) = a.get(k) {
            let values = list(k.flag, text, |s| k.parse(s))?;
            out.push((k, dedup(k.flag, values, |v| v.to_string(), w)));
        }
    }
    Ok(out)
}

/// The grid's settings that run other than asked: LL128 where NCCL would not take it,
/// --ep-comm without expert parallelism.
fn grid_warnings(a: &SweepArgs, req: &SweepRequest) -> Vec<String> {
    let mut w = Vec::new();
    if req.proto.contains(&Proto::Ll128) {
        w.extend(super::scenario_args::ll128_warning(
            "--nccl-proto",
            &req.base,
        ));
    }
    // As `simulate` says it: no layout of the grid has expert parallelism for --ep-comm.
    if a.ep_comm.is_some() && req.base.ep.unwrap_or(1) <= 1 && req.dp.iter().all(|&d| d <= 1) {
        w.push(format!(
            "--ep-comm {} does nothing without --ep N (expert parallelism, N > 1) or --dp N; ignored",
            a.ep_comm.as_deref().unwrap_or_default()
        ));
    }
    w
}

/// The format `--output FILE` names by its extension, for when `--format` is not given.
fn format_for_output(path: &std::path::Path) -> Result<Format> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("csv") => Ok(Format::Csv),
        Some("json") => Ok(Format::Json),
        _ => Err(Error::Flag {
            flag: "--output",
            value: crate::units::echo(&path.display().to_string()),
            expected: "the extension names the format without --format: .csv or .json (or give --format csv|json|table)".into(),
        }),
    }
}

/// The memory of one CUDA-graph setting as `capacity` accounts it: the KV blocks left after
/// weights, activations, graphs and buffers (none when they alone do not fit).
fn kv_budget(
    s: &crate::scenario::Scenario,
    p: &crate::cost::CalibrationProfile,
    graphs: bool,
    utilization: f64,
) -> Result<KvBudget> {
    use crate::capacity::memory::{account, MemoryOptions};
    let mut s = s.clone();
    s.cuda_graphs = graphs;
    s.gpu_memory_utilization = utilization;
    // The scenario's own --dcp shards the KV cache, as in `capacity` and `simulate`.
    let o = MemoryOptions {
        gpu_memory_utilization: utilization,
        ..MemoryOptions::of_scenario(&s)
    };
    let tokens_per_block = o.block_size as u64 * o.dcp as u64;
    match account(&s, p, &o) {
        Ok(m) => Ok(KvBudget {
            num_blocks: m.num_blocks,
            tokens_per_block,
            max_num_seqs: o.max_num_seqs,
        }),
        // Weights and buffers alone are above the budget: no scenario fits.
        Err(Error::NoKvMemory { .. }) => Ok(KvBudget {
            num_blocks: 0,
            tokens_per_block,
            max_num_seqs: o.max_num_seqs,
        }),
        Err(e) => Err(e),
    }
}

/// The output's format: `--format` (or `--output`'s extension), else the short summary.
fn output_kind(format: Option<Format>) -> Kind {
    match format {
        None | Some(Format::Table) => Kind::Summary,
        Some(Format::Csv) => Kind::Csv,
        Some(Format::Json) => Kind::Json,
    }
}

/// The files a sweep reads (the grid file, the models, systems, profiles and drafts its lists
/// name) and the one it writes.
fn sweep_paths(a: &SweepArgs) -> super::paths::Paths {
    let mut p = super::paths::Paths::new();
    p.input_opt("--grid", a.grid.as_deref());
    for item in a.model.split(',') {
        p.model("--model", item.trim());
    }
    for item in a.system.split(',') {
        p.system("--system", item.trim());
    }
    for item in a.draft.iter().flat_map(|l| l.split(',')) {
        p.input_if_file("--draft", Some(item.trim()));
    }
    for item in a.calibration.iter().flat_map(|l| l.split(',')) {
        p.profile("--calibration", item.trim());
    }
    p.output("--output", a.output.as_deref());
    p
}

pub fn run(a: SweepArgs) -> Result<()> {
    super::output::check_output_flag("--output", a.output.as_deref())?;
    sweep_paths(&a).check()?;
    // The models, systems and profiles a grid file names are read too.
    if let Some(expanded) = a.grid.as_ref().and_then(|g| grid_args(g, &a).ok()) {
        sweep_paths(&expanded).check()?;
    }
    // Decided before the sweep runs, so a bad extension costs nothing.
    let format = match (a.format, &a.output) {
        (None, Some(path)) => Some(format_for_output(path)?),
        (f, _) => f,
    };
    let u = a.gpu_memory_utilization;
    check_memory_utilization(u)?;
    let (req, warnings) = request_with_warnings(&a)?;
    // Bounded before anything is loaded: a grid of billions is refused at once.
    req.check_work()?;
    for w in &warnings {
        super::output::warn(w);
    }
    let budget = |s: &crate::scenario::Scenario, p: &crate::cost::CalibrationProfile, g: bool| {
        kv_budget(s, p, g, u)
    };
    let prepared = sweep::prepare(&req, &budget)?;
    for w in &prepared.meta.warnings {
        super::output::warn(w);
    }
    let bar = progress_bar(prepared.meta.scenarios);
    // Called once per chunk of rows, not per row.
    let progress = |n: u64| {
        if let Some(b) = &bar {
            b.inc(n);
        }
    };
    let kind = output_kind(format);
    let intervals = decision_intervals(&a, &req, kind)?;
    match (&a.output, format) {
        (Some(path), Some(_)) => {
            let mut failed = None;
            let written = crate::files::write_atomic(path, |w| {
                let mut out = Writer::new(w, kind, a.pareto, Error::Output);
                out.intervals = intervals;
                prepared
                    .stream(&mut out, &progress)
                    .map(|_| ())
                    .map_err(|e| {
                        let io = std::io::Error::other(e.to_string());
                        failed = Some(e);
                        io
                    })
            });
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
            file_outcome(path, written, failed)
        }
        _ => {
            let stdout = std::io::stdout();
            let w = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            let mut out = Writer::new(w, kind, a.pareto, Error::Output);
            out.intervals = intervals;
            let r = prepared.stream(&mut out, &progress);
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
            match r {
                // A closed pipe (`| head`) ends the sweep quietly.
                Err(Error::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                Err(e) => Err(e),
                Ok(_) => Ok(()),
            }
        }
    }
}

/// How writing the sweep to `path` ended: the sweep's own error (`failed`, a write error named
/// by the file), else the file's, else the file is reported written.
fn file_outcome(path: &Path, written: Result<()>, failed: Option<Error>) -> Result<()> {
    match failed {
        Some(Error::Output(io)) => Err(Error::Write {
            path: path.to_path_buf(),
            source: io,
        }),
        Some(e) => Err(e),
        None => written.map(|()| super::output::wrote("sweep", path)),
    }
}

/// `--gpu-memory-utilization` is a share above 0 and at most 1.
fn check_memory_utilization(u: f64) -> Result<()> {
    if !(u.is_finite() && u > 0.0 && u <= 1.0) {
        return Err(Error::Flag {
            flag: "--gpu-memory-utilization",
            value: u.to_string(),
            expected: "a share above 0 and at most 1 (vLLM's default is 0.9)".into(),
        });
    }
    Ok(())
}

/// The sweep's progress over its `scenarios`, on a terminal only.
fn progress_bar(scenarios: u64) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new(scenarios);
    b.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} scenarios ({rate}, {eta})")
            .expect("static template")
            .with_key("rate", rate_key),
    );
    Some(b)
}

/// `--intervals`: p5/p50/p95 of tokens/s on the rows a decision is made on (the best rows and
/// the Pareto front), priced once the stream has chosen them. Every row of a million-row CSV
/// would cost a Monte Carlo each; the decisions cost a few.
fn decision_intervals(
    a: &SweepArgs,
    req: &sweep::SweepRequest,
    kind: Kind,
) -> Result<Option<crate::report::sweep::DecisionIntervals>> {
    if !a.intervals {
        return Ok(None);
    }
    if kind == Kind::Csv && !a.pareto {
        return Err(Error::Flag {
            flag: "--intervals",
            value: "with --format csv".into(),
            expected: "intervals on the decisions: the summary, --format json (best rows and front), or --format csv --pareto (the front with tokens_per_s_p5/p95 columns)".into(),
        });
    }
    let draws = a.interval_args.draws_for_interval("--intervals")?;
    let seed = a.interval_args.interval_seed;
    let req = req.clone();
    Ok(Some(Box::new(move |rows: &[sweep::Row]| {
        crate::whatif::uncertainty::sweep_intervals(&req, rows, draws, seed)
    })))
}

/// A progress bar's rate as a person reads it: whole items per second with thousands
/// separators (`49,008/s`), one decimal below 10 per second.
pub(crate) fn rate_text(per_sec: f64) -> String {
    let decimals = if per_sec < 10.0 { 1 } else { 0 };
    format!("{}/s", crate::units::grouped(per_sec, decimals))
}

/// The `{rate}` key of the progress bars' templates ([`rate_text`]).
pub(crate) fn rate_key(state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = w.write_str(&rate_text(state.per_sec()));
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_rate_prints_whole_items_with_separators() {
        assert_eq!(super::rate_text(49_007.760_1), "49,008/s");
        assert_eq!(super::rate_text(3.25), "3.2/s");
        assert_eq!(super::rate_text(0.0), "0.0/s");
    }
}
