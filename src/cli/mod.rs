//! Command-line definitions and glue; each subcommand is a thin function over the library.

mod scenario_args;

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
    }
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
