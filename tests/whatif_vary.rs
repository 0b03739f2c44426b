//! `whatif --vary`: the properties the variants must hold, op by op.

use decodesim::category::Category;
use decodesim::sim::{simulate, ScenarioRequest, Simulation};
use decodesim::whatif::vary::{self, VaryRequest};
use decodesim::workload::CostFamily;
use std::collections::HashMap;

fn base() -> ScenarioRequest {
    ScenarioRequest {
        layers: Some(4),
        ..ScenarioRequest::default()
    }
}

fn with(key: &str, value: &str) -> Simulation {
    let mut r = base();
    vary::set(&mut r, key, value).unwrap();
    simulate(&r).unwrap()
}

/// Priced duration of every op by name (deterministic: no jitter, no waiting).
fn priced(sim: &Simulation) -> HashMap<String, (f64, CostFamily, Category)> {
    sim.workload
        .ops
        .iter()
        .zip(&sim.pricing.base_us)
        .filter(|(o, _)| o.is_kernel())
        .map(|(o, &us)| (o.name.clone(), (us, o.family, o.category)))
        .collect()
}

/// Names of the ops whose priced time differs (or that exist on one side only).
fn changed(a: &Simulation, b: &Simulation) -> Vec<(String, CostFamily, Category)> {
    let (pa, pb) = (priced(a), priced(b));
    let mut out = Vec::new();
    for (name, (us, f, c)) in &pb {
        match pa.get(name) {
            Some((u0, _, _)) if (u0 - us).abs() <= 1e-9 * us.abs().max(1.0) => {}
            _ => out.push((name.clone(), *f, *c)),
        }
    }
    for (name, (_, f, c)) in &pa {
        if !pb.contains_key(name) {
            out.push((name.clone(), *f, *c));
        }
    }
    out
}

#[test]
fn a_faster_link_never_slows_a_step() {
    for p2p in ["on", "off"] {
        let mut last = f64::INFINITY;
        for gbps in ["5", "20", "45", "100", "450", "900"] {
            let mut r = base();
            vary::set(&mut r, "p2p", p2p).unwrap();
            vary::set(&mut r, "link-gbps", gbps).unwrap();
            let t = simulate(&r).unwrap().step_time_us();
            assert!(t <= last + 1e-6, "p2p {p2p}, {gbps} GB/s: {t} > {last}");
            last = t;
        }
        let mut last = f64::INFINITY;
        for lat in ["20", "5", "1", "0.4", "0"] {
            let mut r = base();
            vary::set(&mut r, "p2p", p2p).unwrap();
            vary::set(&mut r, "link-latency-us", lat).unwrap();
            let t = simulate(&r).unwrap().step_time_us();
            assert!(t <= last + 1e-6, "p2p {p2p}, {lat} us: {t} > {last}");
            last = t;
        }
    }
}

#[test]
fn nccl_protocol_and_p2p_change_only_collectives() {
    let b = simulate(&base()).unwrap();
    for (k, v) in [
        ("nccl-proto", "Simple"),
        ("nccl-proto", "auto"),
        ("nccl-algo", "Tree"),
        ("p2p", "off"),
        ("link-gbps", "450"),
    ] {
        let v = with(k, v);
        let c = changed(&b, &v);
        assert!(!c.is_empty(), "{k}: nothing changed");
        assert!(
            c.iter().all(|(_, f, _)| f.is_collective()),
            "{k}: non-collective ops changed: {:?}",
            c.iter()
                .filter(|x| !x.1.is_collective())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn context_and_kv_dtype_change_only_attention() {
    let b = simulate(&base()).unwrap();
    for (k, v) in [("context", "32768"), ("kv-cache-dtype", "fp8")] {
        let c = changed(&b, &with(k, v));
        // FP8 attention is unmeasured on the default GPU: priced at the BF16 price, so the KV
        // dtype may change nothing there (cost::kv_dtype); the context always changes attention.
        assert!(
            k == "kv-cache-dtype" || !c.is_empty(),
            "{k}: nothing changed"
        );
        assert!(
            c.iter().all(|(_, _, cat)| *cat == Category::Attention),
            "{k}: {:?}",
            c.iter()
                .filter(|x| x.2 != Category::Attention)
                .collect::<Vec<_>>()
        );
    }
    // On the default GPU an FP8 cache's attention is the BF16 price (its FP8 attention is
    // unmeasured there): the MLA decode kernels keep their prices.
    let c = changed(&b, &with("kv-cache-dtype", "fp8"));
    assert!(!c
        .iter()
        .any(|(_, f, _)| *f == CostFamily::AttentionMlaDecode));
}

#[test]
fn ep_replaces_moe_allreduces_with_all_to_alls() {
    let b = simulate(&base()).unwrap();
    let mut r = base();
    vary::set(&mut r, "ep", "8").unwrap();
    vary::set(&mut r, "ep-comm", "all-to-all").unwrap();
    let e = simulate(&r).unwrap();
    let count =
        |s: &Simulation, f: CostFamily| s.workload.ops.iter().filter(|o| o.family == f).count();
    let moe_layers = (0..4).filter(|&l| b.scenario.model.is_layer_moe(l)).count();
    assert!(moe_layers > 0);
    assert_eq!(count(&e, CostFamily::AllToAll), 2 * moe_layers);
    assert_eq!(
        count(&e, CostFamily::AllReduce),
        count(&b, CostFamily::AllReduce) - moe_layers
    );
    // Only MoE-layer expert kernels and communication change; attention is untouched.
    for (name, f, cat) in changed(&b, &e) {
        assert!(
            f.is_collective()
                || matches!(cat, Category::Moe | Category::Gemm | Category::Elementwise),
            "{name} ({f}, {cat:?})"
        );
        assert_ne!(cat, Category::Attention, "{name}");
    }
    // Per-rank loads: the expert GEMMs carry a factor per rank, their mean 1.
    let w13 = e
        .workload
        .ops
        .iter()
        .find(|o| o.name.ends_with("experts_w13"))
        .unwrap();
    assert_eq!(w13.rank_scale.len(), 8);
    let mean: f64 = w13.rank_scale.iter().sum::<f64>() / 8.0;
    assert!((mean - 1.0).abs() < 1e-9);
    // Keeping the all-reduce (the default, vLLM at data parallel 1): the same collectives as TP.
    let ar = with("ep", "8");
    assert_eq!(count(&ar, CostFamily::AllToAll), 0);
    assert_eq!(
        count(&ar, CostFamily::AllReduce),
        count(&b, CostFamily::AllReduce)
    );
    assert!(changed(&b, &ar).iter().all(|(_, f, _)| !f.is_collective()));
}

#[test]
fn dcp_changes_attention_and_adds_its_collectives() {
    let b = simulate(&base()).unwrap();
    let d = with("dcp", "4");
    let layers = 4;
    let of = |f: CostFamily| {
        d.workload
            .ops
            .iter()
            .filter(|o| o.family == f && o.group == 4)
            .count()
    };
    assert_eq!(of(CostFamily::AllGather), 2 * layers);
    assert_eq!(of(CostFamily::ReduceScatter), layers);
    for (name, f, cat) in changed(&b, &d) {
        assert!(
            cat == Category::Attention || f.is_collective(),
            "{name} ({f})"
        );
    }
    // Each rank reads a quarter of the context.
    let bytes = |s: &Simulation| {
        s.workload
            .ops
            .iter()
            .find(|o| o.family == CostFamily::AttentionMlaDecode)
            .unwrap()
            .bytes
    };
    assert!(bytes(&d) < bytes(&b));
}

#[test]
fn bad_input_is_refused_before_any_work() {
    // The crate's own error, as its API returns it: boxing it here would only hide what a
    // caller gets.
    #[allow(clippy::result_large_err)]
    let req = |args: &[&str]| -> Result<VaryRequest, decodesim::Error> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Ok(VaryRequest {
            base: base(),
            axes: vary::parse_axes(&args)?,
            one_at_a_time: false,
        })
    };
    let e = req(&["speed=1,2"]).unwrap_err().to_string();
    assert!(
        e.contains("unknown key 'speed'") && e.contains("nccl-proto"),
        "{e}"
    );
    let e = req(&["batch=1", "batch=2"]).unwrap_err().to_string();
    assert!(e.contains("given twice"), "{e}");
    for (arg, want) in [
        ("ep=4", "--ep 4"),
        ("dcp=3", "--dcp 3 does not divide --tp 8"),
        ("link-gbps=0", "--link-gbps 0"),
        ("batch=0", "--batch 0"),
        ("nccl-proto=LL9", "nccl-proto=LL9"),
        ("p2p=maybe", "expected on or off"),
    ] {
        let e = vary::run(&req(&[arg]).unwrap()).unwrap_err().to_string();
        assert!(e.contains(want), "{arg}: {e}");
    }
    // EP must divide the experts.
    let (mut s, _) = base().load().unwrap();
    s.model.moe.as_mut().unwrap().n_routed_experts = 100;
    s.layout.ep = Some(8);
    let e = s.validate().unwrap_err().to_string();
    assert!(e.contains("does not divide the 100 routed experts"), "{e}");
}

#[test]
fn variants_are_ranked_and_one_at_a_time_varies_keys_alone() {
    let args: Vec<String> = ["batch=8,64", "p2p=on,off"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut r = VaryRequest {
        base: base(),
        axes: vary::parse_axes(&args).unwrap(),
        one_at_a_time: false,
    };
    let s = vary::run(&r).unwrap();
    assert_eq!(s.variants.len(), 4);
    assert!(s
        .variants
        .windows(2)
        .all(|w| w[0].tokens_per_s >= w[1].tokens_per_s));
    r.one_at_a_time = true;
    let s = vary::run(&r).unwrap();
    assert_eq!(s.variants.len(), 4);
    assert!(s.variants.iter().all(|v| v.settings.len() == 1));
    let csv = vary::csv(&s, 3);
    assert!(
        csv.starts_with("variant,step_time_us,tokens_per_s,speedup,"),
        "{csv}"
    );
}
