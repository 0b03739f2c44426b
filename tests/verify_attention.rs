//! The verify pass's attention as the kernel runs it: the rule decodesim prices it by (the plain
//! call at batch × the layout's KV reads per sequence, `scenario::mla_backend`) held against the
//! H200 measurement of verify calls in the row and folded layouts
//! (`data/calibration/mla-verify/mla_verify.csv`), and the verify pass costing more than the
//! plain step as the context grows.

mod common;

use decodesim::scenario::mla_backend::VerifyLayout;
use std::collections::BTreeMap;

type Key = (String, u64, u64, u64, u64); // variant, heads, batch, q, kv_len

fn measured() -> BTreeMap<Key, f64> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/calibration/mla-verify/mla_verify.csv");
    let text = std::fs::read_to_string(&path).expect("the committed measurement");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (v, h, b, q, l, us) = (
        col("variant"),
        col("num_heads"),
        col("batch"),
        col("q_len"),
        col("kv_len"),
        col("median_us"),
    );
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            (
                (f[v].to_string(), n(h), n(b), n(q), n(l)),
                f[us].parse::<f64>().unwrap(),
            )
        })
        .collect()
}

fn layout(variant: &str) -> VerifyLayout {
    match variant {
        "rows" => VerifyLayout::Rows,
        "folded16" => VerifyLayout::Folded { tile: 16 },
        "folded32" => VerifyLayout::Folded { tile: 32 },
        v => panic!("unknown variant {v}"),
    }
}

#[test]
fn a_verify_call_costs_the_plain_call_at_batch_times_its_reads() {
    let m = measured();
    let mut errs: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for ((variant, heads, batch, q, len), us) in &m {
        if *q == 1 {
            continue;
        }
        let reads = layout(variant).read_factor(*q, *heads);
        let at = (*batch as f64 * reads).round() as u64;
        // The plain call of the same layout (its tile height is its own) at batch × reads,
        // where that batch was measured.
        let Some(plain) = m.get(&(variant.clone(), *heads, at, 1, *len)) else {
            continue;
        };
        errs.entry(if variant == "rows" { "rows" } else { "folded" })
            .or_default()
            .push((plain - us).abs() / us);
    }
    for (layout, mut e) in errs {
        e.sort_by(f64::total_cmp);
        let (med, p90) = (e[e.len() / 2], e[e.len() * 9 / 10]);
        assert!(e.len() >= 100, "{layout}: {} points", e.len());
        assert!(med < 0.06, "{layout}: median {med:.3}");
        assert!(p90 < 0.12, "{layout}: p90 {p90:.3}");
    }
    // L2 does not absorb the row layout's re-reads where the call is DRAM-bound.
    let big = m[&("rows".into(), 16, 64, 4, 131072)] / m[&("rows".into(), 16, 64, 1, 131072)];
    assert!((3.6..4.4).contains(&big), "{big}");
}

fn speculative_step_over_plain(context: &str) -> f64 {
    let (code, out, err) = common::decodesim_exit(&[
        "whatif",
        "spec-decode",
        "--batch",
        "2",
        "--context",
        context,
        "--acceptance-rate",
        "0.6",
        "--draft-tokens",
        "3",
        "--crossover-batches",
        "none",
        "--draws",
        "0",
        "--layers",
        "4",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let k3 = v["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["draft_tokens"] == 3)
        .unwrap()
        .clone();
    let speedup = k3["speedup"].as_f64().unwrap();
    // step(k) / step(plain) = accepted length / speedup.
    (1.0 + 3.0 * 0.6) / speedup
}

#[test]
fn speculation_costs_more_over_a_plain_step_as_the_context_grows() {
    // The row layout reads the KV four times in a k = 3 verify pass: (draft + verify) over the
    // plain step rises with the context, as measured on the machine.
    let short = speculative_step_over_plain("4096");
    let long = speculative_step_over_plain("131072");
    assert!(long > short * 1.2, "4k: {short:.3}, 128k: {long:.3}");
}
