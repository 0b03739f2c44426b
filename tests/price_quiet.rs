//! `cost::price_quiet` (what the sweep's fast path prices every shape with) against
//! `cost::price`: the same durations, splits and collective choices, bit for bit, over models,
//! systems (with and without AIConfigurator tables), profiles, TP, batch, context, KV dtype,
//! NCCL protocol and CUDA graphs; only the report's text is left out.

use decodesim::cost;
use decodesim::scenario::Proto;
use decodesim::sim::ScenarioRequest;
use decodesim::workload;

#[test]
fn quiet_pricing_is_bit_identical_to_full_pricing() {
    let models = [
        "kimi-k2.5",
        "deepseek-v3",
        "llama-3.1-70b",
        "qwen3-235b-a22b",
    ];
    let systems = [
        ("rtx-pro-6000-8x-pcie", None),
        ("rtx-pro-6000-8x-pcie", Some("rtx-pro-6000-estimate")),
        ("h200-8x-nvlink", None),
        ("h200-8x-nvlink", Some("h200-estimate")),
        ("h200-2x-nvlink", None),
    ];
    let mut compared = 0;
    let mut with_text = 0;
    for (mi, model) in models.iter().enumerate() {
        for (si, (system, calibration)) in systems.iter().enumerate() {
            for (ci, (batch, context)) in
                [(1, 1024u64), (37, 5000), (250, 16384)].iter().enumerate()
            {
                let i = mi + si + ci;
                let req = ScenarioRequest {
                    model: (*model).into(),
                    system: (*system).into(),
                    calibration: calibration.map(String::from),
                    batch: *batch,
                    context: *context,
                    cuda_graphs: i % 2 == 0,
                    proto: [Proto::Auto, Proto::Ll, Proto::Simple][i % 3],
                    kv_bytes: if i % 2 == 1 { 1.0 } else { 2.0 },
                    layers: Some(3),
                    ..ScenarioRequest::default()
                };
                let (s, p) = req.load().expect("scenario loads");
                let w = workload::build(&s);
                let full = cost::price(&w, &s, &p).expect("priced");
                let quiet = cost::price_quiet(&w, &s, &p).expect("priced quietly");
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let what = format!(
                    "{model} on {system} ({calibration:?}), batch {batch}, context {context}"
                );
                assert_eq!(bits(&full.base_us), bits(&quiet.base_us), "base_us: {what}");
                assert_eq!(
                    bits(&full.split_us),
                    bits(&quiet.split_us),
                    "split_us: {what}"
                );
                assert_eq!(full.collectives, quiet.collectives, "collectives: {what}");
                assert!(
                    quiet.families.is_empty() && quiet.warnings.is_empty(),
                    "{what}"
                );
                assert!(
                    !full.families.is_empty(),
                    "full pricing names its sources: {what}"
                );
                with_text += usize::from(!full.warnings.is_empty());
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 60);
    // Some cases do carry warnings (an FP8 KV cache's ratio, extrapolation), so the quiet
    // variant is checked where it has text to skip.
    assert!(with_text > 0);
}
