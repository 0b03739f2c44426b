//! `cost::attention::AttentionPricer` (the sweep's price of a new context's attention) against
//! `cost::price`: prepared once from one shape's op templates, then priced at many batches and
//! KV lengths, it must give `base_us` bit for bit, over models (MLA and GQA), systems with and
//! without AIConfigurator tables, profiles, TP, decode context parallelism, factors and table
//! scales; where it declines (an FP8 cache, a measured kernel table, a collective) it says so
//! rather than pricing.

use decodesim::cost::attention::AttentionPricer;
use decodesim::cost::{self, CalibrationProfile};
use decodesim::scenario::Scenario;
use decodesim::sim::ScenarioRequest;
use decodesim::workload::{self, CostFamily, OpRole, Workload};

/// The first attention op of `s`'s step, and MLA's split-KV reduce after it.
fn attention_pair(s: &Scenario) -> Workload {
    let mut w = workload::build(s);
    let i = w
        .ops
        .iter()
        .position(|o| {
            matches!(
                o.family,
                CostFamily::AttentionMlaDecode | CostFamily::AttentionGqaDecode
            )
        })
        .expect("an attention op");
    // With the reduce after it when there is one (the fast path prices them together).
    let n = if w.ops[i + 1].role == OpRole::AttentionReduce {
        2
    } else {
        1
    };
    w.ops = w.ops[i..i + n].to_vec();
    w
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Prepares on the first (batch, context) and prices every other; returns how many shapes the
/// lean pricer priced (0 when it declined).
fn held_to_price(s0: &Scenario, p: &CalibrationProfile, what: &str) -> usize {
    let w0 = attention_pair(s0);
    let Some(mut ap) = AttentionPricer::new(&w0, s0, p) else {
        return 0;
    };
    let mut priced = 0;
    for batch in [1u32, 2, 7, 64, 129, 256] {
        for context in [1u64, 100, 1000, 4097, 32768, 131072] {
            let mut s = s0.clone();
            s.batch = batch;
            s.context = context;
            let w = attention_pair(&s);
            assert_eq!(
                w.ops.iter().map(|o| &o.name).collect::<Vec<_>>(),
                w0.ops.iter().map(|o| &o.name).collect::<Vec<_>>(),
                "{what}: the pair's templates stay"
            );
            let full = cost::price(&w, &s, p).expect("priced");
            let mut out = vec![f64::NAN; w.ops.len()];
            if ap.price(&w, &s, p, &mut out) {
                assert_eq!(
                    bits(&out),
                    bits(&full.base_us),
                    "{what}, batch {batch}, context {context}: {out:?} vs {:?}",
                    full.base_us
                );
                priced += 1;
            }
        }
    }
    priced
}

#[test]
fn lean_attention_prices_are_bit_identical_to_the_general_pricer() {
    let cases: [(&str, &str, Option<&str>, u32, f64); 9] = [
        ("kimi-k2.5", "rtx-pro-6000-8x-pcie", None, 8, 2.0),
        ("kimi-k2.5", "rtx-pro-6000-8x-pcie", None, 4, 2.0),
        ("deepseek-v3", "rtx-pro-6000-8x-pcie", None, 8, 2.0),
        (
            "kimi-k2.5",
            "rtx-pro-6000-8x-pcie",
            Some("rtx-pro-6000-estimate"),
            8,
            2.0,
        ),
        ("llama-3.1-70b", "rtx-pro-6000-8x-pcie", None, 8, 2.0),
        ("qwen3-235b-a22b", "rtx-pro-6000-8x-pcie", None, 4, 2.0),
        ("kimi-k2.5", "h200-8x-nvlink", Some("h200-estimate"), 8, 2.0),
        // Declined: an FP8 cache, and the H200 profile's measured kernel tables.
        ("kimi-k2.5", "rtx-pro-6000-8x-pcie", None, 8, 1.0),
        ("kimi-k2.5", "h200-8x-nvlink", None, 8, 2.0),
    ];
    let mut counts = Vec::new();
    for (model, system, calibration, tp, kv_bytes) in cases {
        let req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            calibration: calibration.map(String::from),
            tp: Some(tp),
            batch: 3,
            context: 2048,
            kv_bytes,
            layers: Some(4),
            ..ScenarioRequest::default()
        };
        let (s, p) = req.load().expect("scenario loads");
        let what = format!("{model} on {system} ({calibration:?}) TP{tp}, KV bytes {kv_bytes}");
        let mut n = held_to_price(&s, &p, &what);
        // The profile's factors and AIConfigurator scales, as anchoring and throughput
        // calibration set them.
        let mut q = p.clone();
        q.factors.attention_growth_scale = 1.37;
        q.factors.attention_fixed_scale = 0.81;
        q.factors.dense_gemm_scale = 1.1;
        if let Some(a) = q.aiconfigurator.as_mut() {
            a.scales.insert("attention_mla_decode".into(), 1.23);
            a.scales.insert("elementwise".into(), 0.9);
        }
        n += held_to_price(&s, &q, &format!("{what}, factors"));
        counts.push((what, n));
    }
    let priced = |i: usize| counts[i].1;
    // Every bf16 case without measured kernel tables is priced lean at every shape (MLA from
    // the module rows, GQA and the estimate profiles by the law) ...
    for (what, n) in &counts[..7] {
        assert_eq!(*n, 72, "{what}");
    }
    // ... and the others are declined, left to the general pricer.
    assert_eq!(priced(7), 0, "{}", counts[7].0);
    assert_eq!(priced(8), 0, "{}", counts[8].0);
}

#[test]
fn lean_attention_prices_under_decode_context_parallelism() {
    let req = ScenarioRequest {
        model: "kimi-k2.5".into(),
        system: "rtx-pro-6000-8x-pcie".into(),
        batch: 5,
        context: 4096,
        layers: Some(4),
        ..ScenarioRequest::default()
    };
    let mut req = req;
    req.dcp = Some(2);
    let (s, p) = req.load().expect("scenario loads");
    assert_eq!(held_to_price(&s, &p, "kimi-k2.5 DCP2"), 36);
}
