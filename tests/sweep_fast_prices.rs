//! The sweep's fast path gives the same step times whether a shape's prices come from its warm
//! memo (a sweep's order: one batch, many contexts, every knob, reusing the per-thread workloads
//! and table lines) or are priced afresh by `cost::price_quiet` for that scenario alone (memo
//! cleared, the scenarios visited in another order): within 1e-9 relative, over models with and
//! without MLA tables, CUDA graphs on and off, NCCL protocols and speculative steps.

use decodesim::scenario::Proto;
use decodesim::sim::fast::{Collectives, FastScenario, Launch};
use decodesim::sim::ScenarioRequest;
use decodesim::whatif::draft::{Draft, Method};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-9)
}

#[test]
fn warm_sweep_steps_equal_steps_priced_alone() {
    let cases = [
        ("kimi-k2.5", "rtx-pro-6000-8x-pcie", true),
        ("kimi-k2.5", "h200-8x-nvlink", false),
        ("llama-3.1-70b", "h200-8x-nvlink", false),
    ];
    let mut compared = 0;
    for (model, system, spec) in cases {
        let req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            ..ScenarioRequest::default()
        };
        let (s, p) = req.load().expect("scenario loads");
        let draft = spec.then(|| Draft::load(Method::Eagle3, None, &s.model).expect("drafter"));
        let fast = FastScenario::new(&s, &p, draft.as_deref()).expect("fitted");
        let colls: Vec<Collectives> = [Proto::Ll, Proto::Simple]
            .iter()
            .map(|&proto| {
                let mut t = s.clone();
                t.nccl.proto = proto;
                Collectives::new(&t, &p).expect("collectives")
            })
            .collect();
        let launches = [Launch::new(&p, true), Launch::new(&p, false)];
        // (batch, context, collectives, launch, draft tokens) in a sweep's nested order.
        let mut grid = Vec::new();
        for batch in [1u32, 7, 64, 250] {
            for context in (0..12u64).map(|i| 1000 + 977 * i * i) {
                for ci in 0..colls.len() {
                    for li in 0..launches.len() {
                        for k in if spec { vec![0u32, 1, 3] } else { vec![0] } {
                            grid.push((batch, context, ci, li, k));
                        }
                    }
                }
            }
        }
        let step = |&(b, c, ci, li, k): &(u32, u64, usize, usize, u32)| {
            if k == 0 {
                fast.step_us(b, c, &launches[li], &colls[ci])
            } else {
                fast.spec_step_us(b, c, k, &launches[li], &colls[ci])
                    .expect("drafter fitted")
                    .2
            }
        };
        fast.clear_memo();
        let warm: Vec<f64> = grid.iter().map(step).collect();
        // Alone, in a scrambled order: every shape priced from scratch for its own scenario.
        let n = grid.len();
        for j in 0..n {
            let i = (j * 7919) % n;
            fast.clear_memo();
            let alone = step(&grid[i]);
            assert!(
                warm[i].is_finite() && close(warm[i], alone),
                "{model} on {system}, (batch, context, proto, graphs, k) {:?}: warm {} vs alone {}",
                grid[i],
                warm[i],
                alone
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 576 + 2 * 192);
}

/// A sweep prices a batch's next contexts together (`step_us_busy_lanes`): each lane's step and
/// busy time are those of the context priced on its own, bit for bit, on tensor-parallel,
/// data-parallel (wide expert parallelism) and pipeline layouts, with CUDA graphs and eager
/// launches, four or eight lanes, and on contexts whose prices are new, already kept, or
/// repeated within one call.
#[test]
fn contexts_priced_together_equal_each_context_alone() {
    let dp16 = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(1),
        ..ScenarioRequest::default()
    };
    let mut dp16 = dp16;
    dp16.dp = Some(16);
    dp16.comm.ep_comm = decodesim::scenario::deployment::EpComm::RdmaLl;
    let mut pp2 = ScenarioRequest {
        model: "llama-3.1-70b".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(8),
        ..ScenarioRequest::default()
    };
    pp2.pp = Some(2);
    let reqs = [
        ScenarioRequest::default(),
        ScenarioRequest {
            model: "llama-3.1-70b".into(),
            system: "h200-8x-nvlink".into(),
            ..ScenarioRequest::default()
        },
        dp16,
        pp2,
    ];
    for req in reqs {
        let (s, p) = req.load().expect("scenario loads");
        let fast = FastScenario::new(&s, &p, None).expect("fitted");
        let coll = Collectives::new(&s, &p).expect("collectives");
        for graphs in [true, false] {
            let launch = Launch::new(&p, graphs);
            for batch in [1u32, 33, 250] {
                for contexts in [
                    [1000u64, 1001, 1002, 1003],
                    [1002, 1003, 1004, 1005],
                    [70_000, 512, 70_000, 9],
                ] {
                    same_together_as_alone(&fast, &s, graphs, batch, contexts, &launch, &coll);
                }
                let eight = [3000u64, 3001, 1002, 3003, 3004, 9, 3006, 3001];
                same_together_as_alone(&fast, &s, graphs, batch, eight, &launch, &coll);
            }
        }
    }
}

fn same_together_as_alone<const W: usize>(
    fast: &FastScenario,
    s: &decodesim::scenario::Scenario,
    graphs: bool,
    batch: u32,
    contexts: [u64; W],
    launch: &Launch,
    coll: &Collectives,
) {
    let together = fast.step_us_busy_lanes(batch, contexts, launch, coll);
    for (c, got) in contexts.iter().zip(together) {
        fast.clear_memo();
        let alone = fast.step_us_busy(batch, *c, launch, coll);
        assert!(
            got.0.to_bits() == alone.0.to_bits() && got.1 == alone.1,
            "{} on {} (pp {}), graphs {graphs}, batch {batch}, context {c}: {:?} together vs {:?} alone",
            s.model.name,
            s.system.name,
            s.layout.pp_size(),
            got.0,
            alone.0
        );
    }
}

/// The same for speculative steps: a drafter's passes and the verify pass played as lanes of
/// contexts give each context's step, draft and verify times and busy times, bit for bit.
#[test]
fn speculative_contexts_priced_together_equal_each_context_alone() {
    let cases = [
        (ScenarioRequest::default(), Method::Eagle3),
        (
            ScenarioRequest {
                model: "deepseek-v3".into(),
                system: "h200-8x-nvlink".into(),
                ..ScenarioRequest::default()
            },
            Method::Mtp,
        ),
    ];
    for (req, method) in cases {
        let (s, p) = req.load().expect("scenario loads");
        let draft = Draft::load(method, None, &s.model).expect("drafter");
        let fast = FastScenario::new(&s, &p, Some(&*draft)).expect("fitted");
        let coll = Collectives::new(&s, &p).expect("collectives");
        for graphs in [true, false] {
            let launch = Launch::new(&p, graphs);
            for (batch, k) in [(1u32, 1u32), (33, 3), (250, 2)] {
                let contexts = [3000u64, 3001, 1002, 3003, 3004, 9, 3006, 3001];
                let together = fast
                    .spec_step_us_busy_lanes(batch, contexts, k, &launch, &coll)
                    .expect("drafter fitted");
                for (c, got) in contexts.iter().zip(together) {
                    fast.clear_memo();
                    let alone = fast
                        .spec_step_us_busy(batch, *c, k, &launch, &coll)
                        .expect("drafter fitted");
                    let bits = |t: (f64, f64, f64)| [t.0, t.1, t.2].map(f64::to_bits);
                    assert!(
                        bits(got.0) == bits(alone.0) && got.1 == alone.1,
                        "{}: graphs {graphs}, batch {batch}, k {k}, context {c}: {:?} together vs {:?} alone",
                        s.model.name,
                        got.0,
                        alone.0
                    );
                    assert!(got.0 .2.is_finite() && got.0 .2 > got.0 .1);
                }
            }
        }
    }
}
