//! Wide expert parallelism at scale: the full timeline of one 144-rank decode step
//! (DeepSeek-V3 on 18 HGX H200 nodes, DP 144 × TP 1 = EP 144, low-latency RDMA all-to-all,
//! 32 redundant experts so that 256 + 32 fill 144 ranks evenly, batch 9,216 = 64 per rank).
//! Target: the whole simulation (workload, prices, engine over 144 ranks, per-rank breakdowns)
//! under 50 ms. Also the other 144-rank layout: Kimi-K2.5 as a TP 8 × PP 18 pipeline on the
//! same system (`--pp 18 --tp 8 --batch 64`, as `benches/simulate.rs`'s PP18 case).

use criterion::{criterion_group, criterion_main, Criterion};
use decodesim::scenario::deployment::EpComm;
use decodesim::sim::{engine_config, Engine, ScenarioRequest, Timeline};
use decodesim::workload::routing::Routing;
use decodesim::{cost, workload};
use std::hint::black_box;

fn request() -> ScenarioRequest {
    let mut r = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-18node-ib".into(),
        tp: Some(1),
        batch: 9216,
        context: 2048,
        ..Default::default()
    };
    r.dp = Some(144);
    r.comm.ep_comm = EpComm::RdmaLl;
    r.redundant_experts = Some(32);
    r
}

fn bench(c: &mut Criterion) {
    let (scenario, profile) = request().load().expect("wide-EP scenario");
    assert_eq!(scenario.ranks(), 144);
    let mut g = c.benchmark_group("wide_ep");
    g.sample_size(20);
    g.bench_function("simulate: 144-rank wide-EP step, full timeline", |b| {
        b.iter(|| {
            let sim = decodesim::simulate_loaded(scenario.clone(), profile.clone()).unwrap();
            black_box(sim.step_time_us())
        })
    });
    g.bench_function("workload: ops and routing draws, 144 ranks", |b| {
        b.iter(|| black_box(workload::build(black_box(&scenario))))
    });
    // A layer's fixed cost (placement, stream set-up), which the sweep's DP draws pay up to 512
    // times per batch: 512 layers of no token, per layer = the time / 512.
    let law = workload::routing::resolve(&Routing::PowerLaw { alpha: 0.66 }, 256, 8, 512);
    g.bench_function("routing: 512 layers of no token (fixed cost x 512)", |b| {
        b.iter(|| black_box(workload::routing::sample(&law, &[true; 512], 256, 8, 0, 7)))
    });
    let w = workload::build(&scenario);
    let pricing = cost::price(&w, &scenario, &profile).expect("priced");
    let cfg = engine_config(&scenario, &profile);
    let (mut engine, mut timeline) = (Engine::new(), Timeline::default());
    g.bench_function("engine only: 144 ranks", |b| {
        b.iter(|| {
            engine.run(black_box(&w), &pricing.base_us, &cfg, &mut timeline);
            black_box(timeline.step_time_us())
        })
    });
    g.bench_function("per-rank breakdowns: 144 ranks", |b| {
        b.iter(|| black_box(timeline.rank_breakdowns(&w)))
    });
    let mut pp = ScenarioRequest {
        model: "kimi-k2.5".into(),
        system: "h200-hgx-18node-ib".into(),
        tp: Some(8),
        batch: 64,
        ..Default::default()
    };
    pp.pp = Some(18);
    let (pp_scenario, pp_profile) = pp.load().expect("TP8 x PP18 scenario");
    assert_eq!(pp_scenario.ranks() * pp_scenario.layout.pp_size(), 144);
    g.bench_function("simulate: 144-rank TP8 x PP18 pipeline step", |b| {
        b.iter(|| {
            let sim = decodesim::simulate_loaded(pp_scenario.clone(), pp_profile.clone()).unwrap();
            black_box(sim.step_time_us())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
