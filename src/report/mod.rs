//! Every output format lives here; computation modules never print.

pub mod calibration;
pub mod chrome;
pub mod comparison;
pub mod plot;
pub mod simulation;
pub mod sweep;
pub mod table;
pub mod trace_summary;
pub mod units;
pub mod validation;
pub mod whatif;

/// Output formats shared by the subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}
