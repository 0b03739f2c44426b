//! Every output format lives here; computation modules never print.

pub mod calibration;
pub mod capacity;
pub mod chrome;
pub mod comparison;
pub mod intervals;
pub mod plot;
pub mod simulation;
pub mod sweep;
pub mod table;
pub(crate) mod trace_summary;

pub mod validation;
pub mod whatif;

// Number formatting lives below every module (spec and sim warnings use it too).
pub use crate::units;

/// Output formats shared by the subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}
