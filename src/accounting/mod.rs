//! Where the two halves meet: time per category, by one rule, for simulated timelines and
//! measured traces alike, and the comparison of the two.
//!
//! - [`attribute`]: the sweep line that gives every instant of a step to one category;
//! - [`breakdown`]: [`Breakdown`], a step's time by category;
//! - [`align`]: communication wait vs transfer by aligning collectives across ranks;
//! - [`summary`]: a parsed trace's steps turned into per-rank and overall summaries;
//! - [`compare`]: predicted vs measured, category by category;
//! - [`infer`]: what a trace shows of its scenario (ranks, layers, batch, context), and the
//!   check of a scenario against it.
//!
//! Imports `trace` (what was read), `category` and the plain data of `spec`; never `sim`, `cost`
//! or `report`.

pub mod align;
pub(crate) mod attribute;
pub mod breakdown;
pub mod compare;
pub mod infer;
pub mod summary;

pub(crate) use attribute::{attribute, Interval};
pub use breakdown::{Breakdown, BreakdownEntry};
pub use compare::{compare, Comparison};
pub use summary::{summarize, SummaryOptions, TraceSummary};
