//! decodesim: a decode-step simulator and cost model for LLM inference that holds its
//! predictions against real profiler traces. See ARCHITECTURE.md for the map.
//!
//! # The front
//!
//! What a library user needs is re-exported at the crate root; the modules stay reachable for
//! the rest.
//!
//! - **Simulate** one decode step: [`simulate`] a [`ScenarioRequest`] (names or files of model,
//!   system and [`CalibrationProfile`], parallelism and serving knobs) into a [`Simulation`]
//!   (its [`Timeline`], [`Breakdown`] and memory); [`simulate_loaded`] takes a [`Scenario`] and
//!   profile already loaded.
//! - **Read traces**: [`summarize`] torch.profiler traces into a [`TraceSummary`] (per rank and
//!   overall breakdowns, [`SummaryOptions`]); [`compare`] a predicted breakdown with a
//!   measured one into a [`Comparison`].
//! - **Calibrate**: [`calibrate_dir`] fits a profile to the harness's CSVs ([`DirRequest`]);
//!   [`calibrate`] does it on [`Measurements`] already read; [`calibrate_to_step`] adjusts a
//!   profile to one measured step.
//! - **What-ifs and capacity**: [`spec_decode`] (speculative decoding over draft lengths,
//!   acceptances and batches), [`vary`] (variants of one scenario), [`capacity`] (users that
//!   fit, throughput against concurrency, the cheapest deployment); [`validate`] checks the
//!   simulator against every captured configuration.
//! - **Errors** are values: every function returns [`Result`], whose [`Error`] names the file,
//!   the field and what was expected.
//!
//! ```no_run
//! use decodesim::{simulate, ScenarioRequest};
//!
//! let sim = simulate(&ScenarioRequest::default())?;
//! println!("{:.1} µs per step", sim.timeline.step_time_us());
//! # Ok::<(), decodesim::Error>(())
//! ```

// `!(x > 0.0)` is written on purpose throughout: it is true for NaN, which the "simpler"
// `x <= 0.0` lets through, so a NaN input is refused instead of priced.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod accounting;
pub mod bundle;
pub mod category;
pub mod error;
pub mod files;
pub mod scenario;
pub mod workload;

pub mod calibrate;
pub mod capacity;
pub mod cli;
pub mod cost;
pub mod measurements;
pub mod names;
pub mod report;
pub mod rng;
pub mod sim;
pub mod trace;
pub mod units;
pub mod validate;
pub mod whatif;

// The front: the API a library user needs, at the crate root.
pub use accounting::{compare, summarize, Breakdown, Comparison, SummaryOptions, TraceSummary};
pub use calibrate::from_trace::calibrate_to_step;
pub use calibrate::{calibrate, calibrate_dir, CalibrationResult, DirRequest, FitOptions};
pub use capacity::{capacity, Capacity, CapacityRequest};
pub use cost::CalibrationProfile;
pub use error::{Error, Result};
pub use measurements::Measurements;
pub use scenario::{ModelSpec, Scenario, SystemSpec};
pub use sim::{simulate, simulate_loaded, ScenarioRequest, Simulation, Timeline};
pub use validate::{validate, ValidateOptions, Validation};
pub use whatif::spec_decode::{run as spec_decode, SpecDecodeRequest, SpecDecodeStudy};
pub use whatif::vary::{run as vary, VaryRequest, VaryStudy};
