//! `decodesim sweep` in the library after loading: scenarios priced by the fast path and written
//! as CSV (to a sink), per scenario, over many contexts (each (batch, context) pair new to the
//! memo, the hard case) and over the README's usual grid. `benches/sweep_cpu.sh` measures the
//! release binary as a user runs it (CPU µs per scenario and peak RSS).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use decodesim::report::sweep::{Kind, Writer};
use decodesim::sim::ScenarioRequest;
use decodesim::whatif::draft::Method;
use decodesim::whatif::sweep::{self, KvBudget, SweepRequest};

fn request(batch: Vec<u32>, context: Vec<u64>) -> SweepRequest {
    SweepRequest {
        base: ScenarioRequest::default(),
        batch,
        context,
        proto: vec![decodesim::scenario::Proto::Ll],
        algo: vec![decodesim::scenario::Algo::Ring],
        cuda_graphs: vec![true],
        draft_tokens: vec![0],
        method: Method::Eagle3,
        draft: None,
        acceptance: None,
        max_work: u64::MAX,
        include_infeasible: false,
        // The layout lists: empty, the base's own layout.
        ..SweepRequest::default()
    }
}

fn bench(c: &mut Criterion) {
    // The signature the sweep takes, the crate's error included.
    #[allow(clippy::result_large_err)]
    let budget = |_: &decodesim::scenario::Scenario, _: &decodesim::cost::CalibrationProfile, _| {
        Ok(KvBudget {
            num_blocks: 1 << 20,
            tokens_per_block: 16,
            max_num_seqs: 1024,
        })
    };
    let mut g = c.benchmark_group("sweep");
    g.sample_size(10);
    // 64 batches × 1,024 distinct contexts: every scenario prices its attention anew.
    let many = request(
        (1..=64).collect(),
        (0..1024u64).map(|i| 1000 + 37 * i).collect(),
    );
    g.throughput(Throughput::Elements(many.count() as u64));
    // Loading and fitting (~0.2 s, once per sweep) outside the loop: the rows alone. A memo
    // entry keeps 16 contexts, so every iteration prices the 1,024 contexts anew.
    let prepared = sweep::prepare(&many, &budget).expect("prepared");
    g.bench_function("65,536 scenarios over 1,024 contexts, CSV", |b| {
        b.iter(|| {
            let mut out = Writer::new(std::io::sink(), Kind::Csv, false, decodesim::Error::Output);
            prepared.stream(&mut out, &|_| {}).expect("sweep")
        })
    });
    // 256 batches × 8 contexts × graphs on/off: the memo's easy case.
    let mut usual = request(
        (1..=256).collect(),
        vec![1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072],
    );
    usual.cuda_graphs = vec![true, false];
    g.throughput(Throughput::Elements(usual.count() as u64));
    // The same after the first iteration: every shape in the memo (the recursion and the
    // formatting alone).
    let prepared = sweep::prepare(&usual, &budget).expect("prepared");
    g.bench_function("4,096 scenarios over 8 contexts, CSV, memo warm", |b| {
        b.iter(|| {
            let mut out = Writer::new(std::io::sink(), Kind::Csv, false, decodesim::Error::Output);
            prepared.stream(&mut out, &|_| {}).expect("sweep")
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
