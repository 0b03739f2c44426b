//! What intervals add to one what-if row: the default Kimi-K2.5 scenario on the default
//! profile (AIConfigurator tables, default routing: five sources drawn), 200 paired draws.
//! Each figure includes fitting the fast path for the row (`Drawn::new`), as the commands pay it.

use criterion::{criterion_group, criterion_main, Criterion};
use decodesim::sim::ScenarioRequest;
use decodesim::whatif::draft::{Draft, Method};
use decodesim::whatif::uncertainty::{speedup_interval, Drawn, DEFAULT_DRAWS};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let (s, p) = ScenarioRequest::default().load().expect("default scenario");
    let draft = Draft::load(Method::Eagle3, None, &s.model).expect("draft");
    let mut g = c.benchmark_group("intervals");
    g.sample_size(10);
    // `whatif --vary`: one variant's step under 200 draws (its own fast path fitted).
    g.bench_function("vary row: fit + 200 draws", |b| {
        b.iter(|| {
            let d = Drawn::new(&s, &p, None, DEFAULT_DRAWS, 1).expect("drawn");
            black_box(d.step_ratios(s.batch, s.context))
        })
    });
    // `whatif spec-decode`: the plain and the k = 3 speculative step under the same 200 draws
    // (speculative passes fitted too), and the speedup's quantiles.
    g.bench_function("spec-decode row k=3: fit + 200 paired draws", |b| {
        b.iter(|| {
            let d = Drawn::new(&s, &p, Some(&draft), DEFAULT_DRAWS, 1).expect("drawn");
            let base = d.step_ratios(s.batch, s.context);
            let spec = d.spec_step_ratios(s.batch, s.context, 3).expect("drafter");
            black_box(speedup_interval(1.2, &base, &spec))
        })
    });
    // The draws alone, fast path already fitted and its memo warm (what a further row of the
    // same scenario costs, e.g. another k).
    let d = Drawn::new(&s, &p, Some(&draft), DEFAULT_DRAWS, 1).expect("drawn");
    g.bench_function("spec-decode row k=3: 200 paired draws, warm", |b| {
        b.iter(|| {
            let base = d.step_ratios(s.batch, s.context);
            let spec = d.spec_step_ratios(s.batch, s.context, 3).expect("drafter");
            black_box(speedup_interval(1.2, &base, &spec))
        })
    });
    // Yardstick: the fast path's warm plain step (324 ns on an idle core of this machine,
    // README Performance): the ratio says how loaded the machine was during this run.
    let launch = decodesim::sim::fast::Launch::new(&p, true);
    let coll = decodesim::sim::fast::Collectives::new(&s, &p).expect("collectives");
    let mut batch = 0u32;
    g.bench_function("yardstick: fast path plain step, warm", |b| {
        b.iter(|| {
            batch = batch % 256 + 1;
            black_box(d.fast.step_us(black_box(batch), 4096, &launch, &coll))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
