//! Launch costs, launch skew and kernel jitter from the harness's launch, graph-overhead,
//! launch-skew and kernel tables.

use super::regression::{median, weighted_least_squares};
use crate::cost::profile::{CalibrationProfile, KernelParams, LaunchParams, Variability};
use crate::measurements::{LaunchMode, Measurements};

/// total = launch + kernels × per-kernel cost for one mode (chains of tiny kernels).
fn launch_fit(m: &Measurements, mode: LaunchMode) -> Option<(f64, f64)> {
    let pts: Vec<_> = m.launch.iter().filter(|l| l.mode == mode).collect();
    let x: Vec<Vec<f64>> = pts.iter().map(|l| vec![1.0, l.kernels]).collect();
    let y: Vec<f64> = pts.iter().map(|l| l.total_us).collect();
    let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
    weighted_least_squares(&x, &y, &w).map(|f| (f.coef[0].max(0.0), f.coef[1].max(0.0)))
}

/// Launch parameters: measured where launch.csv and graph_overheads.csv say, else the
/// fallback's. `elementwise` is the fitted smallest-kernel law, whose fixed cost the kernel
/// medians already hold.
pub(crate) fn launch_params(
    m: &Measurements,
    fallback: &CalibrationProfile,
    elementwise: Option<&KernelParams>,
) -> LaunchParams {
    let graph = launch_fit(m, LaunchMode::Graph);
    let eager = launch_fit(m, LaunchMode::Eager);
    let stall = first_collective_stall(m);
    // Kernel medians are per-call times of back-to-back in-graph replays, so they already hold
    // the kernel-to-kernel gap; only the part of the per-kernel chain cost beyond the smallest
    // measured kernel's fixed cost is left to the engine's gap.
    let elementwise_fixed = elementwise.map(|k| k.fixed_us).unwrap_or(0.0);
    let f = &fallback.launch;
    LaunchParams {
        graph_launch_us: graph.map(|g| g.0).unwrap_or(f.graph_launch_us),
        graph_kernel_gap_us: graph
            .map(|g| (g.1 - elementwise_fixed).max(0.0))
            .unwrap_or(f.graph_kernel_gap_us),
        eager_launch_us: eager.map(|e| e.1).unwrap_or(f.eager_launch_us),
        eager_kernel_gap_us: f.eager_kernel_gap_us,
        graph_first_collective_us: stall.unwrap_or(f.graph_first_collective_us),
        source: match (graph, eager) {
            (Some(g), Some(e)) => format!(
                "{}; measured: launch.csv chains of tiny kernels, fitted total = launch + n x per-kernel: graph {:.2} µs + {:.3} µs/kernel (gap = per-kernel minus the elementwise fixed cost, {:.2} µs), eager {:.2} µs/kernel; eager gap from the fallback profile",
                stall
                    .map(|s| format!("graph_first_collective_us measured: graph_overheads.csv, median over message sizes of the intercept of T(L) - T(0) = stall + L x t ({s:.2} µs)"))
                    .unwrap_or_else(|| "graph_first_collective_us from the fallback".into()),
                g.0, g.1, elementwise_fixed, e.1
            ),
            _ => format!("from fallback profile '{}'", fallback.profile.name),
        },
    }
}

/// Kernel jitter from the p10/p90 spread of the kernel medians; launch skew from launch_skew.csv.
pub(crate) fn variability(m: &Measurements, fallback: &CalibrationProfile) -> Variability {
    let mut cvs: Vec<f64> = m
        .kernels
        .iter()
        .filter(|p| p.p90_us > p.p10_us)
        .map(|p| (p.p90_us - p.p10_us) / (2.0 * 1.2816 * p.median_us))
        .collect();
    if cvs.is_empty() {
        return fallback.variability.clone();
    }
    let f = &fallback.variability;
    let skew = launch_skew(m);
    Variability {
        kernel_cv: median(&mut cvs).min(0.3),
        rank_skew_cv: f.rank_skew_cv,
        collective_cv: f.collective_cv,
        launch_skew_us: skew.unwrap_or(f.launch_skew_us),
        source: format!(
            "kernel_cv measured: median over {} kernels of (p90 - p10) / (2 x 1.2816 x median); {}; rank skew and collective cv from the fallback",
            cvs.len(),
            skew.map(|s| format!("launch_skew_us measured: launch_skew.csv median first-collective wait / (n/(n+1) - 1/2) = {s:.2} µs"))
                .unwrap_or_else(|| "launch_skew_us from the fallback".into())
        ),
    }
}

/// The stall before a graph replay's first collective: per message size, the intercept of
/// T(L) − T(0) = stall + L·t over the graphs with L ≥ 1 collectives; the median over sizes.
fn first_collective_stall(m: &Measurements) -> Option<f64> {
    let mut sizes: Vec<f64> = m.graph_overheads.iter().map(|p| p.bytes).collect();
    sizes.sort_by(|a, b| a.total_cmp(b));
    sizes.dedup();
    let mut stalls = Vec::new();
    for b in sizes {
        let pts: Vec<_> = m.graph_overheads.iter().filter(|p| p.bytes == b).collect();
        let base = pts.iter().find(|p| p.collectives == 0.0)?.median_us;
        let with: Vec<_> = pts.iter().filter(|p| p.collectives > 0.0).collect();
        let x: Vec<Vec<f64>> = with.iter().map(|p| vec![1.0, p.collectives]).collect();
        let y: Vec<f64> = with.iter().map(|p| p.median_us - base).collect();
        if let Some(f) = weighted_least_squares(&x, &y, &vec![1.0; y.len()]) {
            stalls.push(f.coef[0].max(0.0));
        }
    }
    (!stalls.is_empty()).then(|| median(&mut stalls))
}

/// Launch skew from the median first-collective wait: with starts uniform in [0, S], a rank
/// waits S·(n/(n+1) − 1/2) on average.
fn launch_skew(m: &Measurements) -> Option<f64> {
    let p = m.launch_skew.first()?;
    let n = p.nranks as f64;
    (n > 1.0).then(|| p.median_first_wait_us / (n / (n + 1.0) - 0.5))
}
