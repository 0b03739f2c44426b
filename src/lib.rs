//! decodesim: a decode-step simulator and cost model for LLM inference that holds its
//! predictions against real profiler traces. See ARCHITECTURE.md for the map.

pub mod accounting;
pub mod bundle;
pub mod category;
pub mod error;
pub mod files;
pub mod scenario;
pub mod workload;

pub use error::{Error, Result};
pub mod calibrate;
pub mod capacity;
pub mod cli;
pub mod cost;
pub mod measurements;
pub mod names;
pub mod report;
pub mod sim;
pub mod trace;
pub mod units;
pub mod validate;
pub mod whatif;
