//! Simulation speed: the default scenario's full 8-rank timeline (Kimi-K2.5, TP=8, batch 32,
//! 1,524 kernels per rank). Target: at most 50 µs per step on one core.

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

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
