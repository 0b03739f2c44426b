//! The crate root's front: a library user simulates, summarizes and compares with what
//! `decodesim::` re-exports, without knowing the module layout.

use decodesim::{
    compare, simulate, summarize, CalibrationProfile, Error, Scenario, ScenarioRequest,
    SummaryOptions,
};

#[test]
fn the_default_scenario_simulates_through_the_front() {
    let sim = simulate(&ScenarioRequest::default()).expect("the default scenario simulates");
    let _: &Scenario = &sim.scenario;
    let _: &CalibrationProfile = &sim.profile;
    let step = sim.timeline.step_time_us();
    assert!(step > 100.0 && step < 1e6, "step {step} µs");
    // A breakdown compared with itself has no error.
    let c = compare(&sim.mean, &sim.mean);
    let err = c.step_error_pct().expect("a non-empty step");
    assert!(err.abs() < 1e-9, "{err}");
}

#[test]
fn a_missing_trace_is_an_error_value_naming_the_file() {
    let classifier = decodesim::trace::classify::Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &classifier,
        step_marker: None,
        top_unclassified: 3,
        ranks: Default::default(),
    };
    let e: Error = summarize(&["/nonexistent/rank0.json".into()], &opts)
        .unwrap_err()
        .into();
    assert!(e.to_string().contains("/nonexistent/rank0.json"), "{e}");
}
