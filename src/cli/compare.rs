//! `decodesim compare`: simulate a scenario and hold it against measured traces.

use super::ScenarioArgs;
use crate::error::Result;
use crate::sim;

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    #[command(flatten)]
    pub measured: super::trace::CompareTraceArgs,
}

pub fn run(mut a: CompareArgs) -> Result<()> {
    super::output::check_output_flag("--plot", a.measured.plot.as_deref())?;
    super::paths::Paths::new()
        .scenario(&a.scenario.request())
        .traces("--trace", &a.measured.traces)
        .input_opt("--rules", a.measured.read.rules.as_deref())
        .output("--plot", a.measured.plot.as_deref())
        .check()?;
    a.scenario.warn_noop_flags();
    let measured = super::trace::load_measured(&a.measured)?;
    // What the trace shows stands in for the scenario flags not given.
    let inferred = crate::accounting::infer::infer_scenario(&measured);
    let defaults = a.scenario.defaults_from_trace(&inferred);
    let sim = sim::simulate(&a.scenario.request())?;
    let title = format!(
        "{} on {}, TP={}, batch {}, context {}",
        a.scenario.request().model,
        a.scenario.request().system,
        sim.scenario.layout.tp,
        sim.scenario.batch,
        sim.scenario.context
    );
    super::trace::compare_loaded(
        &sim.mean,
        Some(&sim.scenario),
        &a.measured,
        &measured,
        &defaults,
        &title,
        &mut super::output::Stdout,
    )
    .map(|_| ())
}
