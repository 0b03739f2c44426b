//! Simulation speed: the default scenario's full 8-rank timeline (Kimi-K2.5, TP=8, batch 32,
//! 1,524 kernels per rank). Target: at most 50 µs per step on one core. And a pipeline of 144
//! ranks (TP8 x PP18) through the whole `simulate`: under 50 ms.

use criterion::{criterion_group, criterion_main, Criterion};
use decodesim::cost;
use decodesim::sim::{engine_config, ScenarioRequest};
use decodesim::sim::{Engine, Timeline};
use decodesim::workload;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let (scenario, profile) = ScenarioRequest::default().load().expect("default scenario");
    let w = workload::build(&scenario);
    let pricing = cost::price(&w, &scenario, &profile).expect("priced");
    let cfg = engine_config(&scenario, &profile);
    let mut engine = Engine::new();
    let mut timeline = Timeline::default();
    c.bench_function("engine: default scenario, 8 ranks", |b| {
        b.iter(|| {
            engine.run(
                black_box(&w),
                black_box(&pricing.base_us),
                &cfg,
                &mut timeline,
            );
            black_box(timeline.step_time_us())
        })
    });
    c.bench_function("build + price + engine: default scenario", |b| {
        b.iter(|| {
            let w = workload::build(black_box(&scenario));
            let p = cost::price(&w, &scenario, &profile).expect("priced");
            engine.run(&w, &p.base_us, &cfg, &mut timeline);
            black_box(timeline.step_time_us())
        })
    });
    c.bench_function("per-rank breakdowns of a simulated step", |b| {
        b.iter(|| black_box(timeline.rank_breakdowns(&w)))
    });
}

/// Pipeline parallelism at 144 ranks: Kimi-K2.5 at TP8 x PP18 on 18 H200 nodes, batch 64,
/// the whole `simulate` (every stage built, priced and played, the schedule composed into one
/// timeline, breakdowns of all 144 ranks). Target: under 50 ms.
fn bench_pipeline(c: &mut Criterion) {
    let mut r = ScenarioRequest {
        system: "h200-hgx-18node-ib".into(),
        tp: Some(8),
        batch: 64,
        ..Default::default()
    };
    r.pp = Some(18);
    let (scenario, profile) = r.load().expect("pipeline scenario");
    c.bench_function("simulate: TP8 x PP18, 144 ranks", |b| {
        b.iter(|| {
            let sim = decodesim::sim::simulate_loaded(scenario.clone(), profile.clone())
                .expect("simulated");
            black_box(sim.step_time_us())
        })
    });
}

criterion_group! {
    name = pipeline;
    config = Criterion::default().sample_size(10).measurement_time(std::time::Duration::from_secs(5));
    targets = bench_pipeline
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches, pipeline);
