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

/// One `cost::PreparedPricer`, prepared once per scenario and reused over many batches, KV
/// lengths and workloads (as the sweep's fast path reuses it for every new context), prices
/// every op as a fresh `cost::price` of that shape alone does, bit for bit: durations, splits
/// and collective choices. Quiet and full preparations both; the full one's text too.
#[test]
fn a_prepared_pricer_reused_over_shapes_prices_as_a_fresh_one() {
    let cases = [
        ("kimi-k2.5", "rtx-pro-6000-8x-pcie", 2.0),
        ("kimi-k2.5", "h200-8x-nvlink", 1.0),
        ("deepseek-v3", "h200-hgx-2node-ib", 2.0),
        ("llama-3.1-70b", "rtx-pro-6000-8x-pcie", 2.0),
        ("qwen3-235b-a22b", "h200-8x-nvlink", 1.0),
        ("minimax-m2.5", "rtx-pro-6000-2node-roce", 2.0),
    ];
    let mut compared = 0;
    for (model, system, kv_bytes) in cases {
        let req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            batch: 1,
            context: 1000,
            kv_bytes,
            layers: Some(3),
            ..ScenarioRequest::default()
        };
        let (s0, p) = req.load().expect("scenario loads");
        for quiet in [true, false] {
            let mut prepared = cost::PreparedPricer::new(&s0, &p, quiet).expect("prepared");
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..40 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Runs of one batch over several KV lengths, then a jump (a sweep's order).
                let batch = [1, 2, 7, 31, 64, 128, 250][(x >> 60) as usize % 7];
                let context = 2 + (x >> 20) % 200_000;
                // As the fast path moves them: the prepared scenario's batch and context.
                let mut s = s0.clone();
                s.batch = batch;
                s.context = context;
                let w = workload::build(&s);
                let fresh = if quiet {
                    cost::price_quiet(&w, &s, &p)
                } else {
                    cost::price(&w, &s, &p)
                }
                .expect("priced");
                let got = prepared
                    .price(&w, &s, &p)
                    .expect("priced by the prepared pricer");
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let what = format!("{model} on {system}, batch {batch}, context {context}");
                assert_eq!(bits(&fresh.base_us), bits(&got.base_us), "base_us: {what}");
                assert_eq!(
                    bits(&fresh.split_us),
                    bits(&got.split_us),
                    "split_us: {what}"
                );
                assert_eq!(fresh.collectives, got.collectives, "collectives: {what}");
                assert_eq!(fresh.families, got.families, "families: {what}");
                assert_eq!(fresh.warnings, got.warnings, "warnings: {what}");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 6 * 2 * 40);
}
