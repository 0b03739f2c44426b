//! Playing a decode step: the event engine over per-rank streams, the timeline it produces,
//! and `simulate`, the library's front door (scenario → workload → prices → timeline).

mod engine;
pub mod fast;
pub mod memory;
pub mod pipeline;
pub mod rules;
pub mod serving;
pub mod simulate;
pub mod timeline;
pub(crate) mod work;

pub use engine::{Engine, EngineConfig};
pub(crate) use simulate::simulate_with_memory_utilization;
pub use simulate::{
    engine_config, max_fitting_batch, memory_check, simulate, simulate_loaded, simulate_workload,
    MemoryFit, ScenarioRequest, Simulation,
};
pub use timeline::{KernelRecord, Timeline};
