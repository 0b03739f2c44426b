//! Single-anchor calibration: scale a profile so the simulator reproduces one measured step,
//! category by category, then use it to predict other batch sizes, contexts and settings.
//!
//! For each compute category the ratio measured / predicted busy time is applied to every
//! kernel family in proportion to the time that family spends in that category (a family's
//! fixed cost is multiplied and its efficiencies divided by the ratio, which scales its
//! durations by exactly that ratio). Collectives are scaled on their transfer time; waiting
//! beyond what jitter explains sets the ranks' launch skew; idle time sets the stall before a
//! graph replay's first collective (eagerly: the per-kernel launch gap). Three passes, because
//! each adjustment moves the waits and gaps of the others. Keys of `factors` ending in `_us`
//! hold the value set, the others a time multiplier.

use crate::accounting::Breakdown;
use crate::category::Category;
use crate::cost::CalibrationProfile;
use crate::error::Result;
use crate::scenario::Scenario;
use crate::sim::{simulate_loaded, Simulation};
use crate::workload::CostFamily;
use std::collections::BTreeMap;

/// Ratios are clamped: a factor outside this range means the scenario does not describe the
/// trace, and a wild profile would hide that.
const MIN_RATIO: f64 = 0.2;
const MAX_RATIO: f64 = 5.0;

#[derive(Debug, Clone)]
pub struct AnchorResult {
    pub profile: CalibrationProfile,
    /// Cumulative factor applied per kernel family / "collectives" / "launch".
    pub factors: BTreeMap<String, f64>,
    pub before: Simulation,
    pub after: Simulation,
}

fn ratio(measured: f64, predicted: f64) -> f64 {
    if measured > 0.0 && predicted > 0.0 {
        (measured / predicted).clamp(MIN_RATIO, MAX_RATIO)
    } else {
        1.0
    }
}

pub fn fit_to_step(
    scenario: &Scenario,
    profile: &CalibrationProfile,
    measured: &Breakdown,
    anchor_name: &str,
) -> Result<AnchorResult> {
    let mut p = profile.clone();
    let before = simulate_loaded(scenario.clone(), p.clone())?;
    let mut factors: BTreeMap<String, f64> = BTreeMap::new();
    let mut sim = before.clone();
    for _ in 0..3 {
        let pred = &sim.mean;
        // Time each family spends in each category, from the base costs.
        let mut fam_cat: BTreeMap<CostFamily, [f64; Category::COUNT]> = BTreeMap::new();
        for (op, &t) in sim.workload.ops.iter().zip(&sim.pricing.base_us) {
            if op.family.is_collective() || op.family.is_sync() {
                continue;
            }
            fam_cat.entry(op.family).or_insert([0.0; Category::COUNT])[op.category.index()] += t;
        }
        for (fam, per_cat) in fam_cat {
            let total: f64 = per_cat.iter().sum();
            if total <= 0.0 {
                continue;
            }
            let r: f64 = Category::ALL
                .iter()
                .map(|c| {
                    let i = c.index();
                    per_cat[i] / total * ratio(measured.busy_us[i], pred.busy_us[i])
                })
                .sum();
            if let Some(k) = p.kernels.get_mut(&fam) {
                k.fixed_us *= r;
                // No efficiency above the hardware's peak: a faster trace than that is the
                // fixed cost's to explain.
                k.mem_efficiency = (k.mem_efficiency / r).min(1.0);
                k.compute_efficiency = (k.compute_efficiency / r).min(1.0);
                *factors.entry(fam.to_string()).or_insert(1.0) *= r;
            }
            if let Some(a) = p.aiconfigurator.as_mut() {
                *a.scales.entry(fam.to_string()).or_insert(1.0) *= r;
            }
        }
        let rc = ratio(measured.comm_transfer_us, pred.comm_transfer_us);
        for c in &mut p.collectives {
            c.base_us *= rc;
            c.hop_us *= rc;
            c.bus_bw_gbps /= rc;
        }
        *factors.entry("collectives".into()).or_insert(1.0) *= rc;
        if let Some(a) = p.aiconfigurator.as_mut() {
            *a.scales.entry("collectives".into()).or_insert(1.0) *= rc;
        }
        // Idle under CUDA graphs is mostly the stall before the replay's first collective;
        // eagerly it is the launch gap between kernels.
        let idle_gap = measured.time(Category::Idle) - pred.time(Category::Idle);
        if scenario.cuda_graphs {
            p.launch.graph_first_collective_us =
                (p.launch.graph_first_collective_us + idle_gap).max(0.0);
            *factors
                .entry("graph_first_collective_us".into())
                .or_insert(0.0) = p.launch.graph_first_collective_us;
        } else {
            let ri = ratio(measured.time(Category::Idle), pred.time(Category::Idle));
            p.launch.eager_kernel_gap_us *= ri;
            *factors.entry("launch".into()).or_insert(1.0) *= ri;
        }
        // Waiting beyond what jitter explains is launch skew between ranks: with starts drawn
        // uniformly in [0, S], a rank waits S·(n/(n+1) − 1/2) on average at the first collective.
        let n = scenario.tp as f64;
        if n > 1.0 {
            let per_skew = n / (n + 1.0) - 0.5;
            let missing = measured.comm_wait_us - pred.comm_wait_us;
            p.variability.launch_skew_us =
                (p.variability.launch_skew_us + missing / per_skew).max(0.0);
            *factors.entry("launch_skew_us".into()).or_insert(0.0) = p.variability.launch_skew_us;
        }
        sim = simulate_loaded(scenario.clone(), p.clone())?;
    }
    p.profile.name = format!("{}+anchor", profile.profile.name);
    p.profile.description = format!(
        "{} adjusted to reproduce the trace {anchor_name}",
        profile.profile.description
    );
    p.profile.method = format!(
        "{}; then single-anchor adjustment (decodesim calibrate --from-trace) to {anchor_name} at batch {} context {}",
        profile.profile.method, scenario.batch, scenario.context
    );
    p.profile.provenance = format!(
        "per-category factors fitted to one measured step ({anchor_name}); base: {}",
        profile.profile.provenance
    );
    Ok(AnchorResult {
        profile: p,
        factors,
        before,
        after: sim,
    })
}
