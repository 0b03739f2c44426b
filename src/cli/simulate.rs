//! `decodesim simulate`: one decode step on every rank, where the time goes.

use super::{print, ScenarioArgs};
use crate::error::{Error, Result};
use crate::report::{self, Format};
use crate::sim;
use std::path::PathBuf;

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

pub fn run(a: SimulateArgs) -> Result<()> {
    let sim = sim::simulate(&a.scenario.request())?;
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
