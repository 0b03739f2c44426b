//! `decodesim validate`: simulate every captured configuration and hold it against its trace,
//! then the single-anchor mode: calibrate from one trace, predict the rest.

use crate::accounting::compare::{compare, Comparison};
use crate::accounting::infer::{check_or_allow, infer_scenario, Inferred};
use crate::accounting::Breakdown;
use crate::accounting::{summarize, SummaryOptions};
use crate::calibrate::anchor::fit_to_step;
use crate::category::Category;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::{Algo, Proto, Runtime};
use crate::sim::{simulate_loaded, ScenarioRequest};
use crate::trace::classify::Classifier;
use crate::whatif::uncertainty::{
    timeline_step_ratios, Interval, ModelError, Uncertainty, MODEL_FAMILIES,
};
use regex::Regex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod serving;
pub mod step_times;

use step_times::StepTimes;

/// One captured configuration: the files of all its ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) batch: u32,
    pub(crate) context: u64,
    /// `default`, `ll_ring` or `p2p_off` (the harness's NCCL settings).
    pub(crate) setting: String,
    pub files: Vec<PathBuf>,
}

/// Groups `refstep_b{B}_c{CTX}_{SETTING}_rank{R}.*.json.gz` files by configuration.
fn discover(dir: &Path) -> Result<Vec<Case>> {
    let re = Regex::new(r"^(refstep_b(\d+)_c(\d+)_([A-Za-z0-9]+(?:_[A-Za-z0-9]+)*?))_rank(\d+)\.")
        .expect("valid regex");
    let rd = std::fs::read_dir(dir).map_err(|source| Error::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut by: BTreeMap<String, Case> = BTreeMap::new();
    for e in rd.flatten() {
        let path = e.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !crate::trace::format::is_trace_name(name) {
            continue;
        }
        let Some(c) = re.captures(name) else { continue };
        let key = c[1].to_string();
        let case = by.entry(key.clone()).or_insert_with(|| Case {
            name: key,
            batch: c[2].parse().unwrap_or(0),
            context: c[3].parse().unwrap_or(0),
            setting: c[4].to_string(),
            files: Vec::new(),
        });
        case.files.push(path);
    }
    let mut cases: Vec<Case> = by.into_values().collect();
    for c in &mut cases {
        c.files.sort();
    }
    cases.sort_by(|a, b| {
        (a.setting.as_str(), a.context, a.batch).cmp(&(b.setting.as_str(), b.context, b.batch))
    });
    if cases.is_empty() {
        return Err(Error::NothingFound {
            path: dir.to_path_buf(),
            what: "no reference-step traces",
            expected: "files named refstep_b<B>_c<CTX>_<setting>_rank<R>.<ns>.pt.trace.json.gz"
                .into(),
        });
    }
    Ok(cases)
}

/// The scenario the reference step of a case corresponds to (data/README.md).
fn request_for(
    case: &Case,
    ranks: u32,
    layers: usize,
    system: &str,
    calibration: &str,
) -> Result<ScenarioRequest> {
    let (proto, algo, p2p) = match case.setting.as_str() {
        "default" => (Proto::Auto, Algo::Auto, true),
        "ll_ring" => (Proto::Ll, Algo::Ring, true),
        "p2p_off" => (Proto::Auto, Algo::Auto, false),
        other => {
            return Err(Error::CaseProblem {
                case: case.name.clone(),
                problem: format!(
                    "unknown NCCL setting '{other}' (expected default, ll_ring or p2p_off)"
                ),
            })
        }
    };
    Ok(ScenarioRequest {
        model: "kimi-k2.5-bf16".into(),
        system: system.into(),
        tp: Some(ranks),
        batch: case.batch,
        context: case.context,
        cuda_graphs: true,
        proto,
        algo,
        p2p,
        seed: 0,
        calibration: Some(calibration.into()),
        kv_bytes: 2.0,
        runtime: Runtime::Reference,
        layers: Some(layers),
        routing: None,
        ..Default::default()
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub(crate) case: Case,
    /// Profiled steps left out as start-up outliers (longer than twice the median step).
    pub(crate) excluded_steps: usize,
    pub layers: usize,
    pub ranks: usize,
    /// The step the prediction is held against: the unprofiled replays' where `step_times.csv`
    /// gives it, else the trace's.
    pub(crate) measured_step_us: f64,
    /// The profiled step in the trace (mean over ranks and kept steps).
    pub(crate) profiled_step_us: f64,
    /// `measured_step_us` is from unprofiled replays.
    pub(crate) from_replays: bool,
    pub(crate) predicted_step_us: f64,
    pub(crate) step_error: f64,
    /// Mean over categories of |predicted share − measured share| (fraction).
    pub(crate) mean_share_error: f64,
    pub(crate) max_share_error: f64,
    pub(crate) max_share_category: Category,
    pub(crate) measured_wait_share: f64,
    pub(crate) predicted_wait_share: f64,
    /// What the trace showed of the scenario and how (or why not), and any allowed mismatch.
    pub checks: Vec<String>,
    #[serde(skip)]
    pub comparison: Comparison,
    #[serde(skip)]
    pub measured: Breakdown,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub cases: usize,
    pub median_abs_step_error: f64,
    pub worst_abs_step_error: f64,
    pub(crate) worst_case: String,
    /// Median over all (case, category) pairs of |share error|.
    pub median_share_error: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AnchorReport {
    pub anchor: String,
    pub(crate) results: Vec<(String, u32, f64, f64, f64)>,
    /// Over the cases of the anchor's context and setting within a 16x batch range.
    pub band: Option<Summary>,
    pub(crate) all: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    pub profile: String,
    /// The unprofiled step times the predictions were held against, if any.
    pub step_times: Option<String>,
    /// Configurations the step-times file names that have no traces (a misspelt name).
    pub step_times_unmatched: Vec<String>,
    pub results: Vec<CaseResult>,
    pub summary: Summary,
    pub anchor: Option<AnchorReport>,
    /// The model-form error the residuals give, and how often the intervals hold the measured
    /// step; None with `draws` 0.
    pub intervals: Option<IntervalCheck>,
}

/// One configuration's step interval, drawn with the model-form error of the other
/// configurations (leave-one-out).
#[derive(Debug, Clone, Serialize)]
pub struct CaseInterval {
    pub configuration: String,
    pub p5: f64,
    pub p50: f64,
    pub p95: f64,
    pub measured: f64,
    /// The measured step lies in [p5, p95].
    pub inside: bool,
    /// (p95 − p5) / p50.
    pub width: f64,
}

/// The intervals held against the validation's own measurements.
#[derive(Debug, Clone, Serialize)]
pub struct IntervalCheck {
    pub draws: usize,
    pub seed: u64,
    pub cases: Vec<CaseInterval>,
    /// Share of configurations whose measured step lies in p5–p95.
    pub coverage: f64,
    /// Median over configurations of (p95 − p5) / p50.
    pub median_width: f64,
    /// The model-form error over every configuration (what `--write-model-error` writes).
    pub model_error: ModelErrorFit,
}

/// Residuals per family over the validation: rms and mean of ln(measured / predicted) of each
/// category's time, and of measured − predicted idle (µs).
#[derive(Debug, Clone, Serialize)]
pub struct ModelErrorFit {
    /// (family, rms, mean, points) of ln(measured / predicted).
    pub families: Vec<(String, f64, f64, usize)>,
    pub idle_rms_us: f64,
    pub idle_mean_us: f64,
    pub points: usize,
}

impl ModelErrorFit {
    /// The fit as a model error to draw from.
    pub fn model_error(&self, path: &Path, gpu: &str) -> ModelError {
        ModelError {
            gpu: Some(gpu.to_string()),
            steps: Vec::new(),
            sigma: self
                .families
                .iter()
                .map(|(n, rms, _, _)| (n.clone(), *rms))
                .collect(),
            idle_sigma_us: self.idle_rms_us,
            path: path.to_path_buf(),
        }
    }

    /// The text of `data/calibration/model_error.toml`, provenance first.
    pub fn to_toml(&self, traces: &Path, profile: &str, gpu: &str, command: &str) -> String {
        let mut out = String::new();
        out.push_str("# The model's own error: how far decodesim's prices are from measured ones, per cost family,\n");
        out.push_str("# beyond the tables' interpolation error, routing and fitted factors. Every interval draws it\n");
        out.push_str("# (ln of each family's price multiplier ~ N(0, sigma); idle per pass ~ N(0, sigma_us) µs).\n");
        out.push_str(
            "# Written by `decodesim validate --write-model-error`: do not edit by hand.\n\n",
        );
        out.push_str("[provenance]\n");
        out.push_str(&format!("command = {}\n", toml_str(command)));
        out.push_str(&format!(
            "how = {}\n",
            toml_str("per family (the validation's categories), sigma = rms over the validation's configurations of ln(measured / predicted) of the category's time in the step (communication holds its waiting); idle sigma_us = rms of measured minus predicted idle per step (where unprofiled replays give the step, the trace less what the profiler added: idle first, then waiting); mean = the bias, for the record (draws are centred on the point)")
        ));
        out.push_str(&format!(
            "traces = {}\n",
            toml_str(&crate::units::path(traces))
        ));
        out.push_str(&format!(
            "profile = {}\n",
            toml_str(&crate::units::path(Path::new(profile)))
        ));
        out.push_str(&format!("gpu = {}\n", toml_str(gpu)));
        out.push_str(&format!("configurations = {}\n\n", self.points));
        out.push_str("# sigma of ln(measured / predicted) per family\n[sigma]\n");
        for (n, rms, _, _) in &self.families {
            out.push_str(&format!("{n} = {rms:.4}\n"));
        }
        out.push_str(
            "\n# mean of ln(measured / predicted) and points per family (not drawn)\n[bias]\n",
        );
        for (n, _, mean, k) in &self.families {
            out.push_str(&format!("{n} = {{ mean = {mean:.4}, points = {k} }}\n"));
        }
        out.push_str(&format!(
            "\n# idle per step no op prices, measured minus predicted (µs)\n[idle]\nsigma_us = {:.1}\nmean_us = {:.1}\n",
            self.idle_rms_us, self.idle_mean_us
        ));
        out
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Per configuration, (family, ln(measured / predicted)) of each category both sides hold, and
/// measured − predicted idle (µs); `measured` is the trace brought to the unprofiled step
/// ([`Breakdown::less_profiler`]) where replays give it.
fn residuals(r: &CaseResult) -> (Vec<(&'static str, f64)>, f64) {
    let mut out = Vec::new();
    let mut idle = 0.0;
    for row in &r.comparison.rows {
        if row.category == Category::Idle {
            idle = row.measured_us - row.predicted_us;
            continue;
        }
        let Some((name, _)) = MODEL_FAMILIES
            .iter()
            .find(|(n, _)| *n == row.category.to_string())
        else {
            continue;
        };
        if row.measured_us > 0.0 && row.predicted_us > 0.0 {
            out.push((*name, (row.measured_us / row.predicted_us).ln()));
        }
    }
    (out, idle)
}

/// The model-form error over `results` less the one at `leave_out`.
fn fit_model_error(results: &[CaseResult], leave_out: Option<usize>) -> ModelErrorFit {
    let mut by: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut idle = Vec::new();
    for (i, r) in results.iter().enumerate() {
        if Some(i) == leave_out {
            continue;
        }
        let (res, d) = residuals(r);
        for (n, x) in res {
            by.entry(n).or_default().push(x);
        }
        idle.push(d);
    }
    let rms = |v: &[f64]| (v.iter().map(|x| x * x).sum::<f64>() / v.len().max(1) as f64).sqrt();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    ModelErrorFit {
        families: MODEL_FAMILIES
            .iter()
            .filter_map(|(n, _)| {
                let v = by.get(n)?;
                Some((n.to_string(), rms(v), mean(v), v.len()))
            })
            .collect(),
        idle_rms_us: rms(&idle),
        idle_mean_us: mean(&idle),
        points: idle.len(),
    }
}

/// The measured step as the mean over ranks of each rank's mean step, leaving out steps longer
/// than twice the median step of all ranks: the first profiled step of a fresh process group
/// can hold hundreds of milliseconds of one-off waiting (profiler and NCCL start-up).
pub(crate) fn robust_breakdown(summary: &crate::accounting::TraceSummary) -> (Breakdown, usize) {
    robust_breakdown_with(summary, false)
}

/// [`robust_breakdown`]; with `after_barrier`, each rank's first profiled step is left out too
/// where the rank has later ones. The harness profiles its reference steps straight after a
/// `dist.barrier()` (data/traces/h200/MANIFEST.txt): the ranks leave the barrier up to
/// milliseconds apart, and the first step's first all-reduce holds that gap as waiting
/// (rank 1 of `refstep_b4_c32768_default`: 4,942 µs against 3,112 and 3,115 µs for its next
/// two steps, under the twice-the-median rule). Later steps start from a step whose last
/// collective ended on both ranks at once, as every step of a running server does.
pub(crate) fn robust_breakdown_with(
    summary: &crate::accounting::TraceSummary,
    after_barrier: bool,
) -> (Breakdown, usize) {
    let skip = |r: &crate::accounting::summary::RankSummary| {
        usize::from(after_barrier && r.selected_steps().count() > 1)
    };
    let mut times: Vec<f64> = summary
        .ranks
        .iter()
        .flat_map(|r| {
            r.selected_steps()
                .skip(skip(r))
                .map(|s| s.breakdown.step_time_us)
        })
        .collect();
    let limit = 2.0 * crate::calibrate::regression::median(&mut times);
    let mut excluded = 0;
    let per_rank: Vec<Breakdown> = summary
        .ranks
        .iter()
        .filter_map(|r| {
            let first = skip(r);
            excluded += first;
            let kept: Vec<&Breakdown> = r
                .selected_steps()
                .skip(first)
                .map(|s| &s.breakdown)
                .filter(|b| {
                    let keep = b.step_time_us <= limit;
                    if !keep {
                        excluded += 1;
                    }
                    keep
                })
                .collect();
            (!kept.is_empty()).then(|| Breakdown::mean(kept))
        })
        .collect();
    (Breakdown::mean(&per_rank), excluded)
}

fn wait_share(b: &Breakdown) -> f64 {
    let t = b.comm_wait_us + b.comm_transfer_us;
    if t > 0.0 {
        b.comm_wait_us / t
    } else {
        0.0
    }
}

fn summarize_errors(rows: &[(String, f64)], share_errors: &mut [f64]) -> Summary {
    let mut abs: Vec<f64> = rows.iter().map(|(_, e)| e.abs()).collect();
    let (worst_case, worst) =
        rows.iter()
            .map(|(n, e)| (n.clone(), e.abs()))
            .fold(
                (String::new(), 0.0),
                |acc, x| if x.1 >= acc.1 { x } else { acc },
            );
    Summary {
        cases: rows.len(),
        median_abs_step_error: crate::calibrate::regression::median(&mut abs),
        worst_abs_step_error: worst,
        worst_case,
        median_share_error: crate::calibrate::regression::median(share_errors),
    }
}

pub struct ValidateOptions<'a> {
    pub classifier: &'a Classifier,
    pub system: String,
    pub calibration: String,
    /// Layers of the reference step; None infers them from the collectives per step.
    pub layers: Option<usize>,
    /// Case name used as the single anchor; None picks batch 16 (or the nearest), context
    /// 8192 (or the nearest), setting `default`.
    pub anchor: Option<String>,
    /// Monte Carlo draws of each configuration's interval (0: no intervals).
    pub draws: usize,
    /// Seed of the draws.
    pub seed: u64,
    /// Unprofiled step times (`step_times.csv`); None reads the one beside the traces, if any.
    pub step_times: Option<PathBuf>,
}

/// The checks of the traces that the user may relax.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ValidateChecks {
    /// Rank files that are not one complete run.
    pub(crate) ranks: crate::trace::rank::RankPolicy,
    /// `--layers` (or the captured configuration) differing from what the trace shows.
    pub(crate) allow_mismatch: bool,
}

pub fn validate(dir: &Path, o: &ValidateOptions) -> Result<Validation> {
    validate_with(dir, o, ValidateChecks::default())
}

/// [`validate`], with the trace checks `checks` relaxes.
pub(crate) fn validate_with(
    dir: &Path,
    o: &ValidateOptions,
    checks: ValidateChecks,
) -> Result<Validation> {
    let cases = discover(dir)?;
    let times = StepTimes::find(dir, o.step_times.as_deref())?;
    let profile_path = crate::scenario::catalog::resolve_profile(&o.calibration)?;
    let profile = CalibrationProfile::from_file(&profile_path)?;
    let sopts = SummaryOptions {
        classifier: o.classifier,
        step_marker: None,
        top_unclassified: 5,
        ranks: checks.ranks,
    };
    let mut results = Vec::new();
    let mut share_errors = Vec::new();
    for case in cases {
        let (result, errors) =
            validate_case(case, o, &checks, &profile, &profile_path, &sopts, &times)?;
        share_errors.extend(errors);
        results.push(result);
    }
    let rows: Vec<(String, f64)> = results
        .iter()
        .map(|r| (r.case.name.clone(), r.step_error))
        .collect();
    let summary = summarize_errors(&rows, &mut share_errors);
    let anchor = anchor_mode(&results, &profile, &profile_path, o)?;
    let intervals = check_intervals(&results, &profile, &profile_path, o)?;
    Ok(Validation {
        profile: profile_path.display().to_string(),
        step_times: times.path.as_deref().map(crate::units::path),
        step_times_unmatched: times
            .us
            .keys()
            .filter(|k| !results.iter().any(|r| &r.case.name == *k))
            .cloned()
            .collect(),
        results,
        summary,
        anchor,
        intervals,
    })
}

/// One configuration: its traces summarised, its scenario inferred, checked and simulated, and
/// the two compared; with each category's share error.
fn validate_case(
    case: Case,
    o: &ValidateOptions,
    checks: &ValidateChecks,
    profile: &CalibrationProfile,
    profile_path: &Path,
    sopts: &SummaryOptions,
    times: &StepTimes,
) -> Result<(CaseResult, Vec<f64>)> {
    let summary = summarize(&case.files, sopts).map_err(|e| Error::Case {
        case: case.name.clone(),
        error: Box::new(e.into()),
    })?;
    let (profiled, excluded) = robust_breakdown_with(&summary, true);
    let replayed = times.get(&case.name);
    let measured = match replayed {
        Some(us) => profiled.less_profiler(us),
        None => profiled.clone(),
    };
    let inferred = infer_scenario(&summary);
    let layers = case_layers(&case, o, &inferred)?;
    let ranks = case.files.len() as u32;
    let req = request_for(
        &case,
        ranks,
        layers,
        &o.system,
        &profile_path.display().to_string(),
    )?;
    let (scenario, _) = req.load()?;
    let checks =
        check_or_allow(&scenario, &inferred, checks.allow_mismatch).map_err(|e| Error::Case {
            case: case.name.clone(),
            error: Box::new(e),
        })?;
    let sim = simulate_loaded(scenario, profile.clone())?;
    let cmp = compare(&sim.mean, &measured);
    let errs: Vec<(Category, f64)> = cmp
        .rows
        .iter()
        .map(|r| (r.category, (r.predicted_share - r.measured_share).abs()))
        .collect();
    let (max_cat, max_err) =
        errs.iter()
            .copied()
            .fold((Category::Idle, 0.0), |a, x| if x.1 > a.1 { x } else { a });
    let step_us = replayed.unwrap_or(profiled.step_time_us);
    let result = CaseResult {
        excluded_steps: excluded,
        layers,
        ranks: ranks as usize,
        measured_step_us: step_us,
        profiled_step_us: profiled.step_time_us,
        from_replays: replayed.is_some(),
        predicted_step_us: sim.step_time_us(),
        step_error: (sim.step_time_us() - step_us) / step_us,
        mean_share_error: errs.iter().map(|e| e.1).sum::<f64>() / errs.len() as f64,
        max_share_error: max_err,
        max_share_category: max_cat,
        measured_wait_share: wait_share(&measured),
        predicted_wait_share: wait_share(&sim.mean),
        checks,
        comparison: cmp,
        measured,
        case,
    };
    Ok((result, errs.iter().map(|e| e.1).collect()))
}

/// The layer count: `--layers`, else what the trace shows (checked against it either way).
fn case_layers(case: &Case, o: &ValidateOptions, inferred: &Inferred) -> Result<usize> {
    // Each layer has two all-reduces; the step adds the embedding's and the logits gather
    // (accounting::infer). --layers wins, and is then checked against the trace.
    match (o.layers, &inferred.layers) {
        (Some(l), _) => Ok(l),
        (None, Some(l)) => Ok(l.value),
        (None, None) => Err(Error::CaseProblem {
            case: case.name.clone(),
            problem: format!(
                "cannot infer the layer count ({}); pass --layers",
                inferred
                    .unknown
                    .iter()
                    .filter(|u| u.starts_with("layers"))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }),
    }
}

/// Each configuration's step interval with the model-form error of the others (leave-one-out)
/// and the profile's own sources, drawn through the timeline, held against its measured step.
fn check_intervals(
    results: &[CaseResult],
    profile: &CalibrationProfile,
    profile_path: &Path,
    o: &ValidateOptions,
) -> Result<Option<IntervalCheck>> {
    if o.draws == 0 || results.is_empty() {
        return Ok(None);
    }
    let mut cases = Vec::with_capacity(results.len());
    for (i, r) in results.iter().enumerate() {
        let req = request_for(
            &r.case,
            r.ranks as u32,
            r.layers,
            &o.system,
            &profile_path.display().to_string(),
        )?;
        let (scenario, _) = req.load()?;
        let model = if results.len() > 1 {
            fit_model_error(results, Some(i))
                .model_error(Path::new("leave-one-out"), &scenario.system.gpu.name)
        } else {
            ModelError::default()
        };
        let u = Uncertainty::from_profile_with(profile, &scenario, &model)?;
        let ratios = timeline_step_ratios(&scenario, profile, &u, o.draws, o.seed)?;
        let steps: Vec<f64> = ratios.iter().map(|x| x * r.predicted_step_us).collect();
        let q = if steps.is_empty() {
            Interval::of(&[r.predicted_step_us])
        } else {
            Interval::of(&steps)
        };
        cases.push(CaseInterval {
            configuration: r.case.name.clone(),
            p5: q.p5,
            p50: q.p50,
            p95: q.p95,
            measured: r.measured_step_us,
            inside: (q.p5..=q.p95).contains(&r.measured_step_us),
            width: (q.p95 - q.p5) / q.p50,
        });
    }
    let coverage = cases.iter().filter(|c| c.inside).count() as f64 / cases.len() as f64;
    let mut widths: Vec<f64> = cases.iter().map(|c| c.width).collect();
    Ok(Some(IntervalCheck {
        draws: o.draws,
        seed: o.seed,
        coverage,
        median_width: crate::calibrate::regression::median(&mut widths),
        cases,
        model_error: fit_model_error(results, None),
    }))
}

fn anchor_mode(
    results: &[CaseResult],
    profile: &CalibrationProfile,
    profile_path: &Path,
    o: &ValidateOptions,
) -> Result<Option<AnchorReport>> {
    if results.len() < 2 {
        return Ok(None);
    }
    let pick = anchor_case(results, o)?;
    let req = request_for(
        &pick.case,
        pick.ranks as u32,
        pick.layers,
        &o.system,
        &profile_path.display().to_string(),
    )?;
    let (scenario, _) = req.load()?;
    let fitted = fit_to_step(&scenario, profile, &pick.measured, &pick.case.name)?;
    let mut rows = Vec::new();
    let mut out = Vec::new();
    let mut shares = Vec::new();
    let mut band_rows = Vec::new();
    let mut band_shares = Vec::new();
    for r in results {
        let req = request_for(
            &r.case,
            r.ranks as u32,
            r.layers,
            &o.system,
            &profile_path.display().to_string(),
        )?;
        let (scenario, _) = req.load()?;
        let sim = simulate_loaded(scenario, fitted.profile.clone())?;
        let cmp = compare(&sim.mean, &r.measured);
        let e = (sim.step_time_us() - r.measured_step_us) / r.measured_step_us;
        let se: Vec<f64> = cmp
            .rows
            .iter()
            .map(|x| (x.predicted_share - x.measured_share).abs())
            .collect();
        let ratio = r.case.batch as f64 / pick.case.batch as f64;
        let in_band = r.case.context == pick.case.context
            && r.case.setting == pick.case.setting
            && (0.25..=4.0).contains(&ratio);
        if in_band {
            band_rows.push((r.case.name.clone(), e));
            band_shares.extend(se.iter().copied());
        }
        shares.extend(se);
        rows.push((r.case.name.clone(), e));
        out.push((
            r.case.name.clone(),
            r.case.batch,
            r.measured_step_us,
            sim.step_time_us(),
            e,
        ));
    }
    Ok(Some(AnchorReport {
        anchor: pick.case.name.clone(),
        results: out,
        band: (band_rows.len() > 1).then(|| summarize_errors(&band_rows, &mut band_shares)),
        all: summarize_errors(&rows, &mut shares),
    }))
}

/// The configuration `--anchor` names, else the default setting's nearest to batch 16 and
/// context 8192 (in log distance).
fn anchor_case<'a>(results: &'a [CaseResult], o: &ValidateOptions) -> Result<&'a CaseResult> {
    Ok(match &o.anchor {
        Some(name) => results
            .iter()
            .find(|r| &r.case.name == name)
            .ok_or_else(|| Error::Unknown {
                kind: "anchor case",
                name: name.clone(),
                choices: results.iter().map(|r| r.case.name.clone()).collect(),
            })?,
        None => results
            .iter()
            .filter(|r| r.case.setting == "default")
            .min_by_key(|r| {
                let db = (r.case.batch as f64 / 16.0).ln().abs();
                let dc = (r.case.context as f64 / 8192.0).ln().abs();
                ((db + dc) * 1e6) as u64
            })
            .unwrap_or(&results[0]),
    })
}
