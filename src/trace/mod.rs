//! Reading torch.profiler (Kineto) traces and turning them into the same [`Breakdown`]s the
//! simulator produces. One job per file:
//!
//! - [`scan`]: finds JSON value boundaries in a stream without decoding;
//! - [`parse`]: the streaming, gzip-aware event reader ([`ParsedTrace`]);
//! - [`rank`]: which rank each file is;
//! - [`classify`]: kernel name → [`Category`] by ordered regex rules from a TOML file;
//! - [`steps`]: where the decode steps are, and their GPU windows;
//! - [`align`]: communication wait vs transfer by aligning collectives across ranks;
//! - [`summary`]: per-rank and overall summaries built on [`crate::breakdown::attribute`].
//!
//! [`Breakdown`]: crate::breakdown::Breakdown
//! [`Category`]: crate::category::Category

pub mod align;
pub mod classify;
pub mod error;
pub mod model;
pub mod parse;
pub mod rank;
pub mod scan;
pub mod steps;
pub mod summary;

pub use error::TraceError;
pub use model::ParsedTrace;
pub use summary::{summarize, SummaryOptions, TraceSummary};
