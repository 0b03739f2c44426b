//! `decodesim whatif`: what a change would buy. `whatif --vary` simulates variants of the
//! scenario flags; `whatif spec-decode` studies speculative decoding for a scenario.

use super::{print, ScenarioArgs};
use crate::error::{Error, Result};
use crate::report::{self, Format};
use crate::whatif::acceptance::Acceptance;
use crate::whatif::draft::Method;
use crate::whatif::spec_decode::{self, SpecDecodeRequest};
use crate::whatif::{parse_f64_list, parse_u32_list};
use crate::workload::spec_method::DraftSource;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WhatifArgs {
    #[command(subcommand)]
    command: Option<WhatifCommand>,
    #[command(flatten)]
    pub vary: VaryArgs,
}

/// `whatif --vary KEY=V1,V2,...`: variants of the scenario flags, each on the full timeline.
#[derive(Debug, clap::Args)]
pub struct VaryArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    // Help: `vary_help`, which lists the knob table's keys.
    #[arg(long, value_name = "KEY=V1,V2,...", help = vary_help())]
    pub vary: Vec<String>,
    /// Vary each key alone (the others at the base) instead of every combination.
    #[arg(long)]
    one_at_a_time: bool,
    /// Op families listed per variant.
    #[arg(long, default_value_t = 3)]
    top: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Most work the what-if may take, in units of about 1 µs of CPU (a full timeline is
    /// about 2,500); more is refused before anything is simulated.
    #[arg(long, default_value_t = crate::error::DEFAULT_MAX_WORK, value_name = "UNITS")]
    max_work: u64,
    #[command(flatten)]
    pub(crate) intervals: super::intervals::IntervalArgs,
}

/// `--vary`'s help, listing the keys of the knob table.
/// The help of the flag that names a draft of `source`, listing the methods that take it (the
/// table of methods: a new method drafting from a head config or a model is named here).
fn draft_help(source: DraftSource) -> String {
    let methods = Method::names_where(|m| m.source == source);
    match source {
        DraftSource::HeadConfig => format!(
            "{} draft config.json, for --method {methods} [default: the method's draft shape in models/drafts/]",
            Method::choices(|m| m.source == source, |m| m.label.into())
        ),
        _ => format!("Draft model for --method {methods}: a bundled name or a config.json"),
    }
}

fn vary_help() -> String {
    format!(
        "KEY=V1,V2,... (repeatable): KEY is a scenario flag without its dashes ({}). Several keys \
         combine as their Cartesian product.",
        crate::whatif::vary::keys()
    )
}

#[derive(Debug, clap::Subcommand)]
enum WhatifCommand {
    /// Speculative decoding: draft and verify passes simulated per k, against no speculation.
    SpecDecode(SpecDecodeArgs),
}

#[derive(Debug, clap::Args)]
struct SpecDecodeArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    // Help: the table of methods (`Method::help`).
    #[arg(long, default_value = Method::DEFAULT.name(), help = Method::help())]
    method: String,
    #[arg(long, value_name = "FILE", help = draft_help(DraftSource::HeadConfig))]
    draft_config: Option<String>,
    #[arg(long, value_name = "NAME|PATH", help = draft_help(DraftSource::Model))]
    draft_model: Option<String>,
    /// vLLM's draft acceptance rate (accepted / drafted tokens): mean length 1 + k x R. A list
    /// (0.3,0.4,0.5) studies each rate (one table, JSON object or plot panel per rate).
    #[arg(long, value_name = "R[,R...]", conflicts_with_all = ["acceptance_per_position", "acceptance_lengths"])]
    acceptance_rate: Option<String>,
    /// vLLM's per-position acceptance rates a1,a2,... (non-increasing).
    #[arg(long, value_name = "A1,A2,...", conflicts_with = "acceptance_lengths")]
    acceptance_per_position: Option<String>,
    /// A measured histogram: CSV with header acceptance_length,count.
    #[arg(long, value_name = "FILE.csv")]
    acceptance_lengths: Option<PathBuf>,
    /// Draft tokens per step: a list (1,2,4) or a range (1..6, both ends included).
    #[arg(long, default_value = "1..6")]
    draft_tokens: String,
    /// Batches simulated to find where speculation stops paying ("none" to skip).
    #[arg(long, default_value = "1,2,4,8,16,32,64,128,256")]
    crossover_batches: String,
    /// Monte Carlo users for the TPOT percentiles.
    #[arg(long, default_value_t = 2000)]
    mc_users: u32,
    /// Output tokens each Monte Carlo user decodes.
    #[arg(long, default_value_t = 256)]
    output_tokens: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write one k's whole speculative step (verify + draft passes) as a Chrome trace.
    #[arg(long, value_name = "FILE.json")]
    pub timeline: Option<PathBuf>,
    /// The k the --timeline shows [default: the best k].
    #[arg(long)]
    timeline_k: Option<u32>,
    /// Chart the speedup against the --crossover-batches grid, one line per k and one panel
    /// per acceptance rate (.png or .svg).
    #[arg(long, value_name = "FILE.png|svg")]
    plot: Option<PathBuf>,
    /// The same speedups as a k x batch heatmap (.png or .svg).
    #[arg(long, value_name = "FILE.png|svg")]
    plot_heatmap: Option<PathBuf>,
    /// Most work the study may take, in units of about 1 µs of CPU (a full timeline is about
    /// 2,500 plus 80 per rank and 3 per token, a Monte Carlo output token 0.01); more is
    /// refused before anything is simulated.
    #[arg(long, default_value_t = crate::error::DEFAULT_MAX_WORK, value_name = "UNITS")]
    max_work: u64,
    #[command(flatten)]
    pub(crate) intervals: super::intervals::IntervalArgs,
}

pub fn run(a: WhatifArgs) -> Result<()> {
    match a.command {
        Some(WhatifCommand::SpecDecode(a)) => run_spec_decode(a),
        None => run_vary(a.vary),
    }
}

fn run_vary(a: VaryArgs) -> Result<()> {
    use crate::whatif::vary;
    a.scenario.warn_noop_flags();
    let req = vary::VaryRequest {
        base: a.scenario.request(),
        axes: vary::parse_axes(&a.vary)?,
        one_at_a_time: a.one_at_a_time,
    };
    // LL128 in the base or among the varied protocols, on a base system without NVLink (when
    // the system or P2P is varied too, some variants may have NVLink: nothing to say).
    let path_varies = req.axes.iter().any(|(k, _)| k == "system" || k == "p2p");
    let ll128 = req.base.proto == crate::scenario::Proto::Ll128
        || req
            .axes
            .iter()
            .any(|(k, v)| k == "nccl-proto" && v.iter().any(|x| x.eq_ignore_ascii_case("ll128")));
    if ll128 && !path_varies {
        if let Some(w) = super::scenario_args::ll128_warning("--nccl-proto", &req.base) {
            super::output::warn(&w);
        }
    }
    let draws = a.intervals.draws()?;
    let bar = std::cell::OnceCell::new();
    let study = vary::run_bounded_with(&req, a.max_work, draws, &mut |done, total| {
        if let Some(b) = bar.get_or_init(|| super::output::progress_bar(total, "timelines")) {
            b.set_position(done);
        }
    });
    if let Some(Some(b)) = bar.get() {
        b.finish_and_clear();
    }
    let study = study?;
    let ((base_iv, arms), draws) = super::intervals::or_points(draws, |n| {
        crate::whatif::uncertainty::vary_intervals(&req, &study, n, a.intervals.interval_seed)
    })?;
    let text = match a.format {
        Format::Table if draws > 0 => {
            let labels: Vec<String> = study.variants.iter().map(|v| v.label()).collect();
            vary::table(&study, a.top)
                + &report::intervals::arms_table("intervals", &labels, &arms, draws)
        }
        Format::Table => vary::table(&study, a.top),
        Format::Json => {
            let mut v = vary::json(&study);
            if draws > 0 {
                v["base"]["intervals"] = base_iv.json();
                v["draws"] = draws.into();
                if let Some(vs) = v["variants"].as_array_mut() {
                    for (x, arm) in vs.iter_mut().zip(&arms) {
                        x["intervals"] = arm.json();
                        x["verdict"] = arm.verdict().name().into();
                    }
                }
            }
            serde_json::to_string_pretty(&v).expect("JSON value") + "\n"
        }
        Format::Csv => vary::csv(&study, a.top),
    };
    print(&text)
}

/// The draft `--draft-config` or `--draft-model` names for `method`: the flag its draft source
/// takes, the other refused (and both for a method that drafts with the target's own layers).
fn method_draft(method: Method, a: &SpecDecodeArgs) -> Result<Option<String>> {
    let spec = method.spec();
    let given = [
        ("--draft-config", &a.draft_config),
        ("--draft-model", &a.draft_model),
    ];
    let Some(flag) = spec.source.flag() else {
        if given.iter().any(|(_, v)| v.is_some()) {
            return Err(Error::ScenarioSetting {
                flag: "--method",
                value: method.name().into(),
                problem: format!(
                    " uses {}: drop {}",
                    spec.drafter,
                    given.map(|(f, _)| f).join(" / ")
                ),
            });
        }
        return Ok(None);
    };
    let mut draft = None;
    for (other, value) in given {
        if other == flag {
            draft = value.clone();
        } else if value.is_some() {
            return Err(Error::FlagUse {
                flag: other,
                problem: format!(
                    "is for --method {}; {} is given with {flag}",
                    Method::names_where(|m| m.source.flag() == Some(other)),
                    spec.drafter
                ),
            });
        }
    }
    Ok(draft)
}

/// Every acceptance to study, from whichever of the three acceptance flags is given.
fn acceptances(a: &SpecDecodeArgs) -> Result<Vec<Acceptance>> {
    Ok(match (&a.acceptance_rate, &a.acceptance_per_position, &a.acceptance_lengths) {
        (Some(r), _, _) => {
            let rates = parse_f64_list("--acceptance-rate", r)?;
            if rates.is_empty() {
                return Err(Error::FlagList {
                    flag: "--acceptance-rate".into(),
                    text: r.to_string(),
                    problem: "no values".into(),
                    expected: "a rate in [0, 1] or a list such as 0.3,0.4,0.5".into(),
                });
            }
            rates
                .into_iter()
                .map(Acceptance::rate)
                .collect::<Result<Vec<_>>>()?
        }
        (None, Some(list), _) => vec![Acceptance::per_position(parse_f64_list("--acceptance-per-position", list)?)?],
        (None, None, Some(path)) => vec![Acceptance::lengths_file(path)?],
        (None, None, None) => {
            return Err(Error::Missing {
                what: "acceptance",
                choices: "--acceptance-rate R, --acceptance-per-position a1,a2,... or --acceptance-lengths FILE.csv",
            })
        }
    })
}

/// The request, and every acceptance to study (more than one only for a list of rates; the
/// request carries the first).
fn spec_decode_request(a: &SpecDecodeArgs) -> Result<(SpecDecodeRequest, Vec<Acceptance>)> {
    let method: Method = a.method.parse()?;
    let draft = method_draft(method, a)?;
    let acceptances = acceptances(a)?;
    let crossover_batches = if a.crossover_batches.trim().eq_ignore_ascii_case("none") {
        Vec::new()
    } else {
        parse_u32_list(
            "--crossover-batches",
            &a.crossover_batches,
            1..=crate::scenario::deployment::MAX_BATCH,
        )?
    };
    if a.mc_users == 0 || a.mc_users > 1_000_000 {
        return Err(Error::ScenarioRange {
            flag: "--mc-users",
            value: a.mc_users.to_string(),
            expected: "expected 1 to 1000000".into(),
        });
    }
    if a.output_tokens == 0 || a.output_tokens > 1_000_000 {
        return Err(Error::ScenarioRange {
            flag: "--output-tokens",
            value: a.output_tokens.to_string(),
            expected: "expected 1 to 1000000".into(),
        });
    }
    if (a.plot.is_some() || a.plot_heatmap.is_some()) && crossover_batches.is_empty() {
        return Err(Error::FlagUse {
            flag: "--plot and --plot-heatmap",
            problem:
                "draw the --crossover-batches grid: give batches (e.g. 1,2,4,...,256), not 'none'"
                    .into(),
        });
    }
    for p in a.plot.iter().chain(&a.plot_heatmap) {
        let ext = p
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if !matches!(ext.as_deref(), Some("png" | "svg")) {
            return Err(crate::report::plot::PlotError::Format { path: p.clone() }.into());
        }
    }
    let req = SpecDecodeRequest {
        base: a.scenario.request(),
        method,
        draft,
        acceptance: acceptances[0].clone(),
        draft_tokens: parse_u32_list("--draft-tokens", &a.draft_tokens, 1..=64)?,
        crossover_batches,
        mc_users: a.mc_users,
        output_tokens: a.output_tokens,
    };
    spec_decode::check_work(&req, acceptances.len(), a.intervals.draws()?, a.max_work)?;
    Ok((req, acceptances))
}

fn run_spec_decode(a: SpecDecodeArgs) -> Result<()> {
    check_spec_decode_files(&a)?;
    a.scenario.warn_noop_flags();
    if let (Some(k), None) = (a.timeline_k, &a.timeline) {
        super::output::warn(&format!(
            "--timeline-k {k} does nothing without --timeline FILE.json; ignored"
        ));
    }
    let draws = a.intervals.draws()?;
    let (req, acceptances) = spec_decode_request(&a)?;
    // The steps do not depend on the acceptance: simulate once, study each rate.
    let costs = simulate_costs_with_bar(&req)?;
    let studies = acceptances
        .iter()
        .map(|acc| spec_decode::study(&req, &costs, acc))
        .collect::<Result<Vec<_>>>()?;
    let plots = write_spec_decode_files(&a, &req, &studies)?;
    let (arms, draws) = super::intervals::or_points(draws, |n| {
        studies
            .iter()
            .map(|st| {
                crate::whatif::uncertainty::spec_decode_intervals(
                    &req,
                    st,
                    n,
                    a.intervals.interval_seed,
                )
            })
            .collect::<Result<Vec<_>>>()
    })?;
    let text = match a.format {
        Format::Table => spec_decode_tables(&studies, &arms, draws),
        Format::Json => spec_decode_json(&studies, &arms, draws),
        Format::Csv => report::whatif::spec_decode_csv_many(&studies),
    };
    print(&text)?;
    if let Some(path) = &a.timeline {
        super::output::wrote("timeline", path);
    }
    for path in plots {
        super::output::wrote("plot", path);
    }
    Ok(())
}

/// The study's input and output files, checked before any work.
fn check_spec_decode_files(a: &SpecDecodeArgs) -> Result<()> {
    use super::output::check_output_flag;
    check_output_flag("--timeline", a.timeline.as_deref())?;
    check_output_flag("--plot", a.plot.as_deref())?;
    check_output_flag("--plot-heatmap", a.plot_heatmap.as_deref())?;
    super::paths::Paths::new()
        .scenario(&a.scenario.request())
        .input_if_file("--draft-config", a.draft_config.as_deref())
        .input_if_file("--draft-model", a.draft_model.as_deref())
        .input_opt("--acceptance-lengths", a.acceptance_lengths.as_deref())
        .output("--timeline", a.timeline.as_deref())
        .output("--plot", a.plot.as_deref())
        .output("--plot-heatmap", a.plot_heatmap.as_deref())
        .check()
}

/// The study's steps simulated under a progress bar over its batches.
fn simulate_costs_with_bar(req: &SpecDecodeRequest) -> Result<spec_decode::SpecDecodeCosts> {
    let bar = std::cell::OnceCell::new();
    let costs = spec_decode::simulate_costs_with(req, &mut |done, total| {
        if let Some(b) = bar.get_or_init(|| super::output::progress_bar(total, "batches")) {
            b.set_position(done);
        }
    });
    if let Some(Some(b)) = bar.get() {
        b.finish_and_clear();
    }
    costs
}

/// Writes `--timeline` and the plots; returns the plots written.
fn write_spec_decode_files<'a>(
    a: &'a SpecDecodeArgs,
    req: &SpecDecodeRequest,
    studies: &[spec_decode::SpecDecodeStudy],
) -> Result<Vec<&'a PathBuf>> {
    if let Some(path) = &a.timeline {
        let k = a
            .timeline_k
            .or_else(|| studies[0].best().map(|b| b.draft_tokens))
            .unwrap_or(1);
        let sim = spec_decode::step_simulation(req, k)?;
        crate::files::write_atomic(path, |w| report::chrome::write_chrome_trace(&sim, w))?;
    }
    let mut written = Vec::new();
    if let Some(path) = &a.plot {
        report::whatif::plot_speedup(studies, path, false)?;
        written.push(path);
    }
    if let Some(path) = &a.plot_heatmap {
        report::whatif::plot_speedup(studies, path, true)?;
        written.push(path);
    }
    Ok(written)
}

/// One table per study, each with its speedup intervals when drawn.
fn spec_decode_tables(
    studies: &[spec_decode::SpecDecodeStudy],
    arms: &[Vec<crate::whatif::uncertainty::ArmIntervals>],
    draws: usize,
) -> String {
    studies
        .iter()
        .zip(arms)
        .map(|(st, arms)| {
            let mut t = report::whatif::spec_decode_table(st);
            if draws > 0 {
                let labels: Vec<String> = st
                    .variants
                    .iter()
                    .map(|v| format!("k={}", v.draft_tokens))
                    .collect();
                t += &report::intervals::arms_table(
                    &format!(
                        "speedup intervals at batch {}{}",
                        st.baseline.scenario.batch,
                        if st.fits {
                            ""
                        } else {
                            " (DOES NOT FIT in memory)"
                        }
                    ),
                    &labels,
                    arms,
                    draws,
                );
            }
            t
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The studies as JSON (one object, or an array of one per acceptance), each variant with its
/// interval and verdict when drawn.
fn spec_decode_json(
    studies: &[spec_decode::SpecDecodeStudy],
    arms: &[Vec<crate::whatif::uncertainty::ArmIntervals>],
    draws: usize,
) -> String {
    let with = |st: &spec_decode::SpecDecodeStudy,
                arms: &[crate::whatif::uncertainty::ArmIntervals]| {
        let mut v = report::whatif::spec_decode_json(st);
        if draws > 0 {
            v["draws"] = draws.into();
            if let Some(vs) = v["variants"].as_array_mut() {
                for (x, arm) in vs.iter_mut().zip(arms) {
                    x["intervals"] = arm.json();
                    x["verdict"] = arm.verdict().name().into();
                }
            }
        }
        v
    };
    let v = if studies.len() == 1 {
        with(&studies[0], &arms[0])
    } else {
        serde_json::Value::Array(
            studies
                .iter()
                .zip(arms)
                .map(|(st, a)| with(st, a))
                .collect(),
        )
    };
    serde_json::to_string_pretty(&v).expect("JSON value") + "\n"
}
