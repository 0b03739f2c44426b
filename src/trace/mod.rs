//! Reading torch.profiler (Kineto) traces: the events, ranks, kernel categories and step windows
//! that [`crate::accounting`] turns into the same [`Breakdown`]s the simulator produces. One job
//! per file:
//!
//! - [`scan`]: finds JSON value boundaries in a stream without decoding;
//! - [`format`]: what a trace file is (names a folder listing takes; JSON or gzip by magic bytes);
//! - [`parse`]: the streaming, gzip-aware event reader ([`ParsedTrace`]);
//! - [`rank`]: which rank each file is;
//! - [`classify`]: kernel name → [`Category`] by ordered regex rules from a TOML file;
//! - [`steps`]: where the decode steps are, and their GPU windows;
//!
//! Imports `category` and `error` only.
//!
//! [`Breakdown`]: crate::accounting::Breakdown
//! [`Category`]: crate::category::Category

pub mod classify;
pub(crate) mod error;
pub(crate) mod format;
pub mod model;
pub mod parse;
pub mod rank;
mod scan;
pub mod steps;

pub use error::TraceError;
pub use model::ParsedTrace;
