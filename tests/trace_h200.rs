//! The project's own 2-rank vLLM-like decode traces captured on the H200 machine
//! (`data/traces/h200/refstep_b{B}_c{ctx}_{setting}_rank{r}.{ns}.pt.trace.json.gz`): each
//! capture (the files that differ only in rank) has every rank, 3 decode steps per file found
//! from the `execute_context_0(0)_generation_{B}({B})` annotations, and a communication
//! wait/transfer split that is consistent across the ranks. The traces are committed: a missing
//! folder or capture is a failure. Every capture passes the one-run and complete-ranks checks,
//! and shows its scenario: 2 ranks, 4 layers, the batch of its file name.

use decodesim::accounting::align::AlignMethod;
use decodesim::accounting::infer::infer_scenario;
use decodesim::accounting::{summarize, SummaryOptions};
use decodesim::category::Category;
use decodesim::trace::classify::Classifier;
use decodesim::trace::rank::RankSource;
use decodesim::trace::steps::StepSource;
use regex::Regex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn captures() -> BTreeMap<String, Vec<PathBuf>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/traces/h200");
    assert!(
        dir.is_dir(),
        "{} is missing: the H200 traces are committed with the repository",
        dir.display()
    );
    let re = Regex::new(r"^(refstep_.+)_rank(\d+)\.\d+\.pt\.trace\.json(\.gz)?$").unwrap();
    let mut groups: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    {
        let rd = std::fs::read_dir(&dir).unwrap();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(c) = re.captures(&name) {
                groups.entry(c[1].to_string()).or_default().push(e.path());
            }
        }
    }
    assert_eq!(
        groups.len(),
        54,
        "{}: expected 54 captures (6 batches x 3 contexts x 3 NCCL settings)",
        dir.display()
    );
    groups
}

#[test]
fn own_h200_captures_have_all_ranks_three_decode_steps_and_consistent_comm_split() {
    let groups = captures();
    let c = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &c,
        step_marker: None,
        top_unclassified: 5,
        ranks: Default::default(),
    };
    let batch_re = Regex::new(r"^refstep_b(\d+)_").unwrap();
    for (capture, files) in groups {
        let s = summarize(&files, &opts).unwrap_or_else(|e| panic!("{capture}: {e}"));
        assert_eq!(s.ranks.len(), files.len(), "{capture}");
        let inf = infer_scenario(&s);
        let batch: u32 = batch_re.captures(&capture).unwrap()[1].parse().unwrap();
        assert_eq!(inf.ranks.as_ref().unwrap().value, 2, "{capture}");
        assert_eq!(inf.layers.as_ref().unwrap().value, 4, "{capture}");
        assert_eq!(inf.batch.as_ref().unwrap().value, batch, "{capture}");
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

#[test]
fn ranks_of_two_captures_are_refused_as_different_runs() {
    let groups = captures();
    let a = &groups["refstep_b16_c8192_default"];
    let b = &groups["refstep_b128_c1024_default"];
    let c = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &c,
        step_marker: None,
        top_unclassified: 5,
        ranks: Default::default(),
    };
    let rank0 = a
        .iter()
        .find(|p| p.to_string_lossy().contains("_rank0."))
        .unwrap();
    let rank1 = b
        .iter()
        .find(|p| p.to_string_lossy().contains("_rank1."))
        .unwrap();
    let err = summarize(&[rank0.clone(), rank1.clone()], &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("different runs") && err.contains("refstep_b16_c8192_default"),
        "{err}"
    );
}
