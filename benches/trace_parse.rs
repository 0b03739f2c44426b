//! Parse + classify + breakdown, in MB/s of uncompressed JSON on one core (the trace held in
//! memory first):
//!
//! - `generated_mi300x_like`: a generated trace shaped like a real inference profile
//!   (`tests/common/kineto_like.rs`: python_function, cpu_op, runtime queries, launches, flows
//!   and kernels in the proportions of the public MI300X trace; ~35 MB), always available;
//! - the largest public trace (profile_trace_rank_0.json.gz, 62 MB of JSON), skipped with a
//!   message when ../shared/traces/public is absent.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use decodesim::accounting::summary::summarize_parsed;
use decodesim::accounting::SummaryOptions;
use decodesim::trace::classify::Classifier;
use decodesim::trace::parse::{parse_bytes, ParseOptions};
use std::io::Read;
use std::path::Path;

#[allow(dead_code)]
#[path = "../tests/common/kineto_like.rs"]
mod kineto_like;

fn generated(c: &mut Criterion) {
    let json = kineto_like::trace_bytes(96);
    let path = Path::new("generated.json");
    let classifier = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &classifier,
        step_marker: None,
        top_unclassified: 10,
        ranks: Default::default(),
    };
    let mut g = c.benchmark_group("trace");
    g.throughput(Throughput::Bytes(json.len() as u64));
    g.sample_size(20);
    g.bench_function("parse_generated_mi300x_like", |b| {
        b.iter(|| {
            parse_bytes(&json, path, &ParseOptions::default()).expect("generated trace parses")
        })
    });
    g.bench_function("parse_classify_breakdown_generated_mi300x_like", |b| {
        b.iter(|| {
            let t =
                parse_bytes(&json, path, &ParseOptions::default()).expect("generated trace parses");
            summarize_parsed(vec![t], &opts).expect("generated trace summarizes")
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/traces/public/profile_trace_rank_0.json.gz");
    let Ok(file) = std::fs::File::open(&path) else {
        eprintln!("skipping trace_parse: {} is absent", path.display());
        return;
    };
    let mut json = Vec::new();
    if let Err(e) = flate2::read::MultiGzDecoder::new(file).read_to_end(&mut json) {
        eprintln!(
            "skipping trace_parse: cannot decompress {}: {e}",
            path.display()
        );
        return;
    }
    let classifier = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &classifier,
        step_marker: None,
        top_unclassified: 10,
        ranks: Default::default(),
    };
    let mut g = c.benchmark_group("trace");
    g.throughput(Throughput::Bytes(json.len() as u64));
    g.sample_size(20);
    g.bench_function("parse_classify_breakdown_profile_trace_rank_0", |b| {
        b.iter(|| {
            let t =
                parse_bytes(&json, &path, &ParseOptions::default()).expect("public trace parses");
            summarize_parsed(vec![t], &opts).expect("public trace summarizes")
        })
    });
    g.finish();
}

criterion_group!(benches, generated, bench);
criterion_main!(benches);
