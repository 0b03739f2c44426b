//! The library's front door: from a scenario request (names, paths and knobs, as the CLI takes
//! them) to a simulated step with its breakdowns and warnings.

use super::{Engine, EngineConfig, Timeline};
use crate::accounting::Breakdown;
use crate::cost::{self, CalibrationProfile, Pricing};
use crate::error::{Error, Result};
use crate::scenario::catalog;
use crate::scenario::deployment::DEFAULT_GPU_MEMORY_UTILIZATION;
use crate::scenario::{ModelSpec, NcclSettings, Scenario, SystemSpec};
use crate::workload::memory::MemoryFootprint;
use crate::workload::{self, Workload};

/// What a user asks for: the settings of [`crate::scenario::knobs`] (defined there, with the
/// table that parses, shows and applies each of them).
pub use crate::scenario::knobs::ScenarioRequest;

impl ScenarioRequest {
    pub fn load(&self) -> Result<(Scenario, CalibrationProfile)> {
        let model = self.load_model()?;
        let system = SystemSpec::from_file(
            &catalog::resolve_system(&self.system)?,
            &catalog::gpus_dir(),
        )?;
        let profile_arg = self
            .calibration
            .clone()
            .unwrap_or_else(|| system.default_calibration.clone());
        let profile = CalibrationProfile::from_file(&catalog::resolve_profile(&profile_arg)?)?;
        let cuda_graph_sizes = std::sync::Arc::new(crate::scenario::cudagraph::CaptureSizes::load(
            &system.gpu.compute_capability,
        )?);
        let mla_backend = std::sync::Arc::new(crate::scenario::mla_backend::MlaBackend::load(
            &system.gpu.compute_capability,
        )?);
        let allreduce_rules = std::sync::Arc::new(
            crate::scenario::allreduce_rules::AllreduceRules::load(&system.gpu.compute_capability)?,
        );
        let mut layout = self.layout(self.tp_on(&system)?);
        // --dp implies vLLM's --enable-expert-parallel: the EP group is DP × TP.
        if layout.dp_size() > 1 && layout.ep.is_none() {
            layout.ep = Some(layout.ranks());
        }
        let scenario = Scenario {
            cuda_graph_sizes,
            mla_backend,
            allreduce_rules,
            layout,
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
            gpu_memory_utilization: DEFAULT_GPU_MEMORY_UTILIZATION,
            routing: crate::scenario::routing::Routing::for_request(
                self.routing.as_ref(),
                profile.factors.routing_alpha,
                self.runtime,
            ),
            comm: self.comm,
        };
        scenario.validate()?;
        Ok((scenario, profile))
    }

    /// The model, with `--layers` in its place where given.
    fn load_model(&self) -> Result<ModelSpec> {
        let mut model = ModelSpec::from_file(&catalog::resolve_model(&self.model)?)?;
        if let Some(layers) = self.layers {
            let range = crate::scenario::model::limits::LAYERS;
            if !range.contains(&(layers as u64)) {
                return Err(crate::Error::ScenarioRange {
                    flag: "--layers",
                    value: layers.to_string(),
                    expected: format!(
                        "expected {} layers",
                        crate::scenario::check::int_range_text(&range)
                    ),
                });
            }
            model.num_layers = layers;
        }
        Ok(model)
    }

    /// The TP size on `system`: `--tp`, else the system's GPUs shared out over the
    /// data-parallel ranks and the pipeline stages; a share that does not come out whole is
    /// the user's to choose.
    fn tp_on(&self, system: &SystemSpec) -> Result<u32> {
        let Some(tp) = self.tp else {
            let (dp, pp) = (self.dp_size(), self.pp_size());
            let split = dp * pp;
            // More ranks than GPUs: one GPU each, for the layout check to refuse by name.
            if split >= system.gpu_count {
                return Ok(1);
            }
            if !system.gpu_count.is_multiple_of(split) {
                return Err(Error::FlagUse {
                    flag: "--tp",
                    problem: format!(
                        "not given, and --dp {dp} × --pp {pp} = {split} does not divide the {} GPUs of system '{}' into whole TP groups: give --tp N (--dp × --pp × --tp at most {})",
                        system.gpu_count, system.name, system.gpu_count
                    ),
                });
            }
            return Ok(system.gpu_count / split);
        };
        Ok(tp)
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
    /// The footprint held against the memory vLLM may use.
    pub memory_fit: MemoryFit,
    pub warnings: Vec<String>,
}

/// Whether the rank's memory fits in the share of GPU memory vLLM may use, as `capacity`
/// accounts it (`sim::memory::rank_memory`: weights, activation peak, CUDA graphs and
/// buffers, then the KV cache in whole blocks, sharded by `--dcp`, of the largest DP rank's
/// sequences, on the pipeline stage with the fewest blocks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryFit {
    /// Weights, other terms and KV cache per GPU.
    needed_bytes: f64,
    /// The GPU's memory as the driver reports it (`GpuSpec::memory_total_bytes`).
    pub(crate) capacity_bytes: f64,
    pub(crate) gpu_memory_utilization: f64,
    /// The KV blocks the sequences take and the blocks left for them.
    pub blocks_needed: u64,
    pub blocks_available: u64,
    pub(crate) dcp: u32,
    pub(crate) sequences: u64,
}

impl MemoryFit {
    /// The memory of one rank of `s` as vLLM accounts it, and its footprint.
    pub fn of(s: &Scenario, p: &CalibrationProfile) -> (MemoryFootprint, Self) {
        use super::memory::{rank_memory, MemoryOptions};
        let r = rank_memory(s, p, &MemoryOptions::of_scenario(s));
        let memory = MemoryFootprint {
            weights_bytes: r.weights_bytes,
            kv_cache_bytes: r.kv_cache_bytes,
            other_bytes: r.other_bytes,
        };
        let fit = MemoryFit {
            needed_bytes: memory.total(),
            capacity_bytes: s.system.gpu.memory_total_bytes(),
            gpu_memory_utilization: s.gpu_memory_utilization,
            blocks_needed: r.blocks_needed,
            blocks_available: r.blocks_available,
            dcp: r.dcp,
            sequences: r.sequences,
        };
        (memory, fit)
    }
    /// What vLLM may use: capacity × gpu_memory_utilization.
    pub(crate) fn usable_bytes(&self) -> f64 {
        self.capacity_bytes * self.gpu_memory_utilization
    }
    pub fn fits(&self) -> bool {
        self.blocks_needed <= self.blocks_available
    }
    /// One line a person reads: "needs 81.2 GiB per GPU (...), has 80.5 GiB (... 0.90 of the
    /// 89.4 GiB of each ...)".
    pub(crate) fn describe(&self, memory: &MemoryFootprint, gpu: &str) -> String {
        use crate::units::bytes;
        format!(
            "needs {} per GPU (weights {} + activations, CUDA graphs and buffers {} + KV cache {} of {} sequence(s){}), has {} (--gpu-memory-utilization {:.2} of the {} of each {gpu})",
            bytes(self.needed_bytes),
            bytes(memory.weights_bytes),
            bytes(memory.other_bytes),
            bytes(memory.kv_cache_bytes),
            self.sequences,
            if self.dcp > 1 {
                format!(", sharded over DCP={}", self.dcp)
            } else {
                String::new()
            },
            bytes(self.usable_bytes()),
            self.gpu_memory_utilization,
            bytes(self.capacity_bytes),
        )
    }
}

/// The footprint per GPU of `s` under `p` (as `capacity` accounts it) and how it fits: the
/// memory check every report of a step makes.
pub fn memory_check(scenario: &Scenario, p: &CalibrationProfile) -> (MemoryFootprint, MemoryFit) {
    MemoryFit::of(scenario, p)
}

/// The largest batch of `s` at most `up_to` whose memory fits (None: not even batch 1); the
/// footprint grows with the batch, so a bisection finds it.
pub fn max_fitting_batch(s: &Scenario, p: &CalibrationProfile, up_to: u32) -> Option<u32> {
    let fits = |b: u32| {
        let mut t = s.clone();
        t.batch = b;
        memory_check(&t, p).1.fits()
    };
    if up_to == 0 || !fits(1) {
        return None;
    }
    let (mut lo, mut hi) = (1u32, up_to);
    if fits(hi) {
        return Some(hi);
    }
    // fits(lo), not fits(hi).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
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
        ranks: s.ranks(),
        tp: s.layout.tp,
        cuda_graphs: s.cuda_graphs,
        eager_ops: None,
        launch: p.launch.clone(),
        variability: p.variability.clone(),
        seed: s.seed,
        step_overhead_us: p.factors.step_overhead_us,
    }
}

pub fn simulate_loaded(scenario: Scenario, profile: CalibrationProfile) -> Result<Simulation> {
    if scenario.layout.pp_size() > 1 {
        return super::pipeline::simulate(scenario, profile);
    }
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
    finish(scenario, profile, workload, pricing, timeline)
}

/// A played step's breakdowns, memory (the most loaded pipeline stage's rank under `--pp`)
/// and warnings.
pub(crate) fn finish(
    scenario: Scenario,
    profile: CalibrationProfile,
    workload: Workload,
    pricing: Pricing,
    timeline: Timeline,
) -> Result<Simulation> {
    let per_rank = timeline.rank_breakdowns(&workload);
    let mean = Breakdown::mean(&per_rank);
    let (memory, memory_fit) = memory_check(&scenario, &profile);
    let mut warnings = pricing.warnings.clone();
    // The tokens one rank runs: under data-parallel attention its DP rank's share.
    let pad = scenario.rank_padding(1, crate::scenario::cudagraph::PadRule::Decode);
    if scenario.cuda_graphs && !pad.captured {
        warnings.push(format!(
            "CUDA graphs: {} tokens are above the largest captured size {} ({}): vLLM runs this step without a full CUDA graph and does not pad it; decodesim still prices its launches as graph replays (pass --cuda-graphs off for eager launches)",
            pad.tokens,
            scenario.cuda_graph_sizes.max,
            crate::units::path(&scenario.cuda_graph_sizes.path)
        ));
    }
    // A routing histogram that cannot tell the concentration says so, with its interval.
    if let Some(moe) = &scenario.model.moe {
        if let Some(w) =
            workload::routing::histogram_fit(&scenario.routing, moe.n_routed_experts, moe.top_k)
                .and_then(|f| f.warning())
        {
            warnings.push(w);
        }
    }
    if !memory_fit.fits() {
        warnings.insert(
            0,
            format!(
                "does not fit: {}",
                memory_fit.describe(&memory, &scenario.system.gpu.name)
            ),
        );
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
        memory_fit,
        warnings,
    })
}

pub fn simulate(req: &ScenarioRequest) -> Result<Simulation> {
    let (scenario, profile) = req.load()?;
    simulate_loaded(scenario, profile)
}

/// [`simulate`] with the memory check held against `gpu_memory_utilization` instead of vLLM's
/// default.
pub(crate) fn simulate_with_memory_utilization(
    req: &ScenarioRequest,
    gpu_memory_utilization: f64,
) -> Result<Simulation> {
    let (mut scenario, profile) = req.load()?;
    scenario.gpu_memory_utilization = gpu_memory_utilization;
    scenario.validate()?;
    simulate_loaded(scenario, profile)
}
