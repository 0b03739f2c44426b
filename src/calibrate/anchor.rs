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
use crate::cost::profile::MAX_US;
use crate::cost::CalibrationProfile;
use crate::error::Result;
use crate::scenario::limits::BUS_BW_FLOOR_GBPS;
use crate::scenario::Scenario;
use crate::sim::{simulate_loaded, Simulation};
use crate::workload::CostFamily;
use std::collections::BTreeMap;

/// The widest time multiplier a family (or the collectives) may take: the range the profile
/// loader accepts for `aiconfigurator.scales` (`cost::profile::TIME_SCALE`), so a profile this
/// writes always loads. A measured time is written as measured within it; the step-error limit
/// (`calibrate::from_trace`), not a clamp, says when the scenario does not describe the trace.
const MIN_RATIO: f64 = crate::cost::profile::TIME_SCALE[0];
const MAX_RATIO: f64 = crate::cost::profile::TIME_SCALE[1];
/// A measured table's prices stand within this factor of a trace's time for the family (its own
/// interpolation error and the in-step effects a single step shows, cache and overlap); beyond
/// it the trace measures other work than the table's (another kernel, more work per call).
const TABLE_TRUST: f64 = 2.0;
/// Beyond this multiplier (or below its inverse) the result warns and says what may cause it.
const WARN_RATIO: f64 = 10.0;

#[derive(Debug, Clone)]
pub struct AnchorResult {
    pub profile: CalibrationProfile,
    /// Cumulative factor applied per kernel family / "collectives" / "launch".
    pub factors: BTreeMap<String, f64>,
    pub before: Simulation,
    pub after: Simulation,
    /// Families whose time the trace puts beyond 10x (or below 1/10) of the profile's, each with
    /// what may explain it; and any multiplier held at the range a profile may state.
    pub warnings: Vec<String>,
    /// What the report says besides (the families whose measured table kept its prices).
    pub notes: Vec<String>,
}

fn ratio(measured: f64, predicted: f64) -> f64 {
    if measured > 0.0 && predicted > 0.0 {
        (measured / predicted).clamp(MIN_RATIO, MAX_RATIO)
    } else {
        1.0
    }
}

/// `k` scaled so that its law prices the family's ops of the step (`ops`) `r` times as long:
/// the fixed cost times `r` and the efficiencies divided by it. An efficiency that would fall
/// below the lowest a profile may state (`scenario::limits::EFFICIENCY`) is held there and the
/// fixed cost takes the rest of the step's time, so the family's time in the anchor step is
/// still `r` times the law's.
fn scale_law(
    k: &mut crate::cost::profile::KernelParams,
    r: f64,
    ops: &[&crate::workload::Op],
    gpu: &crate::scenario::GpuSpec,
) {
    use crate::cost::kernel::kernel_us;
    let floor = crate::scenario::limits::EFFICIENCY.min;
    let before: f64 = ops.iter().map(|op| kernel_us(op, k, gpu)).sum();
    let mut next = k.clone();
    next.fixed_us = k.fixed_us * r;
    // No efficiency above the hardware's peak: a faster trace than that is the fixed cost's to
    // explain.
    next.mem_efficiency = (k.mem_efficiency / r).clamp(floor, 1.0);
    next.compute_efficiency = (k.compute_efficiency / r).clamp(floor, 1.0);
    let held = next.mem_efficiency != k.mem_efficiency / r
        || next.compute_efficiency != k.compute_efficiency / r;
    if held && r > 1.0 && !ops.is_empty() {
        let after: f64 = ops.iter().map(|op| kernel_us(op, &next, gpu)).sum();
        let short = r * before - after;
        if short > 0.0 {
            next.fixed_us += short / ops.len() as f64;
        }
    }
    next.fixed_us = next.fixed_us.min(crate::cost::profile::MAX_US);
    *k = next;
}

/// Why a family's time in a trace may be far from the profile's (`WARN_RATIO`).
fn why_far(family: &str, r: f64) -> String {
    let slower = r > 1.0;
    let specific = match (family, slower) {
        ("sampling", true) => "the traced sampler does more than a greedy argmax over the logits (top-k/top-p sorting, penalties, logprobs, structured-output masks, a host synchronisation inside the kernel's time), ",
        (f, true) if f.starts_with("moe") => "the traced experts run a slower kernel or routing than the table's (another quantization, an unfused path, skewed routing), ",
        ("collectives", true) => "the traced collectives wait for a slower path than the profile's (P2P off, another NCCL protocol, a PCIe switch shared with other traffic), ",
        _ => "",
    };
    let far = if slower { "beyond 10x" } else { "below 1/10" };
    format!(
        "{family}: the trace's time is {r:.3}x the profile's, written as measured. A factor {far} usually means {specific}the kernel rules (data/rules/kernels.toml) file other kernels under this category, or the scenario (batch, context, model, layers, --runtime) is not the traced one; compare `decodesim trace summarize` with `decodesim simulate` category by category"
    )
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
        scale_families(&mut p, &mut factors, &sim, measured, scenario);
        scale_collectives(&mut p, &mut factors, &sim, measured, scenario);
        fit_launch(&mut p, &mut factors, &sim, measured, scenario);
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
    let notes = table_notes(&p, &sim, &factors);
    let warnings = factor_warnings(&p, &factors);
    Ok(AnchorResult {
        profile: p,
        factors,
        before,
        after: sim,
        warnings,
        notes,
    })
}

/// One pass over the kernel families: each family's law (and measured table, AIConfigurator
/// scale) scaled by the measured / predicted ratio of the categories it spends its time in.
fn scale_families(
    p: &mut CalibrationProfile,
    factors: &mut BTreeMap<String, f64>,
    sim: &Simulation,
    measured: &Breakdown,
    scenario: &Scenario,
) {
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
        // The family's multiplier so far, and this pass's within the range a profile
        // may state.
        let cum = factors.get(&fam.to_string()).copied().unwrap_or(1.0);
        let r = (cum * r).clamp(MIN_RATIO, MAX_RATIO) / cum;
        let ops: Vec<&crate::workload::Op> = sim
            .workload
            .ops
            .iter()
            .filter(|op| op.family == fam)
            .collect();
        if let Some(k) = p.kernels.get_mut(&fam) {
            scale_law(k, r, &ops, &scenario.system.gpu);
        }
        factors.insert(fam.to_string(), cum * r);
        // A measurement table is a measurement of every shape it holds: within a factor of
        // TABLE_TRUST of the trace it keeps its prices (the factor then applies to the shapes
        // it lacks, through the law); beyond, the trace runs other work than the table
        // measured, and the family's time is written as the trace measured it.
        if p.table.is_some() {
            let f = cum * r;
            if (1.0 / TABLE_TRUST..=TABLE_TRUST).contains(&f) {
                p.table_scales.remove(&fam.to_string());
            } else {
                p.table_scales.insert(fam.to_string(), f);
            }
        }
        if let Some(a) = p.aiconfigurator.as_mut() {
            *a.scales.entry(fam.to_string()).or_insert(1.0) *= r;
        }
    }
}

/// One pass over the collectives: their laws scaled on the transfer time.
fn scale_collectives(
    p: &mut CalibrationProfile,
    factors: &mut BTreeMap<String, f64>,
    sim: &Simulation,
    measured: &Breakdown,
    scenario: &Scenario,
) {
    let pred = &sim.mean;
    let cum = factors.get("collectives").copied().unwrap_or(1.0);
    let rc = (cum * ratio(measured.comm_transfer_us, pred.comm_transfer_us))
        .clamp(MIN_RATIO, MAX_RATIO)
        / cum;
    let max_bw = scenario.system.gpu.memory_bandwidth_gbps;
    for c in &mut p.collectives {
        c.base_us = (c.base_us * rc).min(MAX_US);
        c.hop_us = (c.hop_us * rc).min(MAX_US);
        c.bus_bw_gbps = (c.bus_bw_gbps / rc).clamp(BUS_BW_FLOOR_GBPS, max_bw.max(c.bus_bw_gbps));
    }
    factors.insert("collectives".into(), cum * rc);
    if let Some(a) = p.aiconfigurator.as_mut() {
        *a.scales.entry("collectives".into()).or_insert(1.0) *= rc;
    }
}

/// One pass over the launch terms: idle time to the graph's first-collective stall (or the
/// eager launch gap), waiting beyond jitter to the ranks' launch skew.
fn fit_launch(
    p: &mut CalibrationProfile,
    factors: &mut BTreeMap<String, f64>,
    sim: &Simulation,
    measured: &Breakdown,
    scenario: &Scenario,
) {
    let pred = &sim.mean;
    // Idle under CUDA graphs is mostly the stall before the replay's first collective;
    // eagerly it is the launch gap between kernels.
    let idle_gap = measured.time(Category::Idle) - pred.time(Category::Idle);
    if scenario.cuda_graphs {
        p.launch.graph_first_collective_us =
            (p.launch.graph_first_collective_us + idle_gap).clamp(0.0, MAX_US);
        *factors
            .entry("graph_first_collective_us".into())
            .or_insert(0.0) = p.launch.graph_first_collective_us;
    } else {
        let ri = ratio(measured.time(Category::Idle), pred.time(Category::Idle));
        p.launch.eager_kernel_gap_us = (p.launch.eager_kernel_gap_us * ri).min(MAX_US);
        *factors.entry("launch".into()).or_insert(1.0) *= ri;
    }
    // Waiting beyond what jitter explains is launch skew between ranks: with starts drawn
    // uniformly in [0, S], a rank waits S·(n/(n+1) − 1/2) on average at the first collective.
    let n = scenario.layout.tp as f64;
    if n > 1.0 {
        let per_skew = n / (n + 1.0) - 0.5;
        let missing = measured.comm_wait_us - pred.comm_wait_us;
        p.variability.launch_skew_us =
            (p.variability.launch_skew_us + missing / per_skew).clamp(0.0, MAX_US);
        *factors.entry("launch_skew_us".into()).or_insert(0.0) = p.variability.launch_skew_us;
    }
}

/// The families whose measured table kept its prices in the anchored step, as a note.
fn table_notes(
    p: &CalibrationProfile,
    sim: &Simulation,
    factors: &BTreeMap<String, f64>,
) -> Vec<String> {
    // Families the measured table prices in this step.
    let in_table: std::collections::BTreeSet<String> = match &p.table {
        Some(t) => sim
            .workload
            .ops
            .iter()
            .filter(|op| op.measure.as_ref().is_some_and(|m| t.price(m).is_some()))
            .map(|op| op.family.to_string())
            .collect(),
        None => Default::default(),
    };
    let kept: Vec<String> = factors
        .iter()
        .filter(|(k, f)| {
            in_table.contains(*k) && (**f - 1.0).abs() > 1e-9 && !p.table_scales.contains_key(*k)
        })
        .map(|(k, _)| k.clone())
        .collect();
    match (&p.table, kept.is_empty()) {
        (Some(t), false) => vec![format!(
            "the measured table {} keeps its prices for {} (the trace is within {TABLE_TRUST}x of them): their factors apply to the shapes the table does not hold",
            crate::units::path(&t.path),
            kept.join(", ")
        )],
        _ => Vec::new(),
    }
}

/// The time multipliers held at the range a profile may state, or beyond `WARN_RATIO`.
fn factor_warnings(p: &CalibrationProfile, factors: &BTreeMap<String, f64>) -> Vec<String> {
    let mut warnings = Vec::new();
    for (key, &f) in factors {
        let is_scale = p.kernels.keys().any(|k| k.to_string() == *key)
            || key == "collectives"
            || p.table_scales.contains_key(key)
            || p.aiconfigurator
                .as_ref()
                .is_some_and(|a| a.scales.contains_key(key));
        if !is_scale || key.ends_with("_us") || key == "launch" {
            continue;
        }
        if f >= MAX_RATIO || f <= MIN_RATIO {
            warnings.push(format!(
                "{key}: the trace asks for more than {}x (or less than 1/{}); held at the most a profile may state, so this category's time is not reproduced",
                MAX_RATIO, MAX_RATIO
            ));
        }
        if !(1.0 / WARN_RATIO..=WARN_RATIO).contains(&f) {
            warnings.push(why_far(key, f));
        }
    }
    warnings
}
