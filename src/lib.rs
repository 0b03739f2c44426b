//! decodesim: a decode-step simulator and cost model for LLM inference that holds its
//! predictions against real profiler traces. See ARCHITECTURE.md for the map.

pub mod breakdown;
pub mod category;
pub mod error;
pub mod spec;
pub mod workload;

pub use error::{Error, Result};
pub mod calibrate;
pub mod cli;
pub mod compare;
pub mod cost;
pub mod report;
pub mod sim;
pub mod simulation;
pub mod trace;
pub mod validate;
