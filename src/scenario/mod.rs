//! Plain data describing what is simulated: models, GPUs and systems, scenarios.

pub mod allreduce_rules;
pub mod catalog;
pub mod check;
pub mod cudagraph;
pub mod deployment;
pub mod knobs;
pub mod limits;
pub mod mla_backend;
pub mod model;
pub mod network;
pub mod quantization;
pub mod routing;
pub mod system;
mod validation;

pub use deployment::{Algo, CommPath, Layout, NcclSettings, Proto, Runtime, Scenario};
pub use model::{Family, ModelSpec, WeightFormat};
pub use system::{GpuSpec, SystemSpec};
