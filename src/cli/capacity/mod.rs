//! `decodesim capacity`: KV capacity as vLLM accounts memory, the throughput–latency curve up
//! to it, and (with a target) the cheapest deployment over systems and parallelisms.

use super::{print, ScenarioArgs};
use crate::capacity::curve::parse_mix;
use crate::capacity::memory::{
    MemoryOptions, DEFAULT_BLOCK_SIZE, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
};
use crate::capacity::{self, Capacity, CapacityRequest, DemandSpec, Prices};
use crate::error::{Error, Result};
use crate::files::InputKind;
use crate::report::plot::MeasuredPoint;
use crate::report::{self, Format};
use crate::scenario::deployment::DEFAULT_GPU_MEMORY_UTILIZATION;
use crate::whatif::uncertainty::Interval;
use std::path::{Path, PathBuf};

mod charts;
use charts::write_plots;

#[derive(Debug, clap::Args)]
pub struct CapacityArgs {
    /// Scenario flags as `simulate` takes them; `--context` is the KV length of every request
    /// (unless --input-len/--output-len or --request-mix is given) and `--batch` is not used.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Share of each GPU's memory vLLM may use (vLLM's --gpu-memory-utilization). Above 0, at
    /// most 1.
    #[arg(long, default_value_t = DEFAULT_GPU_MEMORY_UTILIZATION, value_name = "SHARE")]
    gpu_memory_utilization: f64,
    /// Tokens of vLLM's profiling pass (its --max-num-batched-tokens); sets the activation peak
    /// and the prefill chunk.
    #[arg(long, default_value_t = DEFAULT_MAX_NUM_BATCHED_TOKENS, value_name = "TOKENS")]
    max_num_batched_tokens: u32,
    /// vLLM's --max-num-seqs: caps the concurrency and sizes the sampler's profiling pass.
    #[arg(long, default_value_t = DEFAULT_MAX_NUM_SEQS, value_name = "N")]
    max_num_seqs: u32,
    /// KV-cache block size in tokens (vLLM's --block-size).
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE, value_name = "TOKENS")]
    block_size: u32,
    /// CUDA-graph memory per GPU in MiB, replacing the estimate (e.g. from vLLM's "Graph
    /// capturing finished ..., took X GiB" line).
    #[arg(long, value_name = "MIB")]
    cuda_graph_mib: Option<f64>,
    /// Prompt tokens per request (with --output-len): adds prefill's share to every step.
    #[arg(long, value_name = "TOKENS", requires = "output_len")]
    input_len: Option<u64>,
    /// Generated tokens per request (with --input-len).
    #[arg(long, value_name = "TOKENS", requires = "input_len")]
    output_len: Option<u64>,
    /// A request mix: CSV with a header input_len,output_len,weight.
    #[arg(long, value_name = "CSV", conflicts_with_all = ["input_len", "output_len"])]
    request_mix: Option<PathBuf>,
    /// About how many concurrencies the curve simulates.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(3..=200))]
    points: u32,
    /// TPOT limit in ms: the highest concurrency that meets it (and the planner's limit).
    #[arg(long, value_name = "MS")]
    max_tpot_ms: Option<f64>,
    /// Tokens per second each user must see (1,000 / TPOT in ms): the TPOT limit this sets,
    /// 1,000 / N ms, holds as --max-tpot-ms does (the stricter of the two when both are given).
    #[arg(long, value_name = "N")]
    min_tokens_per_s_per_user: Option<f64>,
    /// Plan for this many output tokens per second in total.
    #[arg(long, value_name = "N")]
    target_tokens_per_s: Option<f64>,
    /// Plan for this many concurrent users.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub users: Option<u32>,
    /// Systems the planner considers (comma-separated names or files) [default: --system].
    #[arg(long, value_delimiter = ',', value_name = "A,B,...")]
    systems: Vec<String>,
    /// Layouts the planner compares on every system: tp8, tp8-pp2, dp16-ep16, tp8-dp2-ep16,
    /// tp8-dcp8 [default: every TP dividing the system's GPUs, a pipeline stage per node, and
    /// DP attention with experts over every GPU for MoE models]. Without a target, each layout
    /// fills one system with replicas, at its best tokens/s within --max-tpot-ms.
    #[arg(long, value_name = "L,L,...")]
    layouts: Option<String>,
    /// Plot tokens/s per GPU against TPOT for every layout the planner considers, with the
    /// Pareto front (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot_pareto: Option<PathBuf>,
    /// Most systems (nodes) a plan may use.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_systems: u32,
    /// GPU-hour price in USD: one number for every system, or SYSTEM=PRICE,... per system.
    #[arg(long, value_name = "USD|A=USD,B=USD")]
    gpu_hour_usd: Option<String>,
    /// Output format (csv: the curve, one row per concurrency).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    #[command(flatten)]
    pub(crate) intervals: super::intervals::IntervalArgs,
    /// Plot tokens/s against concurrency (.svg or .png); with --systems, one curve per system.
    #[arg(long, value_name = "FILE")]
    plot_throughput: Option<PathBuf>,
    /// Plot TPOT against concurrency (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot_tpot: Option<PathBuf>,
    /// Plot memory per GPU by component (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot_memory: Option<PathBuf>,
    /// Plot the category breakdown of the step across --batches (stacked area, .svg or .png).
    #[arg(long, value_name = "FILE")]
    plot_breakdown: Option<PathBuf>,
    /// Batch sizes of --plot-breakdown.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,8,32,128",
        value_name = "B,B,..."
    )]
    pub batches: Vec<u32>,
    /// Measured points overlaid on the curve plots: CSV concurrency,tokens_per_s[,tpot_ms].
    #[arg(long, value_name = "CSV")]
    pub measured: Option<PathBuf>,
    /// Most work the study may take, in units of about 1 µs of CPU (a full timeline is about
    /// 2,500 plus 80 per rank and 3 per sequence); more is refused before anything is
    /// simulated.
    #[arg(long, default_value_t = crate::error::DEFAULT_MAX_WORK, value_name = "UNITS")]
    max_work: u64,
    /// Disaggregated prefill and decode: separate pools, the KV cache moved between them; the
    /// prefill:decode ratio for the request mix beside the co-located answer.
    #[arg(long)]
    disaggregate: bool,
    /// TTFT limit in ms for --disaggregate (TTFT = prefill + KV transfer + one decode step + the
    /// prefill queue's wait).
    #[arg(long, value_name = "MS", requires = "disaggregate")]
    max_ttft_ms: Option<f64>,
    /// System of the prefill pool [default: --system].
    #[arg(long, value_name = "NAME", requires = "disaggregate")]
    prefill_system: Option<String>,
    /// TP of a prefill instance [default: the decode instance's --tp].
    #[arg(long, value_name = "N", requires = "disaggregate")]
    prefill_tp: Option<u32>,
    /// Ratios xP:yD for x and y from 1 to N (at most 16).
    #[arg(long, value_name = "N", default_value_t = crate::capacity::disagg::DEFAULT_POOL_INSTANCES)]
    max_pool_instances: u32,
}

/// `2.1` or `a=2.1,b=3.5`.
fn parse_prices(s: &str) -> Result<Prices> {
    let bad = |v: &str, why: &str| {
        Error::Flag {
        flag: "--gpu-hour-usd",
        value: crate::units::echo(v),
        expected: format!("{why}: one price in USD per GPU-hour (2.1) or SYSTEM=PRICE,... (rtx-pro-6000-8x-pcie=1.8,h200-8x-nvlink=3.5)"),
    }
    };
    let price = |v: &str| -> Result<f64> {
        let r = crate::scenario::limits::GPU_HOUR_USD;
        match v.trim().parse::<f64>() {
            Ok(p) if r.contains(p) => Ok(p),
            _ => Err(bad(v, &format!("not {}", r.describe()))),
        }
    };
    if !s.contains('=') {
        return Ok(Prices::All(price(s)?));
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        let (name, p) = part
            .split_once('=')
            .ok_or_else(|| bad(part, "a part without '='"))?;
        let name = name.trim().to_string();
        if v.iter().any(|(n, _)| *n == name) {
            return Err(bad(
                &name,
                "a system priced twice (give each system one price)",
            ));
        }
        v.push((name, price(p)?));
    }
    Ok(Prices::PerSystem(v))
}

/// Reads `concurrency,tokens_per_s[,tpot_ms]` rows (a header line is allowed).
fn read_measured(path: &Path) -> Result<Vec<MeasuredPoint>> {
    let text = crate::files::read_text(path, InputKind::MeasurementCsv)?;
    let mut out = Vec::new();
    for (n, f) in crate::files::csv_records(&text, path, true)? {
        if n == 1 && f.first().is_some_and(|x| x.parse::<f64>().is_err()) {
            continue; // header
        }
        let line = f.join(",");
        let num = |i: usize| {
            f.get(i)
                .and_then(|x| x.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        let (Some(c), Some(t)) = (num(0), num(1)) else {
            return Err(Error::field(
                path,
                format!("line {n}"),
                format!(
                    "found '{}', expected concurrency,tokens_per_s[,tpot_ms] as non-negative numbers",
                    crate::units::echo(&line)
                ),
            ));
        };
        if f.len() > 3 || (f.len() == 3 && num(2).is_none()) {
            return Err(Error::field(
                path,
                format!("line {n}"),
                format!(
                    "found '{}', expected concurrency,tokens_per_s[,tpot_ms]",
                    crate::units::echo(&line)
                ),
            ));
        }
        out.push(MeasuredPoint {
            concurrency: c,
            tokens_per_s: t,
            tpot_ms: num(2),
        });
    }
    if out.is_empty() {
        return Err(Error::field(path, "rows", "no measured points"));
    }
    Ok(out)
}

/// Whether the planner runs: a target, layouts to compare, a Pareto plot or disaggregation.
fn plans(a: &CapacityArgs) -> bool {
    a.target_tokens_per_s.is_some()
        || a.users.is_some()
        || a.layouts.is_some()
        || a.plot_pareto.is_some()
        || a.disaggregate
}

/// The planner's own flags where no plan is made (and no plot draws other systems): said to
/// be ignored, rather than silently dropped.
fn warn_unplanned(a: &CapacityArgs) {
    if plans(a) {
        return;
    }
    let plots_systems =
        a.plot_throughput.is_some() || a.plot_tpot.is_some() || a.plot_memory.is_some();
    if !a.systems.is_empty() && !plots_systems {
        super::output::warn(
            "--systems names the systems the planner compares (or the curves of --plot-throughput, --plot-tpot and --plot-memory), and no plan is made without --target-tokens-per-s, --users, --layouts, --plot-pareto or --disaggregate; ignored",
        );
    }
    if a.max_systems != 1 {
        super::output::warn(
            "--max-systems bounds the planner's deployments, and no plan is made without --target-tokens-per-s, --users, --layouts, --plot-pareto or --disaggregate; ignored",
        );
    }
}

/// `--gpu-hour-usd` against what is planned: with no target there is no plan to price (a
/// warning); a price for a system the planner does not consider (misspelt, or missing from
/// --systems) is an error naming the planned ones.
fn check_prices(a: &CapacityArgs, prices: &Prices) -> Result<()> {
    if matches!(prices, Prices::None) {
        return Ok(());
    }
    if !plans(a) {
        super::output::warn(
            "--gpu-hour-usd prices the planner's deployments, and no plan is made without --target-tokens-per-s, --users, --layouts, --plot-pareto or --disaggregate; ignored",
        );
        return Ok(());
    }
    let mut planned = if a.systems.is_empty() {
        vec![a.scenario.request().system]
    } else {
        a.systems.clone()
    };
    // --disaggregate prices its prefill pool on --prefill-system.
    if let Some(p) = a.prefill_system.as_ref().filter(|_| a.disaggregate) {
        if !planned.contains(p) {
            planned.push(p.clone());
        }
    }
    if let Prices::PerSystem(v) = prices {
        for (name, _) in v {
            if !planned.contains(name) {
                return Err(Error::Flag {
                    flag: "--gpu-hour-usd",
                    value: crate::units::echo(name),
                    expected: format!(
                        "a price for a system that is not planned; the planned systems (--systems, else --system) are {}",
                        planned.join(", ")
                    ),
                });
            }
        }
    }
    Ok(())
}

fn request(a: &CapacityArgs) -> Result<CapacityRequest> {
    let demand = match (&a.request_mix, a.input_len, a.output_len) {
        (Some(p), _, _) => {
            let text = crate::files::read_text(p, InputKind::MeasurementCsv)?;
            DemandSpec::Mix(parse_mix(&text, p)?)
        }
        (None, Some(i), Some(o)) => {
            for (flag, v) in [("--input-len", i), ("--output-len", o)] {
                if v == 0 || v > crate::scenario::deployment::MAX_CONTEXT {
                    return Err(Error::Flag {
                        flag: if flag == "--input-len" {
                            "--input-len"
                        } else {
                            "--output-len"
                        },
                        value: v.to_string(),
                        expected: format!(
                            "1 to {} tokens",
                            crate::scenario::deployment::MAX_CONTEXT
                        ),
                    });
                }
            }
            DemandSpec::Lengths {
                input_len: i,
                output_len: o,
            }
        }
        _ => DemandSpec::Context(a.scenario.request().context),
    };
    Ok(CapacityRequest {
        scenario: a.scenario.request(),
        memory: MemoryOptions {
            gpu_memory_utilization: a.gpu_memory_utilization,
            max_num_batched_tokens: a.max_num_batched_tokens,
            max_num_seqs: a.max_num_seqs,
            block_size: a.block_size,
            // --dcp is a scenario flag: it shards the KV cache here and the attention in the step.
            dcp: a.scenario.request().dcp.unwrap_or(1),
            cuda_graph_bytes: a.cuda_graph_mib.map(|m| m * 1_048_576.0),
        },
        demand,
        points: a.points as usize,
        max_tpot_ms: a.max_tpot_ms,
        target_tokens_per_s: a.target_tokens_per_s,
        users: a.users,
        systems: a.systems.clone(),
        layouts: match &a.layouts {
            Some(l) => crate::capacity::layout::parse_list(l)?,
            None => Vec::new(),
        },
        compare_layouts: a.layouts.is_some() || a.plot_pareto.is_some(),
        max_systems: a.max_systems,
        prices: {
            let prices = match &a.gpu_hour_usd {
                Some(s) => parse_prices(s)?,
                None => Prices::None,
            };
            check_prices(a, &prices)?;
            prices
        },
        disaggregated: a.disaggregate,
    })
}

/// `--batches` (of `--plot-breakdown`): each a batch size the simulator takes.
fn check_batches(batches: &[u32]) -> Result<()> {
    for b in batches {
        if *b == 0 || *b > crate::scenario::deployment::MAX_BATCH {
            return Err(Error::Flag {
                flag: "--batches",
                value: b.to_string(),
                expected: format!(
                    "batch sizes from 1 to {}",
                    crate::scenario::deployment::MAX_BATCH
                ),
            });
        }
    }
    Ok(())
}

/// The work bounded before anything is simulated: the main curve, every planner candidate
/// (each system at up to 4 TP sizes, twice with --dcp) and each plotted system's curve.
fn check_work(a: &CapacityArgs, req: &CapacityRequest) -> Result<()> {
    let planning = req.target_tokens_per_s.is_some() || req.users.is_some() || req.compare_layouts;
    let plots = a.plot_throughput.is_some() || a.plot_tpot.is_some() || a.plot_memory.is_some();
    let systems = a.systems.len().max(1) as f64;
    let dcps = if req.memory.dcp > 1 { 2.0 } else { 1.0 };
    // Named layouts, else about 4 TP sizes that fit plus the pipeline and wide-EP shapes.
    let layouts = if req.layouts.is_empty() {
        6.0 * dcps
    } else {
        req.layouts.len() as f64
    };
    let curves = 1.0
        + if a.disaggregate { 1.0 } else { 0.0 }
        + if planning { systems * layouts } else { 0.0 }
        + if plots { systems } else { 0.0 };
    let breakdown: &[u32] = if a.plot_breakdown.is_some() {
        &a.batches
    } else {
        &[]
    };
    crate::capacity::curve::check_work(req, curves, breakdown, a.intervals.draws()?, a.max_work)
}
/// The throughput interval (`--draws`) at the chosen point: the most users within the TPOT
/// limit, else the knee, else the last; with the concurrency and why it was chosen.
#[allow(clippy::type_complexity)]
fn interval_at_chosen(
    a: &CapacityArgs,
    cap: &Capacity,
    draws: usize,
) -> Result<Option<(u32, &'static str, std::result::Result<Interval, String>)>> {
    let chosen = cap
        .curve
        .max_concurrency_at_tpot
        .map(|c| {
            let why = if per_user_binds(a).is_some() {
                "most users within --min-tokens-per-s-per-user"
            } else {
                "most users within --max-tpot-ms"
            };
            (c, why)
        })
        .or(cap.curve.knee.map(|c| (c, "knee")))
        .or(cap
            .curve
            .points
            .last()
            .map(|p| (p.concurrency, "largest concurrency")))
        .and_then(|(c, why)| {
            cap.curve
                .points
                .iter()
                .find(|p| p.concurrency == c)
                .map(|p| (*p, why))
        });
    Ok(match (&chosen, draws) {
        (Some((pt, why)), n) if n > 0 => Some((
            pt.concurrency,
            *why,
            crate::whatif::uncertainty::throughput_interval(
                &cap.reference.scenario,
                &cap.reference.profile,
                pt.concurrency,
                cap.demand.decode_context,
                pt.step_time_us,
                pt.prefill_us,
                n,
                a.intervals.interval_seed,
            )?,
        )),
        _ => None,
    })
}

/// Curves and memory of every --systems entry (each at all its GPUs), beside the main one,
/// when a plot shows them.
fn other_systems(a: &CapacityArgs, req: &CapacityRequest) -> Result<Vec<Capacity>> {
    let wants_multi =
        a.plot_throughput.is_some() || a.plot_tpot.is_some() || a.plot_memory.is_some();
    let mut others: Vec<Capacity> = Vec::new();
    if wants_multi {
        for name in a.systems.iter().filter(|s| **s != req.scenario.system) {
            let mut r = req.clone();
            r.scenario.system = name.clone();
            r.scenario.tp = None;
            r.scenario.calibration = None;
            r.target_tokens_per_s = None;
            r.users = None;
            r.systems = Vec::new();
            others.push(capacity::capacity(&r)?);
        }
    }
    Ok(others)
}

/// The report in the chosen format, with the throughput interval when one was asked for.
#[allow(clippy::type_complexity)]
fn report_text(
    a: &CapacityArgs,
    cap: &Capacity,
    interval: &Option<(u32, &'static str, std::result::Result<Interval, String>)>,
    draws: usize,
    disagg: Option<&crate::capacity::disagg::Disaggregation>,
) -> Result<String> {
    Ok(match a.format {
        Format::Table => {
            let mut t = report::capacity::render_table(cap);
            if let Some((_, _, Err(no))) = interval {
                t += &format!("throughput interval: {no}\n");
            }
            if let Some((c, why, Ok(iv))) = interval {
                t += &format!(
                    "throughput at concurrency {c} ({why}), p5 / p50 / p95 over {draws} draws: {:.1} / {:.1} / {:.1} tokens/s\n",
                    iv.p5, iv.p50, iv.p95
                );
            }
            if let Some(d) = disagg {
                t += &report::capacity::render_disagg_table(d);
            }
            t
        }
        Format::Json => {
            let mut v = report::capacity::to_json(cap);
            if let Some((_, _, Err(no))) = interval {
                v["throughput_interval"] = serde_json::json!({ "unavailable": no });
            }
            if let Some((c, why, Ok(iv))) = interval {
                v["throughput_interval"] = serde_json::json!({
                    "concurrency": c, "chosen_as": why, "draws": draws,
                    "tokens_per_s": iv.json(),
                });
            }
            if let Some(d) = disagg {
                v["disaggregation"] = report::capacity::disagg_json(d);
            }
            serde_json::to_string_pretty(&v).map_err(|e| Error::Serialize {
                what: "report",
                message: e.to_string(),
            })? + "\n"
        }
        Format::Csv => match disagg {
            Some(d) => report::capacity::disagg_csv(d),
            None => report::capacity::to_csv(cap),
        },
    })
}

/// Turns `--min-tokens-per-s-per-user N` into the TPOT limit it means (1,000 / N ms), kept
/// with `--max-tpot-ms` as the stricter of the two; both checked against their ranges first.
fn per_user_target(a: &mut CapacityArgs) -> Result<()> {
    use crate::scenario::limits;
    if let Some(n) = a.min_tokens_per_s_per_user {
        limits::flag_in(
            "--min-tokens-per-s-per-user",
            n,
            &limits::TOKENS_PER_S_PER_USER,
        )?;
        if let Some(t) = a.max_tpot_ms {
            limits::flag_in("--max-tpot-ms", t, &limits::MAX_TPOT_MS)?;
        }
        let ms = 1000.0 / n;
        a.max_tpot_ms = Some(a.max_tpot_ms.map_or(ms, |m| m.min(ms)));
    }
    Ok(())
}

/// Whether `--min-tokens-per-s-per-user` is what sets the TPOT limit (its 1,000 / N ms is
/// the stricter, or `--max-tpot-ms` is not given).
fn per_user_binds(a: &CapacityArgs) -> Option<f64> {
    let n = a.min_tokens_per_s_per_user?;
    (a.max_tpot_ms == Some(1000.0 / n)).then_some(n)
}

pub fn run(mut a: CapacityArgs) -> Result<()> {
    per_user_target(&mut a)?;
    check_files(&a)?;
    a.scenario.warn_noop_flags();
    let req = request(&a)?;
    let disagg_opts = disagg_options(&a);
    if let Some(o) = &disagg_opts {
        capacity::disagg::precheck(&req, o)?;
    }
    check_batches(&a.batches)?;
    warn_unplanned(&a);
    check_work(&a, &req)?;
    let measured = match &a.measured {
        Some(p) => read_measured(p)?,
        None => Vec::new(),
    };
    let draws = a.intervals.draws()?;
    let mut cap = capacity::capacity(&req)?;
    cap.min_tokens_per_s_per_user = per_user_binds(&a);
    let interval = interval_at_chosen(&a, &cap, draws)?;
    let others = other_systems(&a, &req)?;
    let all: Vec<&Capacity> = std::iter::once(&cap).chain(others.iter()).collect();
    let written = write_plots(&a, &req, &cap, &all, &measured)?;

    let disagg = match &disagg_opts {
        Some(o) => Some(capacity::disagg::disaggregate(&req, o, &cap)?),
        None => None,
    };
    let text = report_text(&a, &cap, &interval, draws, disagg.as_ref())?;
    print(&text)?;
    for p in &written {
        super::output::wrote("plot", p);
    }
    // A target no configuration meets is an error (exit 1) after the report that says why.
    if let Some(e) = cap.plan.as_ref().and_then(capacity::plan::unmet) {
        return Err(e);
    }
    if let Some(e) = disagg.as_ref().and_then(capacity::disagg::unmet) {
        return Err(e);
    }
    Ok(())
}

/// The inputs and the plots' files, checked before any work.
fn check_files(a: &CapacityArgs) -> Result<()> {
    use super::output::check_output_flag;
    check_output_flag("--plot-throughput", a.plot_throughput.as_deref())?;
    check_output_flag("--plot-tpot", a.plot_tpot.as_deref())?;
    check_output_flag("--plot-memory", a.plot_memory.as_deref())?;
    check_output_flag("--plot-breakdown", a.plot_breakdown.as_deref())?;
    check_output_flag("--plot-pareto", a.plot_pareto.as_deref())?;
    super::paths::Paths::new()
        .scenario(&a.scenario.request())
        .input_opt("--request-mix", a.request_mix.as_deref())
        .input_opt("--measured", a.measured.as_deref())
        .output("--plot-throughput", a.plot_throughput.as_deref())
        .output("--plot-tpot", a.plot_tpot.as_deref())
        .output("--plot-memory", a.plot_memory.as_deref())
        .output("--plot-breakdown", a.plot_breakdown.as_deref())
        .output("--plot-pareto", a.plot_pareto.as_deref())
        .check()
}

/// `--disaggregate`'s options (None without it); `--max-pool-instances` only matters with it.
fn disagg_options(a: &CapacityArgs) -> Option<crate::capacity::disagg::DisaggOptions> {
    if !a.disaggregate {
        if a.max_pool_instances != crate::capacity::disagg::DEFAULT_POOL_INSTANCES {
            super::output::warn("--max-pool-instances is used only with --disaggregate; ignored");
        }
        return None;
    }
    Some(crate::capacity::disagg::DisaggOptions {
        max_ttft_ms: a.max_ttft_ms,
        prefill_system: a.prefill_system.clone(),
        prefill_tp: a.prefill_tp,
        max_instances: a.max_pool_instances,
    })
}
