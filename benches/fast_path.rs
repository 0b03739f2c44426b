//! The aggregate fast path: scenarios per second per core for the default Kimi-K2.5 scenario
//! (plain step amortised over a sweep and cold, and a speculative step at k = 3), a DP 16 wide-EP
//! step and its two-batch-overlap rows, beside the full 8-rank timeline.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use decodesim::sim::fast::{Collectives, FastScenario, Launch};
use decodesim::sim::ScenarioRequest;
use decodesim::whatif::draft::{Draft, Method};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let (s, p) = ScenarioRequest::default().load().expect("default scenario");
    let draft = Draft::load(Method::Eagle3, None, &s.model).expect("draft");
    let fast = FastScenario::new(&s, &p, Some(&draft.drafter)).expect("fitted");
    let launch = Launch::new(&p, true);
    let coll = Collectives::new(&s, &p).expect("collectives");
    let mut g = c.benchmark_group("fast path");
    g.throughput(Throughput::Elements(1));
    let mut batch = 0u32;
    g.bench_function("kimi-k2.5 plain step (scenario)", |b| {
        b.iter(|| {
            batch = batch % 256 + 1;
            black_box(fast.step_us(black_box(batch), 4096, &launch, &coll))
        })
    });
    // Cold: this thread's memo emptied before every scenario, so each op shape is priced by
    // cost::price (what the first scenario of a sweep pays per distinct shape).
    g.bench_function("kimi-k2.5 plain step, cold (scenario)", |b| {
        b.iter(|| {
            batch = batch % 256 + 1;
            fast.clear_memo();
            black_box(fast.step_us(black_box(batch), 4096, &launch, &coll))
        })
    });
    g.bench_function("kimi-k2.5 eagle3 k=3 step (scenario)", |b| {
        b.iter(|| {
            batch = batch % 256 + 1;
            black_box(fast.spec_step_us(black_box(batch), 4096, 3, &launch, &coll))
        })
    });
    // Data-parallel attention with wide EP: DeepSeek-V3 at DP 16 × TP 1 over two nodes,
    // low-latency RDMA all-to-all (the slowest rank's expert loads drawn once per batch).
    let mut wide = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(1),
        ..ScenarioRequest::default()
    };
    wide.dp = Some(16);
    wide.comm.ep_comm = decodesim::scenario::deployment::EpComm::RdmaLl;
    let (ws, wp) = wide.load().expect("wide-EP scenario");
    let wfast = FastScenario::new(&ws, &wp, None).expect("fitted");
    let (wlaunch, wcoll) = (
        Launch::new(&wp, true),
        Collectives::new(&ws, &wp).expect("collectives"),
    );
    let mut context = 1000u64;
    g.bench_function("deepseek-v3 dp16 rdma-ll plain step (scenario)", |b| {
        b.iter(|| {
            batch = batch % 250 + 1;
            context = 1000 + (context + 1) % 400;
            black_box(wfast.step_us(black_box(batch), context, &wlaunch, &wcoll))
        })
    });
    // Two-batch overlap on that layout, as a sweep walks it: a batch's contexts 1000..=4999
    // eight at a time (knots played, the rows between them interpolated: `sim::fast::tbo_knots`),
    // then the next batch.
    let mut overlap = wide.clone();
    overlap.tbo = true;
    let (ts, tp) = overlap.load().expect("overlap scenario");
    let tfast = FastScenario::new(&ts, &tp, None).expect("fitted");
    let (tlaunch, tcoll) = (
        Launch::new(&tp, true),
        Collectives::new(&ts, &tp).expect("collectives"),
    );
    g.throughput(Throughput::Elements(8));
    let (mut tbatch, mut first) = (2u32, 1000u64);
    g.bench_function(
        "deepseek-v3 dp16 tbo, 8 contexts of a batch (8 scenarios)",
        |b| {
            b.iter(|| {
                let contexts: [u64; 8] = std::array::from_fn(|j| first + j as u64);
                first += 8;
                if first >= 5000 {
                    first = 1000;
                    tbatch = tbatch % 250 + 2;
                }
                black_box(tfast.step_us_busy_lanes(black_box(tbatch), contexts, &tlaunch, &tcoll))
            })
        },
    );
    g.finish();
    c.bench_function("full timeline: simulate_loaded, default scenario", |b| {
        b.iter(|| {
            black_box(
                decodesim::sim::simulate_loaded(s.clone(), p.clone())
                    .expect("simulated")
                    .step_time_us(),
            )
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
