//! The library's front door: from a scenario request (names, paths and knobs, as the CLI takes
//! them) to a simulated step with its breakdowns and warnings.

use super::{Engine, EngineConfig, Timeline};
use crate::accounting::Breakdown;
use crate::cost::{self, CalibrationProfile, Pricing};
use crate::error::Result;
use crate::spec::catalog;
use crate::spec::{Algo, ModelSpec, NcclSettings, Proto, Runtime, Scenario, SystemSpec};
use crate::workload::memory::{footprint, MemoryFootprint};
use crate::workload::{self, Workload};

/// What a user asks for. `Default` is the bundled default scenario: Kimi-K2.5 on 8x RTX PRO
/// 6000 over PCIe, TP=8, CUDA graphs, NCCL Ring/LL with P2P, batch 32, context 4096.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioRequest {
    pub model: String,
    pub system: String,
    /// Defaults to every GPU of the system.
    pub tp: Option<u32>,
    pub batch: u32,
    pub context: u64,
    pub cuda_graphs: bool,
    pub proto: Proto,
    pub algo: Algo,
    pub p2p: bool,
    pub seed: u64,
    /// Profile name or path; defaults to the system's own.
    pub calibration: Option<String>,
    /// KV-cache element size in bytes.
    pub kv_bytes: f64,
    pub runtime: Runtime,
    /// Overrides the model's number of decoder layers (the reference step runs a few).
    pub layers: Option<usize>,
}

impl Default for ScenarioRequest {
    fn default() -> Self {
        ScenarioRequest {
            model: "kimi-k2.5".into(),
            system: "rtx-pro-6000-8x-pcie".into(),
            tp: None,
            batch: 32,
            context: 4096,
            cuda_graphs: true,
            proto: Proto::Ll,
            algo: Algo::Ring,
            p2p: true,
            seed: 0,
            calibration: None,
            kv_bytes: 2.0,
            runtime: Runtime::Vllm,
            layers: None,
        }
    }
}

impl ScenarioRequest {
    pub fn load(&self) -> Result<(Scenario, CalibrationProfile)> {
        let mut model = ModelSpec::from_file(&catalog::resolve_model(&self.model)?)?;
        if let Some(layers) = self.layers {
            if !(1..=1000).contains(&layers) {
                return Err(crate::Error::Scenario(format!(
                    "--layers {layers} is out of range: expected 1 to 1000"
                )));
            }
            model.num_layers = layers;
        }
        let system = SystemSpec::from_file(
            &catalog::resolve_system(&self.system)?,
            &catalog::gpus_dir(),
        )?;
        let profile_arg = self
            .calibration
            .clone()
            .unwrap_or_else(|| system.default_calibration.clone());
        let profile = CalibrationProfile::from_file(&catalog::resolve_profile(&profile_arg)?)?;
        if !(self.kv_bytes == 1.0 || self.kv_bytes == 2.0) {
            return Err(crate::Error::Scenario(format!(
                "KV-cache element size {} bytes is not supported (expected 1 for FP8 or 2 for BF16)",
                self.kv_bytes
            )));
        }
        let scenario = Scenario {
            tp: self.tp.unwrap_or(system.gpu_count),
            model,
            system,
            batch: self.batch,
            context: self.context,
            cuda_graphs: self.cuda_graphs,
            nccl: NcclSettings {
                proto: self.proto,
                algo: self.algo,
                p2p: self.p2p,
            },
            kv_bytes: self.kv_bytes,
            runtime: self.runtime,
            seed: self.seed,
        };
        scenario.validate()?;
        Ok((scenario, profile))
    }
}

/// A simulated decode step and everything reported about it.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub scenario: Scenario,
    pub profile: CalibrationProfile,
    pub workload: Workload,
    pub pricing: Pricing,
    pub timeline: Timeline,
    pub per_rank: Vec<Breakdown>,
    pub mean: Breakdown,
    pub memory: MemoryFootprint,
    pub warnings: Vec<String>,
}

impl Simulation {
    pub fn step_time_us(&self) -> f64 {
        self.timeline.step_time_us()
    }
    pub fn tokens_per_s(&self) -> f64 {
        self.scenario.batch as f64 / self.step_time_us() * 1e6
    }
}

pub fn engine_config(s: &Scenario, p: &CalibrationProfile) -> EngineConfig {
    EngineConfig {
        ranks: s.tp,
        cuda_graphs: s.cuda_graphs,
        launch: p.launch.clone(),
        variability: p.variability.clone(),
        seed: s.seed,
    }
}

pub fn simulate_loaded(scenario: Scenario, profile: CalibrationProfile) -> Result<Simulation> {
    let workload = workload::build(&scenario);
    simulate_workload(scenario, profile, workload)
}

/// Prices and plays a workload built elsewhere (a speculative draft or verify pass, or several
/// passes in a row) exactly as a plain step is played.
pub fn simulate_workload(
    scenario: Scenario,
    profile: CalibrationProfile,
    workload: Workload,
) -> Result<Simulation> {
    let pricing = cost::price(&workload, &scenario, &profile)?;
    let mut timeline = Timeline::default();
    Engine::new().run(
        &workload,
        &pricing.base_us,
        &engine_config(&scenario, &profile),
        &mut timeline,
    );
    let per_rank = timeline.rank_breakdowns(&workload);
    let mean = Breakdown::mean(&per_rank);
    let memory = footprint(
        &scenario.model,
        scenario.tp as usize,
        scenario.batch as u64,
        scenario.context,
        scenario.kv_bytes,
    );
    let mut warnings = pricing.warnings.clone();
    let capacity = scenario.system.gpu.memory_gb * 1e9;
    if memory.total() > capacity {
        warnings.push(format!(
            "does not fit: {:.1} GB of weights + {:.1} GB of KV cache per GPU exceed the {:.0} GB of a {}",
            memory.weights_bytes / 1e9,
            memory.kv_cache_bytes / 1e9,
            scenario.system.gpu.memory_gb,
            scenario.system.gpu.name
        ));
    }
    Ok(Simulation {
        scenario,
        profile,
        workload,
        pricing,
        timeline,
        per_rank,
        mean,
        memory,
        warnings,
    })
}

pub fn simulate(req: &ScenarioRequest) -> Result<Simulation> {
    let (scenario, profile) = req.load()?;
    simulate_loaded(scenario, profile)
}
