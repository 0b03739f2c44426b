//! decodesim: a decode-step simulator and cost model for LLM inference that holds its
//! predictions against real profiler traces. See ARCHITECTURE.md for the map.

pub mod breakdown;
pub mod category;
