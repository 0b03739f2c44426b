//! Parse + classify + breakdown of the largest public trace (profile_trace_rank_0.json.gz,
//! 62 MB of JSON), decompressed into memory first so the figure is MB/s of uncompressed JSON on
//! one core. Skips with a message when ../shared/traces/public is absent.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use decodesim::accounting::summary::summarize_parsed;
use decodesim::accounting::SummaryOptions;
use decodesim::trace::classify::Classifier;
use decodesim::trace::parse::{parse_bytes, ParseOptions};
use std::io::Read;
use std::path::Path;

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

criterion_group!(benches, bench);
criterion_main!(benches);
