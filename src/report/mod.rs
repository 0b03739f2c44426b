//! Every output format lives here; computation modules never print.

pub(crate) mod calibration;
pub mod capacity;
pub mod chrome;
pub(crate) mod comparison;
pub(crate) mod intervals;
pub mod plot;
pub mod serving;
pub(crate) mod simulation;
pub mod sweep;
pub(crate) mod table;
pub(crate) mod trace_summary;

pub(crate) mod validation;
pub(crate) mod whatif;

// Number formatting lives below every module (spec and sim warnings use it too).
pub(crate) use crate::units;

/// Output formats shared by the subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}
