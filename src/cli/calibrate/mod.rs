//! `decodesim calibrate`: fit a profile to measurement CSVs, or adjust one to a measured step.

use super::{print, ScenarioArgs};
use crate::error::Result;
use crate::report;
use nccl_tests::from_nccl_tests;
use std::path::{Path, PathBuf};
use throughput::from_throughput;

mod mode_flags;
mod nccl_tests;
mod throughput;

#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Folder with kernels.csv, collectives.csv, launch.csv (schema in data/README.md).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present_any = ["from_trace", "from_aiconfigurator", "from_throughput", "from_burst", "from_nccl_tests", "from_deepep_ll", "transfer_profile"],
        conflicts_with_all = ["from_trace", "from_aiconfigurator", "from_throughput", "from_burst", "from_nccl_tests", "from_deepep_ll"]
    )]
    measurements: Option<PathBuf>,
    /// Instead: a profile that prices from AIConfigurator's measured tables, converted by
    /// harness/aiconfigurator_tables.py (e.g. data/calibration/aiconfigurator/rtx_pro_6000_server);
    /// --system names the machine they describe, --fallback (default: the system's own
    /// profile) supplies what they do not hold.
    #[arg(long, value_name = "DIR", conflicts_with = "from_trace")]
    from_aiconfigurator: Option<PathBuf>,
    /// Instead: adjust the scenario's profile (--calibration) so the simulator reproduces this
    /// measured step (trace files, one per rank, or a folder), category by category.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    from_trace: Vec<PathBuf>,
    /// With --from-trace: the same step timed without the profiler (µs, e.g. the median of
    /// timed CUDA-graph replays). The profiler's graph-launch stall lengthens a short traced
    /// step; the trace is brought to this step before the fit (what the profiler added comes out
    /// of its idle, then its waiting), so the profile does not learn the stall.
    #[arg(long, value_name = "US")]
    unprofiled_step_us: Option<f64>,
    /// The scenario the trace shows (used with --from-trace).
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Where to write the fitted profile TOML.
    #[arg(long, value_name = "PROFILE.toml")]
    out: PathBuf,
    /// GPU the measurements were taken on (a file stem in data/systems/gpus).
    #[arg(long, default_value = "h200-sxm")]
    gpu: String,
    /// Name recorded in the profile [default: the output folder's name].
    #[arg(long)]
    name: Option<String>,
    /// Profile supplying the sections the measurements do not cover.
    #[arg(long, default_value = "h200")]
    fallback: String,
    /// Refuse the profile when a section's median |relative error| exceeds this (percent); with
    /// --from-throughput, the points' median |error| after the fit.
    #[arg(long, default_value_t = 15.0, value_name = "PCT")]
    max_median_error: f64,
    /// Refuse the profile when a section's R² is below this (0 to 1) and a point misses by
    /// more than twice --max-median-error.
    #[arg(long, default_value_t = 0.9)]
    min_r2: f64,
    /// With --from-trace: refuse to write the profile when the adjusted profile still misses the
    /// measured step time by more than this (percent).
    #[arg(long, default_value_t = crate::calibrate::from_trace::DEFAULT_MAX_STEP_ERROR_PCT, value_name = "PCT")]
    max_step_error: f64,
    /// Write the profile even when a fit breaks the rules; each such section is listed in the
    /// profile's `[profile] poor_fit`, and every report using the profile warns.
    #[arg(long)]
    allow_poor_fit: bool,
    /// With --from-trace: go on when the scenario's ranks, layers, batch or context differ from
    /// what the trace shows (the report says so).
    #[arg(long)]
    allow_mismatch: bool,
    /// Do not reference kernels.csv as a measurement table: price every kernel by the fitted
    /// roofline law alone.
    #[arg(long)]
    no_table: bool,
    /// Write a profile for another GPU: its kernels take the fitted efficiencies and fixed
    /// costs (fractions of the peak transfer; the measured table does not), its collectives keep
    /// the fallback's entries for the paths the target has, plus the measured host path.
    #[arg(long, value_name = "GPU")]
    transfer_to: Option<String>,
    /// Instead: move a whole profile (name or path; its laws, measured table and AIConfigurator
    /// tables) to the GPU of --transfer-to by physics: measured prices keep their fixed cost
    /// and scale the rest by each op's roofline on the new GPU (collectives: the bytes term by
    /// the link), marked transferred in every report. --system names the machine the profile
    /// was measured on.
    #[arg(long, value_name = "PROFILE", requires = "transfer_to", conflicts_with_all = ["measurements", "from_aiconfigurator", "from_trace"])]
    transfer_profile: Option<String>,
    /// Instead: fit end-to-end factors on top of the scenario's profile to benchmark points:
    /// CSVs `concurrency,context,tokens_per_s|tpot_ms` (optional kv_cache_dtype, nccl_proto,
    /// nccl_algo, p2p, allreduce, dcp, spec_method, draft_tokens, acceptance_rate|acceptance_length)
    /// and/or `vllm bench serve --save-result` JSON files; the scenario flags give everything else.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["from_trace", "from_burst", "from_nccl_tests"])]
    from_throughput: Vec<PathBuf>,
    /// With --from-throughput: the factors to fit (refused ones are named in the report)
    /// [default: the fit chooses the ones the points identify, at most points - 1].
    #[arg(long, value_delimiter = ',')]
    factors: Vec<crate::calibrate::from_throughput::Factor>,
    /// With --from-throughput: the number of a `vllm bench serve` result that is the point's
    /// measurement: output-throughput (tokens/s over the run, prefill included), median-tpot or
    /// mean-tpot (tokens/s = concurrency / TPOT: decode only).
    #[arg(long, default_value = "output-throughput")]
    bench_metric: crate::calibrate::bench_serve::BenchMetric,
    /// With --from-throughput: fit nothing; price each point bottom-up under the scenario's
    /// profile and write to --out the model's error across step sizes on the scenario's GPU
    /// (σ and neighbour correlation of ln(measured / predicted)), the format of
    /// data/calibration/step_error/, which intervals on that GPU draw.
    #[arg(long, conflicts_with_all = ["factors", "serving"])]
    step_error: bool,
    /// With --from-throughput: price each `vllm bench serve` result as the serving run it was
    /// (`decodesim serve`: its lengths, clients and prompts, chunked prefill mixed into the
    /// decode steps) instead of one decode step at its mean context.
    #[arg(long)]
    serving: bool,
    /// Instead: price NCCL collectives from nccl-tests output of this machine
    /// (all_reduce_perf, all_gather_perf, ...): writes a tables/ folder beside --out and a profile
    /// (--profile, else the scenario's) that prices from it.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["from_trace", "from_burst", "from_aiconfigurator"])]
    from_nccl_tests: Vec<PathBuf>,
    /// With --from-nccl-tests: the time column to price from (vLLM's NCCL all-reduce is
    /// out-of-place).
    #[arg(
        long,
        default_value = "out-of-place",
        value_name = "out-of-place|in-place|min"
    )]
    nccl_tests_column: crate::calibrate::nccl_tests::Column,
    /// With --from-nccl-tests: the channels NCCL ran the files on, as its log says (`N coll
    /// channels`, or the ring lines `Channel 00/N`); read from the files where they hold NCCL's
    /// INFO lines. --nccl-min-nchannels / --nccl-max-nchannels then scale from this count.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    nccl_channels: Option<u32>,
    /// With --from-nccl-tests: the base profile (name or path) [default: --calibration, else the
    /// system's own].
    #[arg(long, value_name = "BASE")]
    pub profile: Option<String>,
    /// Instead: fit the collective latency/bandwidth scales of the scenario's profile to an
    /// allreduce burst: COUNT,BYTES,TOTAL_US (e.g. 122,14336,6810) or a CSV count,bytes,total_us.
    #[arg(
        long,
        value_name = "COUNT,BYTES,TOTAL_US|FILE.csv",
        conflicts_with = "from_trace"
    )]
    from_burst: Option<String>,
    /// Instead: fit the DeepEP low-latency dispatch and combine laws (`--ep-comm rdma-ll`
    /// inside one node) to measured kernel times, a CSV
    /// `phase,hidden,topk,experts,ranks,num_tokens,bytes,latency_us` (phase dispatch|combine,
    /// tokens and bytes per rank), on top of the base profile (--profile, else the scenario's).
    #[arg(
        long,
        value_name = "FILE.csv",
        conflicts_with_all = ["from_trace", "from_burst", "from_aiconfigurator", "from_nccl_tests", "from_throughput"]
    )]
    from_deepep_ll: Option<PathBuf>,
    /// Print the profile's full provenance (every table and fallback section), not its
    /// one-line summary.
    #[arg(long)]
    verbose: bool,
}

pub fn run(a: CalibrateArgs) -> Result<()> {
    super::output::check_output_flag("--out", Some(&a.out))?;
    mode_flags::check(&a)?;
    paths(&a).check()?;
    if !a.from_throughput.is_empty() {
        return from_throughput(&a);
    }
    if !a.from_nccl_tests.is_empty() {
        return from_nccl_tests(&a);
    }
    if let Some(spec) = &a.from_burst {
        return from_burst(&a, spec);
    }
    if let Some(table) = &a.from_deepep_ll {
        return from_deepep_ll(&a, table);
    }
    if let Some(dir) = &a.from_aiconfigurator {
        return from_aiconfigurator(&a, dir);
    }
    if let (Some(base), Some(gpu)) = (&a.transfer_profile, &a.transfer_to) {
        return transfer_profile(&a, base, gpu);
    }
    let Some(dir) = a.measurements.clone() else {
        return from_trace(&a);
    };
    let result = crate::calibrate::calibrate_dir(&crate::calibrate::DirRequest {
        measurements: dir,
        gpu: a.gpu.clone(),
        fallback: a.fallback.clone(),
        out: a.out.clone(),
        name: a.name.clone(),
        no_table: a.no_table,
        transfer_to: a.transfer_to.clone(),
        max_median_error_pct: a.max_median_error,
        min_r2: a.min_r2,
        allow_poor_fit: a.allow_poor_fit,
    })?;
    print(&report::calibration::render_fit(&result, &a.out, a.verbose))
}

/// The tables folder `--from-nccl-tests` writes beside the profile (replaced whole).
fn tables_beside(out: &Path) -> PathBuf {
    out.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("tables")
}

/// The files a folder input stands for: the files directly in it.
fn folder_files(p: &mut super::paths::Paths, flag: &str, dir: &Path) {
    p.input(flag, dir);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_file() {
            p.input(flag, &e.path());
        }
    }
}

/// Every file the calibration reads and the profile (and tables) it writes.
fn paths(a: &CalibrateArgs) -> super::paths::Paths {
    let mut p = super::paths::Paths::new();
    p.scenario(&a.scenario.request());
    if let Some(d) = &a.measurements {
        folder_files(&mut p, "--measurements", d);
        p.profile("--fallback", &a.fallback);
    }
    if let Some(d) = &a.from_aiconfigurator {
        folder_files(&mut p, "--from-aiconfigurator", d);
        p.profile("--fallback", &a.fallback);
    }
    p.traces("--from-trace", &a.from_trace);
    for f in &a.from_throughput {
        p.input("--from-throughput", f);
    }
    for f in &a.from_nccl_tests {
        p.input("--from-nccl-tests", f);
    }
    if let Some(b) = &a.from_burst {
        p.input_if_file("--from-burst", Some(b));
    }
    p.input_opt("--from-deepep-ll", a.from_deepep_ll.as_deref());
    if let Some(base) = &a.profile {
        p.profile("--profile", base);
    }
    p.output("--out", Some(&a.out));
    if !a.from_nccl_tests.is_empty() {
        p.output_folder("--out (its tables/ folder)", &tables_beside(&a.out));
    }
    p
}

fn from_trace(a: &CalibrateArgs) -> Result<()> {
    super::trace::check_unprofiled(a.unprofiled_step_us)?;
    let measured = super::trace::load(
        &a.from_trace,
        &super::trace::TraceReadArgs {
            rules: None,
            step_marker: None,
            top_unclassified: 5,
        },
    )?;
    let (scenario, profile) = a.scenario.request().load()?;
    let inferred = crate::accounting::infer::infer_scenario(&measured);
    let mut notes =
        crate::accounting::infer::check_or_allow(&scenario, &inferred, a.allow_mismatch)?;
    // The same start-up outlier rule as `validate`.
    let (traced, excluded) = crate::validate::robust_breakdown(&measured);
    let (step, note) = super::trace::to_unprofiled(&traced, a.unprofiled_step_us);
    notes.extend(note);
    let name = a
        .from_trace
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let r = crate::calibrate::from_trace::calibrate_to_step(
        &scenario,
        &profile,
        &step,
        &name,
        &a.out,
        &crate::calibrate::from_trace::TraceFitOptions {
            max_step_error_pct: a.max_step_error,
            allow_poor_fit: a.allow_poor_fit,
        },
    )?;
    print(&report::calibration::render_from_trace(
        &r, excluded, &notes,
    ))
}

fn transfer_profile(a: &CalibrateArgs, base: &str, gpu: &str) -> Result<()> {
    use crate::calibrate::transfer_profile::{transfer_profile, TransferRequest};
    let p = transfer_profile(&TransferRequest {
        base: base.to_string(),
        from_system: a.scenario.request().system,
        to_gpu: gpu.to_string(),
        out: a.out.clone(),
        name: a.name.clone(),
    })?;
    let mut s = format!(
        "wrote {} (profile '{}', GPU {}, transferred from {})\n",
        crate::units::path(&a.out),
        p.profile.name,
        p.profile.gpu,
        p.transfer.as_ref().map_or("-", |t| t.from_gpu.as_str())
    );
    s.push_str(&report::calibration::provenance_line(
        &p.profile.provenance,
        a.verbose,
    ));
    print(&s)
}

fn from_aiconfigurator(a: &CalibrateArgs, dir: &std::path::Path) -> Result<()> {
    // The fallback's own default ("h200") is for --measurements; here the system's profile is
    // the natural base unless the user names one.
    let base = (a.fallback != "h200").then(|| a.fallback.clone());
    let r = crate::calibrate::aiconfigurator::from_aiconfigurator(
        &crate::calibrate::aiconfigurator::AicRequest {
            dir: dir.to_path_buf(),
            system: a.scenario.request().system,
            base,
            out: a.out.clone(),
            name: a.name.clone(),
        },
    )?;
    let mut s = format!(
        "wrote {} (profile '{}', GPU {})\n",
        crate::units::path(&a.out),
        r.profile.profile.name,
        r.profile.profile.gpu
    );
    for (file, rows, what) in &r.tables {
        s.push_str(&format!("  {file:<22} {rows:>6} rows  {what}\n"));
    }
    if let Some(c) = &r.profile.custom_allreduce {
        s.push_str(&format!(
            "  custom all-reduce law (graph): {:.2} µs + {:.2} µs/rank + stage bytes / {:.1} GB/s ({})\n",
            c.graph.base_us, c.graph.per_rank_us, c.graph.bw_gbps, c.graph.source
        ));
    }
    for n in &r.notes {
        s.push_str(&format!("  note: {n}\n"));
    }
    s.push_str(&report::calibration::provenance_line(
        &r.profile.profile.provenance,
        a.verbose,
    ));
    print(&s)
}

fn from_deepep_ll(a: &CalibrateArgs, table: &std::path::Path) -> Result<()> {
    let mut req = a.scenario.request();
    if let Some(p) = &a.profile {
        req.calibration = Some(p.clone());
    }
    let (_, base) = req.load()?;
    let r = crate::calibrate::deepep_ll::from_deepep_ll(
        table,
        &base,
        &a.out,
        a.name.as_deref(),
        a.max_median_error,
        a.allow_poor_fit,
    )?;
    let mut s = format!(
        "wrote {} (profile '{}' = '{}' + DeepEP low-latency laws)\n\nphase     latency µs  bandwidth GB/s  rows  median |rel err|  ranks  bytes measured\n",
        crate::units::path(&r.out),
        r.profile.profile.name,
        r.base
    );
    use crate::cost::deepep::Phase;
    for phase in [Phase::Dispatch, Phase::Combine] {
        let l = r.section.law(phase);
        s.push_str(&format!(
            "{:<9} {:>10.2} {:>15.1} {:>5} {:>16.1}%  {:<6} {}..{}\n",
            phase.name(),
            l.latency_us,
            l.bw_gbps,
            l.rows,
            l.median_rel_err * 100.0,
            l.measured_ranks
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(","),
            crate::units::bytes(l.measured_bytes[0]),
            crate::units::bytes(l.measured_bytes[1])
        ));
    }
    for m in &r.profile.profile.poor_fit {
        s.push_str(&format!(
            "warning: written although the fit breaks the rules: {m}\n"
        ));
    }
    print(&s)
}

fn from_burst(a: &CalibrateArgs, spec: &str) -> Result<()> {
    let (bursts, source, at) = crate::calibrate::from_burst::parse_bursts_at(spec)?;
    let (scenario, profile) = a.scenario.request().load()?;
    let r = crate::calibrate::from_burst::fit_bursts_at(
        &scenario,
        &profile,
        &bursts,
        &at,
        &source,
        &a.out,
        a.name.as_deref(),
    )?;
    let mut s = format!(
        "wrote {} (profile '{}' = '{}' + collective scales; allreduce priced by {} at {} ranks)\n",
        crate::units::path(&r.out),
        r.profile.profile.name,
        r.base,
        r.entry,
        scenario.layout.tp
    );
    s.push_str(&format!(
        "collective_latency_scale {:.4}{}\ncollective_bw_scale      {:.4}{}\n",
        r.latency_scale,
        r.latency_ci95
            .map(|c| format!(" ± {c:.4} (95%)"))
            .unwrap_or_default(),
        r.bw_scale,
        r.bw_ci95
            .map(|c| format!(" (95% {:.4} .. {:.4})", c[0], c[1]))
            .unwrap_or_default()
    ));
    s.push_str("\nburst                          measured µs each   before   after\n");
    for (b, (before, after)) in r.bursts.iter().zip(&r.predicted) {
        s.push_str(&format!(
            "{:<30} {:>16.2} {:>8.2} {:>7.2}\n",
            format!("{} x {} B", b.count, b.bytes),
            b.per_collective_us(),
            before,
            after
        ));
    }
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    for w in &r.warnings {
        s.push_str(&format!("warning: {}\n", crate::units::one_line(w)));
    }
    print(&s)
}
