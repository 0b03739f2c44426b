//! Single-anchor calibration reproduces the anchor step and transfers to other batches.

use decodesim::calibrate::anchor::fit_to_step;
use decodesim::sim::{simulate_loaded, ScenarioRequest};
use decodesim::workload::CostFamily;

#[test]
fn anchor_recovers_a_slower_truth() {
    let req = ScenarioRequest {
        batch: 16,
        ..Default::default()
    };
    let (scenario, profile) = req.load().unwrap();
    // The "truth": routed experts 30% slower and collectives 20% slower than the profile says.
    let mut truth = profile.clone();
    let k = truth.kernels.get_mut(&CostFamily::MoeGemmInt4).unwrap();
    k.fixed_us *= 1.3;
    k.mem_efficiency /= 1.3;
    k.compute_efficiency /= 1.3;
    for c in &mut truth.collectives {
        c.base_us *= 1.2;
        c.hop_us *= 1.2;
        c.bus_bw_gbps /= 1.2;
    }
    // A profile pricing from measured tables: the same truth, as table scales.
    if let Some(a) = truth.aiconfigurator.as_mut() {
        a.scales.insert("moe_gemm_int4".into(), 1.3);
        a.scales.insert("collectives".into(), 1.2);
    }
    let measured = simulate_loaded(scenario.clone(), truth.clone()).unwrap();
    let r = fit_to_step(&scenario, &profile, &measured.mean, "synthetic").unwrap();
    let err = |a: f64, b: f64| (a / b - 1.0).abs();
    assert!(err(r.before.step_time_us(), measured.step_time_us()) > 0.05);
    assert!(
        err(r.after.step_time_us(), measured.step_time_us()) < 0.01,
        "{} vs {}",
        r.after.step_time_us(),
        measured.step_time_us()
    );
    assert!(
        (r.factors["moe_gemm_int4"] - 1.3).abs() < 0.05,
        "{:?}",
        r.factors
    );
    // The adjusted profile predicts another batch size of the same truth.
    let other = ScenarioRequest {
        batch: 64,
        ..Default::default()
    };
    let (s64, _) = other.load().unwrap();
    let want = simulate_loaded(s64.clone(), truth).unwrap().step_time_us();
    let got = simulate_loaded(s64, r.profile).unwrap().step_time_us();
    assert!(err(got, want) < 0.03, "{got} vs {want}");
}
