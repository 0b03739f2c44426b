//! The project's own 2-rank vLLM-like decode traces captured on the H200 machine
//! (`data/traces/h200/refstep_b{B}_c{ctx}_{setting}_rank{r}.{ns}.pt.trace.json.gz`): each
//! capture (the files that differ only in rank) has every rank, 3 decode steps per file found
//! from the `execute_context_0(0)_generation_{B}({B})` annotations, and a communication
//! wait/transfer split that is consistent across the ranks. Skips with a message until the
//! traces exist.

use decodesim::accounting::align::AlignMethod;
use decodesim::accounting::{summarize, SummaryOptions};
use decodesim::category::Category;
use decodesim::trace::classify::Classifier;
use decodesim::trace::rank::RankSource;
use decodesim::trace::steps::StepSource;
use regex::Regex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn captures() -> Option<BTreeMap<String, Vec<PathBuf>>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/traces/h200");
    let re = Regex::new(r"^(refstep_.+)_rank(\d+)\.\d+\.pt\.trace\.json(\.gz)?$").unwrap();
    let mut groups: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(c) = re.captures(&name) {
                groups.entry(c[1].to_string()).or_default().push(e.path());
            }
        }
    }
    if groups.is_empty() {
        println!(
            "skipping: no refstep_*_rank*.pt.trace.json.gz in {} yet",
            dir.display()
        );
        return None;
    }
    Some(groups)
}

#[test]
fn own_h200_captures_have_all_ranks_three_decode_steps_and_consistent_comm_split() {
    let Some(groups) = captures() else { return };
    let c = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &c,
        step_marker: None,
        top_unclassified: 5,
    };
    for (capture, files) in groups {
        let s = summarize(&files, &opts).unwrap_or_else(|e| panic!("{capture}: {e}"));
        assert_eq!(s.ranks.len(), files.len(), "{capture}");
        let mut ranks: Vec<u32> = s.ranks.iter().map(|r| r.rank).collect();
        ranks.sort_unstable();
        assert_eq!(
            ranks,
            (0..files.len() as u32).collect::<Vec<_>>(),
            "{capture}: ranks"
        );
        for r in &s.ranks {
            assert!(matches!(
                r.rank_source,
                RankSource::DistributedInfo | RankSource::FileName
            ));
            assert_eq!(
                r.step_source,
                StepSource::VllmExecute,
                "{capture} rank {}",
                r.rank
            );
            assert_eq!(r.step_time.n, 3, "{capture} rank {}: decode steps", r.rank);
            assert_eq!(r.selection, "decode");
            assert!(
                r.unclassified_share() < 0.01,
                "{capture}: {:?}",
                r.unclassified
            );
        }
        if s.ranks.len() > 1 {
            assert_eq!(s.alignment.method, AlignMethod::PerStep, "{capture}");
            assert!(s.alignment.aligned > 0, "{capture}: no collectives aligned");
            for k in 0..3 {
                let steps: Vec<_> = s
                    .ranks
                    .iter()
                    .map(|r| r.selected_steps().nth(k).unwrap())
                    .collect();
                for st in &steps {
                    let b = &st.breakdown;
                    assert!(
                        b.comm_wait_us >= 0.0 && b.comm_transfer_us > 0.0,
                        "{capture} step {k}"
                    );
                    assert!(
                        b.comm_wait_us + b.comm_transfer_us + 1e-6
                            >= b.busy_us[Category::Communication.index()]
                    );
                }
                // Aligned instances give every rank the same transfer time.
                if s.alignment.unmatched == 0 {
                    let t0 = steps[0].breakdown.comm_transfer_us;
                    for st in &steps {
                        assert!(
                            (st.breakdown.comm_transfer_us - t0).abs() < 1e-6 * t0.max(1.0),
                            "{capture} step {k}"
                        );
                    }
                }
            }
        }
    }
}
