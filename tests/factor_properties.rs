//! Every profile factor acts on its family's price whatever source priced it (law, measured
//! tables at NCCL's own choice or a forced protocol, vLLM's custom all-reduce, a patched PCIe
//! custom all-reduce, a hypothetical link, an LL/Simple threshold), on the timeline and on the
//! fast path alike: set to 2, it changes exactly its family's terms and nothing else.

use decodesim::calibrate::aiconfigurator::{from_aiconfigurator, AicRequest};
use decodesim::category::Category;
use decodesim::cost::profile::Factors;
use decodesim::cost::CalibrationProfile;
use decodesim::scenario::deployment::{AllreduceImpl, CommKnobs};
use decodesim::scenario::{Proto, Scenario};
use decodesim::sim::fast::{Collectives, FastScenario, Launch};
use decodesim::sim::{simulate_loaded, ScenarioRequest, Simulation};
use decodesim::workload::{CostFamily, Op};
use std::path::PathBuf;

/// A factor set to 2, the ops it acts on, and its multipliers of (split, rest).
struct Case {
    name: &'static str,
    set: fn(&mut Factors),
    acts_on: fn(&Op) -> bool,
    terms: (f64, f64),
}

fn collective(o: &Op) -> bool {
    o.family.is_collective()
}
fn moe_gemm(o: &Op) -> bool {
    matches!(
        o.family,
        CostFamily::MoeGemmBf16 | CostFamily::MoeGemmInt4 | CostFamily::MoeGemmFp8
    )
}
fn dense_gemm(o: &Op) -> bool {
    matches!(
        o.family,
        CostFamily::GemmBf16 | CostFamily::GemmInt4 | CostFamily::GemmFp8
    )
}
fn attention(o: &Op) -> bool {
    o.category == Category::Attention
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "collective_bw_scale",
            set: |f| f.collective_bw_scale = 2.0,
            acts_on: collective,
            terms: (1.0, 0.5),
        },
        Case {
            name: "collective_latency_scale",
            set: |f| f.collective_latency_scale = 2.0,
            acts_on: collective,
            terms: (2.0, 1.0),
        },
        Case {
            name: "moe_efficiency",
            set: |f| f.moe_efficiency = 2.0,
            acts_on: moe_gemm,
            terms: (0.5, 0.5),
        },
        Case {
            name: "moe_weight_scale",
            set: |f| f.moe_weight_scale = 2.0,
            acts_on: moe_gemm,
            terms: (2.0, 1.0),
        },
        Case {
            name: "moe_token_scale",
            set: |f| f.moe_token_scale = 2.0,
            acts_on: moe_gemm,
            terms: (1.0, 2.0),
        },
        Case {
            name: "attention_fixed_scale",
            set: |f| f.attention_fixed_scale = 2.0,
            acts_on: attention,
            terms: (2.0, 1.0),
        },
        Case {
            name: "attention_growth_scale",
            set: |f| f.attention_growth_scale = 2.0,
            acts_on: attention,
            terms: (1.0, 2.0),
        },
        Case {
            name: "dense_gemm_scale",
            set: |f| f.dense_gemm_scale = 2.0,
            acts_on: dense_gemm,
            terms: (2.0, 2.0),
        },
    ]
}

fn h200_table_profile() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("decodesim-factors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("h200-aic.toml");
    if !out.exists() {
        from_aiconfigurator(&AicRequest {
            dir: "data/calibration/aiconfigurator/h200_sxm".into(),
            system: "h200-8x-nvlink".into(),
            base: None,
            out: out.clone(),
            name: None,
        })
        .unwrap();
    }
    out
}

/// The price sources: (name, scenario, profile), jitter off so timeline and fast path compare.
fn sources() -> Vec<(&'static str, Scenario, CalibrationProfile)> {
    let base = ScenarioRequest {
        layers: Some(4),
        ..ScenarioRequest::default()
    };
    let with = |f: &dyn Fn(&mut ScenarioRequest)| {
        let mut r = base.clone();
        f(&mut r);
        r
    };
    let mut out = Vec::new();
    let mut push = |name: &'static str, r: ScenarioRequest, law: bool| {
        let (s, mut p) = r.load().unwrap();
        if law {
            // Every op by the profile's laws: no measured table of any kind.
            p.aic = None;
            p.aiconfigurator = None;
            p.table = None;
        }
        p.variability.kernel_cv = 0.0;
        p.variability.rank_skew_cv = 0.0;
        p.variability.collective_cv = 0.0;
        p.variability.launch_skew_us = 0.0;
        out.push((name, s, p));
    };
    push("law", base.clone(), true);
    push("AIC table at auto", with(&|r| r.proto = Proto::Auto), false);
    push(
        "AIC table, forced LL",
        with(&|r| r.proto = Proto::Ll),
        false,
    );
    push(
        "AIC table, forced Simple",
        with(&|r| r.proto = Proto::Simple),
        false,
    );
    push(
        "LL/Simple threshold",
        with(&|r| {
            r.proto = Proto::Auto;
            r.comm.nccl_ll_threshold = Some(16 << 10);
        }),
        false,
    );
    push(
        "link override",
        with(&|r| {
            r.proto = Proto::Auto;
            r.comm.link_gbps = Some(20.0);
            r.comm.link_latency_us = Some(2.0);
        }),
        false,
    );
    push(
        "patched PCIe custom all-reduce",
        with(&|r| {
            r.comm = CommKnobs {
                allreduce: AllreduceImpl::Custom,
                ..Default::default()
            }
        }),
        false,
    );
    push(
        "custom all-reduce, H200 NVLink TP8",
        with(&|r| {
            r.system = "h200-8x-nvlink".into();
            r.calibration = Some(h200_table_profile().display().to_string());
            r.proto = Proto::Auto;
            r.comm.allreduce = AllreduceImpl::Custom;
        }),
        false,
    );
    out
}

/// The latency a `--link-latency-us` what-if adds to a collective: steps × (new − old).
fn link_shift(s: &Scenario, op: &Op) -> f64 {
    match (op.family.is_collective(), s.comm.link_latency_us) {
        (true, Some(l)) => {
            let n = if op.group > 0 { op.group } else { s.layout.tp } as f64;
            let steps = match op.family {
                CostFamily::AllReduce => 2.0 * (n - 1.0),
                _ => n - 1.0,
            };
            steps * (l - s.system.interconnect.p2p_latency_us)
        }
        _ => 0.0,
    }
}

fn sim(s: &Scenario, p: &CalibrationProfile) -> Simulation {
    simulate_loaded(s.clone(), p.clone()).unwrap()
}

/// The timeline's step time, mean over 16 seeds from the scenario's.
fn mean_step(s: &Scenario, p: &CalibrationProfile) -> f64 {
    let seeds = 16u64;
    (0..seeds)
        .map(|k| {
            let mut s2 = s.clone();
            s2.seed = s.seed.wrapping_add(k);
            sim(&s2, p).step_time_us()
        })
        .sum::<f64>()
        / seeds as f64
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs()).max(1e-9)
}

/// Fast path: step time and busy time per category.
fn fast(s: &Scenario, p: &CalibrationProfile) -> (f64, [f64; Category::COUNT]) {
    let f = FastScenario::new(s, p, None).unwrap();
    let launch = Launch::new(p, s.cuda_graphs);
    let coll = Collectives::new(s, p).unwrap();
    let (t, busy) = f.step_us_busy(s.batch, s.context, &launch, &coll);
    let mut out = [0.0; Category::COUNT];
    out.copy_from_slice(&busy[..Category::COUNT]);
    (t, out)
}

#[test]
fn every_factor_acts_on_its_family_whatever_priced_it() {
    for (source, s, p) in sources() {
        let before = sim(&s, &p);
        let (fast_t0, fast_b0) = fast(&s, &p);
        // The fast path takes the routing's expectation; the timeline draws it per seed, and
        // with 4 layers one seed's draws move the step by up to ~0.7%: held to the mean.
        let mean = mean_step(&s, &p);
        assert!(
            rel(fast_t0, mean) < 0.005,
            "{source}: fast {fast_t0} vs timeline mean over seeds {mean}"
        );
        for case in cases() {
            let mut p2 = p.clone();
            (case.set)(&mut p2.factors);
            let after = sim(&s, &p2);
            let (a, b) = case.terms;
            let (mut split_sum, mut rest_sum) = (0.0, 0.0);
            let (mut delta, mut touched) = ([0.0; Category::COUNT], [false; Category::COUNT]);
            let ops = before.workload.ops.iter().enumerate();
            for (i, op) in ops.filter(|(_, o)| o.is_kernel()) {
                let (t0, t1) = (before.pricing.base_us[i], after.pricing.base_us[i]);
                if (case.acts_on)(op) {
                    let lo = before.pricing.split_us[i];
                    assert!(
                        (0.0..=t0 * (1.0 + 1e-12)).contains(&lo),
                        "{source}: {} split {lo} outside [0, {t0}]",
                        op.name
                    );
                    // Under a hypothetical link the latency holds the link's own change
                    // (steps × Δlatency), added after the factors: they scale the measured
                    // latency only (cost::link).
                    let shift = link_shift(&s, op);
                    // ... and no factor takes a price below its roofline (`cost::physics`).
                    let want = decodesim::cost::physics::floored(
                        (lo - shift) * a + shift + (t0 - lo) * b,
                        decodesim::cost::physics::floor_us(op, &s),
                    );
                    assert!(
                        rel(t1, want) < 1e-9,
                        "{source}, {}: {} priced {t1}, expected {want} (split {lo} of {t0})",
                        case.name,
                        op.name
                    );
                    split_sum += lo;
                    rest_sum += t0 - lo;
                    delta[op.category.index()] += t1 - t0;
                    touched[op.category.index()] = true;
                } else {
                    assert!(
                        rel(t1, t0) < 1e-12,
                        "{source}, {}: {} ({:?}) changed {t0} -> {t1}",
                        case.name,
                        op.name,
                        op.family
                    );
                }
            }
            // The factor's term is there to act on: a factor that found nothing would pass the
            // per-op check above without doing anything.
            let term =
                if a != 1.0 { split_sum } else { 0.0 } + if b != 1.0 { rest_sum } else { 0.0 };
            assert!(
                term > 0.0,
                "{source}, {}: no op has the term this factor scales",
                case.name
            );
            // The fast path: the categories the factor does not touch keep their busy time
            // exactly; the touched ones move as the timeline's prices do.
            let (fast_t1, fast_b1) = fast(&s, &p2);
            for c in Category::ALL {
                let k = c.index();
                if !touched[k] {
                    assert!(
                        rel(fast_b1[k], fast_b0[k]) < 1e-9,
                        "{source}, {}: fast path {} busy {} -> {}",
                        case.name,
                        c.name(),
                        fast_b0[k],
                        fast_b1[k]
                    );
                } else {
                    let (d_fast, d_tl) = (fast_b1[k] - fast_b0[k], delta[k]);
                    assert!(
                        (d_fast - d_tl).abs() <= 0.02 * fast_b0[k] + 0.02 * d_tl.abs() + 1e-6,
                        "{source}, {}: {} busy moved {d_fast} on the fast path, {d_tl} on the timeline",
                        case.name,
                        c.name()
                    );
                }
            }
            // The step moves by the same amount on both paths, the timeline's over the same
            // seeds (a factor on the experts' weights moves one seed's step with its draws of
            // the experts touched, the fast path's with their expectation).
            let (d_fast, d_tl) = (fast_t1 - fast_t0, mean_step(&s, &p2) - mean);
            assert!(
                (d_fast - d_tl).abs() <= 0.005 * mean,
                "{source}, {}: step moved {d_fast} on the fast path, {d_tl} on the timeline",
                case.name,
            );
        }
    }
}

/// The seed's complaint: under `--nccl-proto auto` (NCCL's choice from the measured table) a
/// profile with `collective_bw_scale = 2` changed nothing.
#[test]
fn bandwidth_scale_changes_the_default_scenario_at_nccl_auto() {
    let (s, p) = ScenarioRequest {
        proto: Proto::Auto,
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap();
    let t0 = simulate_loaded(s.clone(), p.clone())
        .unwrap()
        .step_time_us();
    let mut p2 = p.clone();
    p2.factors.collective_bw_scale = 2.0;
    let t1 = simulate_loaded(s, p2).unwrap().step_time_us();
    assert!(t1 < t0 * 0.999, "{t0} -> {t1}");
}

/// The law's collective split is the law's own latency (`base + steps × hop`), computed here
/// by hand from the profile entry.
#[test]
fn law_collective_split_is_the_entry_latency() {
    let (s, mut p) = ScenarioRequest {
        layers: Some(2),
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap();
    p.aic = None;
    p.aiconfigurator = None;
    let sim = simulate_loaded(s.clone(), p.clone()).unwrap();
    let e = p
        .collectives
        .iter()
        .find(|e| {
            // The shipped profile's PCIe entries price any collective.
            e.op == decodesim::cost::profile::CollectiveOp::Any
                && e.algo == decodesim::scenario::Algo::Ring
                && e.path == s.comm_path()
                && e.proto == Proto::Ll
        })
        .unwrap();
    let want = e.base_us + 2.0 * (s.layout.tp as f64 - 1.0) * e.hop_us;
    let i = sim
        .workload
        .ops
        .iter()
        .position(|o| o.family == CostFamily::AllReduce)
        .unwrap();
    assert!(
        rel(sim.pricing.split_us[i], want) < 1e-12,
        "{} vs {want}",
        sim.pricing.split_us[i]
    );
}

#[test]
fn step_overhead_adds_to_both_paths() {
    let (s, mut p) = ScenarioRequest {
        layers: Some(4),
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap();
    p.variability.kernel_cv = 0.0;
    p.variability.rank_skew_cv = 0.0;
    p.variability.collective_cv = 0.0;
    p.variability.launch_skew_us = 0.0;
    let (t0, f0) = (sim(&s, &p).step_time_us(), fast(&s, &p).0);
    p.factors.step_overhead_us = 250.0;
    let (t1, f1) = (sim(&s, &p).step_time_us(), fast(&s, &p).0);
    assert!((t1 - t0 - 250.0).abs() < 1e-6, "{t0} -> {t1}");
    assert!((f1 - f0 - 250.0).abs() < 1e-6, "{f0} -> {f1}");
}

#[test]
fn new_factors_are_validated_and_written_only_when_not_one() {
    let src = std::fs::read_to_string("data/calibration/rtx-pro-6000/profile.toml").unwrap();
    // Validation runs on the parsed struct; the file's tables do not matter for it.
    let mut p: CalibrationProfile = toml::from_str(&src).expect("the shipped profile parses");
    p.factors.attention_growth_scale = 200.0;
    let e = p
        .validate(std::path::Path::new("x/profile.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("x/profile.toml")
            && e.contains("factors.attention_growth_scale")
            && e.contains("200")
            && e.contains("[0.01, 100]"),
        "{e}"
    );
    p.factors.attention_growth_scale = 1.0;
    p.factors.dense_gemm_scale = 0.0;
    let e = p
        .validate(std::path::Path::new("x/profile.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("factors.dense_gemm_scale"), "{e}");
    p.factors.dense_gemm_scale = 1.0;
    p.factors.moe_token_scale = 1.5;
    p.factors.source = "test".into();
    let text = toml::to_string(&p.factors).unwrap();
    assert!(text.contains("moe_token_scale = 1.5"), "{text}");
    for absent in [
        "attention_growth_scale",
        "attention_fixed_scale",
        "moe_weight_scale",
        "dense_gemm_scale",
    ] {
        assert!(!text.contains(absent), "{absent} written at 1: {text}");
    }
    // An old profile's [factors] (no new fields) still loads, as identity for the new ones.
    let old: Factors =
        toml::from_str("moe_efficiency = 1.2\ncollective_bw_scale = 1.0\ncollective_latency_scale = 1.0\nstep_overhead_us = 0.0\nsource = \"old\"\n")
            .unwrap();
    assert_eq!(old.moe_efficiency, 1.2);
    assert_eq!(old.attention_growth_scale, 1.0);
    assert_eq!(old.moe_token_scale, 1.0);
}
