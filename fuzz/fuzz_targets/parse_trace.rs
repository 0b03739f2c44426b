//! Any bytes, plain or gzip: the reader and the summary must return Ok or an error, never
//! panic, hang or run out of memory.
#![no_main]

use decodesim::trace::classify::Classifier;
use decodesim::trace::parse::{parse_bytes, ParseOptions};
use decodesim::accounting::summary::summarize_parsed;
use decodesim::accounting::SummaryOptions;
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static RULES: OnceLock<Classifier> = OnceLock::new();
    let classifier = RULES.get_or_init(Classifier::builtin);
    if let Ok(trace) = parse_bytes(data, Path::new("fuzz.json"), &ParseOptions::default()) {
        let opts = SummaryOptions { classifier, step_marker: None, top_unclassified: 5, ranks: Default::default() };
        let _ = summarize_parsed(vec![trace], &opts);
    }
});
