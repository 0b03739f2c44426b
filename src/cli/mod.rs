//! Command-line definitions and glue; each subcommand is a thin function over the library.

mod scenario_args;
pub mod trace_cmd;

pub use scenario_args::ScenarioArgs;

use crate::error::{Error, Result};
use crate::report::{self, Format};
use crate::simulation;
use crate::spec::{catalog, ModelSpec, SystemSpec};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "decodesim",
    version,
    about = "Decode-step simulator and cost model for LLM inference, held against real profiler traces"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate one decode step on every rank and show where the time goes.
    Simulate(SimulateArgs),
    /// List the bundled models, systems and calibration profiles.
    List,
    /// Fit a calibration profile to the harness's measurement CSVs.
    Calibrate(CalibrateArgs),
    /// Read torch.profiler (Kineto) traces: steps, time per category, idle, communication.
    Trace(trace_cmd::TraceArgs),
    /// Simulate a scenario and hold it against measured traces, category by category.
    Compare(CompareArgs),
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    #[command(flatten)]
    pub measured: trace_cmd::CompareTraceArgs,
}

#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Folder with kernels.csv, collectives.csv, launch.csv (schema in data/README.md).
    #[arg(long, value_name = "DIR")]
    pub measurements: PathBuf,
    /// Where to write the fitted profile TOML.
    #[arg(long, value_name = "PROFILE.toml")]
    pub out: PathBuf,
    /// GPU the measurements were taken on (a file stem in data/systems/gpus).
    #[arg(long, default_value = "h200-sxm")]
    pub gpu: String,
    /// Name recorded in the profile [default: the output folder's name].
    #[arg(long)]
    pub name: Option<String>,
    /// Profile supplying the sections the measurements do not cover.
    #[arg(long, default_value = "h200")]
    pub fallback: String,
    /// Refuse the profile when a section's median |relative error| exceeds this (percent).
    #[arg(long, default_value_t = 15.0)]
    pub max_median_error: f64,
    /// Refuse the profile when a section's R² is below this.
    #[arg(long, default_value_t = 0.9)]
    pub min_r2: f64,
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the simulated step as a Chrome trace (opens in Perfetto).
    #[arg(long, value_name = "FILE.json")]
    pub timeline: Option<PathBuf>,
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Simulate(a) => simulate(a),
        Command::List => list(),
        Command::Calibrate(a) => calibrate(a),
        Command::Trace(a) => trace_cmd::run(&a, &mut std::io::stdout().lock())
            .map_err(|e| Error::Other(e.to_string())),
        Command::Compare(a) => compare(a),
    }
}

fn compare(a: CompareArgs) -> Result<()> {
    let sim = simulation::simulate(&a.scenario.request())?;
    let title = format!(
        "{} on {}, TP={}, batch {}, context {}",
        a.scenario.request().model,
        a.scenario.request().system,
        sim.scenario.tp,
        sim.scenario.batch,
        sim.scenario.context
    );
    trace_cmd::run_compare(
        &sim.mean,
        &a.measured,
        &title,
        &mut std::io::stdout().lock(),
    )
    .map(|_| ())
    .map_err(|e| Error::Other(e.to_string()))
}

fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = out.write_all(text.as_bytes());
    Ok(())
}

fn simulate(a: SimulateArgs) -> Result<()> {
    let sim = simulation::simulate(&a.scenario.request())?;
    if let Some(path) = &a.timeline {
        let file = std::fs::File::create(path).map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })?;
        report::chrome::write_chrome_trace(&sim, file).map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })?;
    }
    let text = match a.format {
        Format::Table => report::simulation::render_table(&sim),
        Format::Json => {
            serde_json::to_string_pretty(&report::simulation::to_json(&sim)).expect("JSON value")
                + "\n"
        }
        Format::Csv => report::simulation::to_csv(&sim),
    };
    print(&text)?;
    if let (Some(path), Format::Table) = (&a.timeline, a.format) {
        print(&format!("\ntimeline written to {}\n", path.display()))?;
    }
    Ok(())
}

fn list() -> Result<()> {
    let mut out = String::from("models (models/*.json; --model NAME or a config.json path)\n");
    let mut t =
        report::table::Table::new(&["name", "family", "layers", "hidden", "experts", "weights"]);
    for name in catalog::stems(&catalog::models_dir(), "json") {
        let path = catalog::models_dir().join(format!("{name}.json"));
        match ModelSpec::from_file(&path) {
            Ok(m) => t.row(vec![
                name,
                m.family.name().into(),
                m.num_layers.to_string(),
                m.hidden.to_string(),
                m.moe
                    .as_ref()
                    .map(|x| format!("{} top-{}", x.n_routed_experts, x.top_k))
                    .unwrap_or_else(|| "-".into()),
                m.quant
                    .as_ref()
                    .map(|q| format!("{} ({})", q.format.name(), q.method))
                    .unwrap_or_else(|| "bf16".into()),
            ]),
            Err(e) => t.row(vec![
                name,
                format!("error: {e}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]),
        }
    }
    out.push_str(&t.render());
    out.push_str("\nsystems (data/systems/*.toml; --system NAME or a path)\n");
    let mut t =
        report::table::Table::new(&["name", "GPUs", "link", "default calibration", "description"]);
    for name in catalog::stems(&catalog::systems_dir(), "toml") {
        let path = catalog::systems_dir().join(format!("{name}.toml"));
        match SystemSpec::from_file(&path, &catalog::gpus_dir()) {
            Ok(s) => t.row(vec![
                name,
                format!("{}x {}", s.gpu_count, s.gpu.name),
                format!("{:?}", s.interconnect.kind).to_lowercase(),
                s.default_calibration.clone(),
                s.description.clone(),
            ]),
            Err(e) => t.row(vec![
                name,
                format!("error: {e}"),
                String::new(),
                String::new(),
                String::new(),
            ]),
        }
    }
    out.push_str(&t.render());
    out.push_str(
        "\ncalibration profiles (data/calibration/*/profile.toml; --calibration NAME or a path)\n",
    );
    let mut t = report::table::Table::new(&["name", "gpu", "provenance"]);
    for name in catalog::profile_names() {
        let path = catalog::calibration_dir().join(&name).join("profile.toml");
        match crate::cost::CalibrationProfile::from_file(&path) {
            Ok(p) => t.row(vec![
                name,
                p.profile.gpu.clone(),
                p.profile.provenance.clone(),
            ]),
            Err(e) => t.row(vec![name, format!("error: {e}"), String::new()]),
        }
    }
    out.push_str(&t.render());
    print(&out)
}

fn calibrate(a: CalibrateArgs) -> Result<()> {
    let m = crate::calibrate::measurements::Measurements::read_dir(&a.measurements)?;
    let gpu_path = catalog::gpus_dir().join(format!("{}.toml", a.gpu));
    if !gpu_path.is_file() {
        return Err(Error::Unknown {
            kind: "GPU",
            name: a.gpu.clone(),
            choices: catalog::stems(&catalog::gpus_dir(), "toml"),
        });
    }
    let gpu = crate::spec::GpuSpec::from_file(&gpu_path)?;
    let fallback =
        crate::cost::CalibrationProfile::from_file(&catalog::resolve_profile(&a.fallback)?)?;
    let name = a.name.clone().unwrap_or_else(|| {
        a.out
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("fitted")
            .to_string()
    });
    let result = crate::calibrate::calibrate(
        &m,
        &gpu,
        &name,
        &fallback,
        a.max_median_error / 100.0,
        a.min_r2,
    )?;
    let body = toml::to_string_pretty(&result.profile)
        .map_err(|e| Error::Other(format!("cannot serialize the profile: {e}")))?;
    let header = format!(
        "# Written by `decodesim calibrate --measurements {} --gpu {} --fallback {}`.\n# {}\n# {}\n\n",
        a.measurements.display(),
        a.gpu,
        a.fallback,
        result.profile.profile.method,
        result.profile.profile.provenance
    );
    std::fs::write(&a.out, header + &body).map_err(|source| Error::Write {
        path: a.out.clone(),
        source,
    })?;
    print(&report::calibration::render_fit(&result))?;
    print(&format!("\nprofile written to {}\n", a.out.display()))
}
