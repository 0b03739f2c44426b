//! An op's name is for people and traces: pricing, two-batch overlap, DeepEP's phases, the
//! parallel layouts and the engines read what an op is from its typed fields (`Op::role`,
//! `Op::micro_batch`, `Op::draft_pass`). Every op of a few workloads is renamed — to garbage,
//! and to its neighbour's name — and the priced step must stay the same, bit for bit.

use decodesim::cost::{self, CalibrationProfile};
use decodesim::scenario::deployment::EpComm;
use decodesim::scenario::{Runtime, Scenario};
use decodesim::sim::{simulate_workload, ScenarioRequest};
use decodesim::whatif::draft::Draft;
use decodesim::workload::mixed::{self, MixedStep, PrefillChunk};
use decodesim::workload::spec_step::{SpecMethod, SpecStep};
use decodesim::workload::{self, Workload};

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every op named `?<index>`: no name any reader could match.
fn garbage(w: &Workload) -> Workload {
    let mut g = w.clone();
    for (i, op) in g.ops.iter_mut().enumerate() {
        op.name = format!("?{i}");
    }
    g
}

/// Every op named as the op after it (the last as the first): each name a real one, of another
/// kernel, block, micro-batch or pass.
fn shifted(w: &Workload) -> Workload {
    let mut g = w.clone();
    let n = g.ops.len();
    for (i, op) in g.ops.iter_mut().enumerate() {
        op.name = w.ops[(i + 1) % n].name.clone();
    }
    g
}

/// The step priced and played as it is and under both renamings: the same prices, splits,
/// collective choices and step time, bit for bit. Returns the step time.
fn same_under_renaming(w: &Workload, s: &Scenario, p: &CalibrationProfile, what: &str) -> f64 {
    let play = |w: Workload| {
        let sim = simulate_workload(s.clone(), p.clone(), w).expect("simulated");
        (
            bits(&sim.pricing.base_us),
            bits(&sim.pricing.split_us),
            sim.pricing.collectives.clone(),
            sim.step_time_us(),
        )
    };
    let (base, split, coll, step) = play(w.clone());
    for (how, renamed) in [("garbage", garbage(w)), ("shifted", shifted(w))] {
        assert_ne!(
            renamed.ops.iter().map(|o| &o.name).collect::<Vec<_>>(),
            w.ops.iter().map(|o| &o.name).collect::<Vec<_>>(),
            "{what}: renamed"
        );
        let (b, sp, c, t) = play(renamed);
        assert_eq!(b, base, "{what}, names {how}: base_us");
        assert_eq!(sp, split, "{what}, names {how}: split_us");
        assert_eq!(c, coll, "{what}, names {how}: collectives");
        assert_eq!(
            t.to_bits(),
            step.to_bits(),
            "{what}, names {how}: step {t} vs {step}"
        );
    }
    step
}

fn load(req: ScenarioRequest) -> (Scenario, CalibrationProfile) {
    req.load().expect("scenario loads")
}

#[test]
fn plain_tensor_parallel_steps_price_the_same_under_any_names() {
    // Kimi-K2.5 at TP 8 on the RTX system, whose profile prices MLA and the routed experts from
    // AIConfigurator's tables (the split-KV reduce read with its attention, the MoE call per
    // layer); with the reference runtime's token permutation; on H200 with an FP8 cache (the
    // reduce scaled with its attention) and with the all-reduce + RMSNorm fusion.
    let base = ScenarioRequest {
        layers: Some(4),
        batch: 24,
        ..ScenarioRequest::default()
    };
    let cases = [
        ("kimi tp8 rtx", base.clone()),
        (
            "kimi tp8 rtx, reference runtime",
            ScenarioRequest {
                runtime: Runtime::Reference,
                ..base.clone()
            },
        ),
        (
            "kimi tp8 h200, fp8 kv",
            ScenarioRequest {
                system: "h200-8x-nvlink".into(),
                kv_bytes: 1.0,
                ..base.clone()
            },
        ),
        (
            "llama tp8 h200",
            ScenarioRequest {
                model: "llama-3.1-70b".into(),
                system: "h200-8x-nvlink".into(),
                ..base.clone()
            },
        ),
        ("kimi tp8 ep8 all-to-all", {
            let mut r = base.clone();
            r.ep = Some(8);
            r.comm.ep_comm = EpComm::AllToAll;
            r
        }),
    ];
    for (what, req) in cases {
        let (s, p) = load(req);
        let w = workload::build(&s);
        assert!(same_under_renaming(&w, &s, &p, what) > 0.0);
    }
}

#[test]
fn two_batch_overlap_under_expert_and_data_parallelism_prices_the_same_under_any_names() {
    // DeepSeek-V3 at TP 1 × DP 8 on one H200 node: micro-batches priced apart, DeepEP's
    // low-latency dispatch and combine priced by their phase's law, the MoE call per layer of
    // each micro-batch; and the same at TP 2 × DP 4.
    let mut rdma = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-8x-nvlink".into(),
        tp: Some(1),
        batch: 96,
        layers: Some(5),
        ..ScenarioRequest::default()
    };
    rdma.dp = Some(8);
    rdma.comm.ep_comm = EpComm::RdmaLl;
    rdma.tbo = true;
    let mut tp2 = rdma.clone();
    tp2.tp = Some(2);
    tp2.dp = Some(4);
    for (what, req) in [("tbo dp8 rdma-ll", rdma), ("tbo tp2 dp4 rdma-ll", tp2)] {
        let (s, p) = load(req);
        let w = workload::build(&s);
        assert!(
            w.ops.iter().any(|o| o.waits_for.is_some()),
            "{what}: an overlapped step"
        );
        same_under_renaming(&w, &s, &p, what);
    }
}

#[test]
fn a_speculative_step_prices_the_same_under_any_names() {
    // DeepSeek-V3 with its MTP layer at k = 3: the verify window on the target, the draft window
    // (the first draft pass and two later ones, a MoE layer each) on the drafter's scenario.
    let (s, p) = load(ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-8x-nvlink".into(),
        layers: Some(4),
        batch: 16,
        ..ScenarioRequest::default()
    });
    let d = Draft::load(SpecMethod::Mtp, None, &s.model).expect("MTP drafter");
    let ds = d.drafter.scenario(&s).expect("draft scenario");
    let step = SpecStep::new(SpecMethod::Mtp, 3);
    for (k, win) in step.windows.iter().enumerate() {
        let w = step.window_workload(win, &d, &s, &ds);
        let sc = if k == 0 { &s } else { &ds };
        same_under_renaming(&w, sc, &p, &format!("mtp k=3, window {k}"));
    }
}

#[test]
fn decode_context_parallelism_prices_the_same_under_any_names() {
    let mut req = ScenarioRequest {
        layers: Some(4),
        batch: 12,
        context: 8192,
        ..ScenarioRequest::default()
    };
    req.dcp = Some(2);
    let (s, p) = load(req);
    let w = workload::build(&s);
    same_under_renaming(&w, &s, &p, "kimi tp8 dcp2");
}

#[test]
fn a_mixed_step_runs_the_same_ops_eagerly_under_any_names() {
    let (s, p) = load(ScenarioRequest {
        layers: Some(3),
        ..ScenarioRequest::default()
    });
    let step = MixedStep {
        decode: 8,
        context: 2048,
        chunks: vec![PrefillChunk {
            tokens: 300,
            prefix: 1000,
        }],
    };
    let w = mixed::build(&s, &step);
    let eager = |w: &Workload| w.ops.iter().map(mixed::runs_eager).collect::<Vec<_>>();
    assert!(eager(&w).iter().any(|&e| e));
    for renamed in [garbage(&w), shifted(&w)] {
        assert_eq!(eager(&renamed), eager(&w));
        let (a, b) = (
            cost::price(&w, &s, &p).expect("priced"),
            cost::price(&renamed, &s, &p).expect("priced"),
        );
        assert_eq!(bits(&a.base_us), bits(&b.base_us));
    }
}
