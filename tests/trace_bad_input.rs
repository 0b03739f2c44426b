//! Bad and odd input: every case is a clear error value or a documented skip, never a panic.

mod common;

use decodesim::accounting::summary::summarize_parsed;
use decodesim::accounting::{summarize, SummaryOptions};
use decodesim::trace::classify::Classifier;
use decodesim::trace::parse::{parse_bytes, parse_file, ParseOptions};
use decodesim::trace::TraceError;
use std::io::Write;
use std::path::{Path, PathBuf};

fn parse(bytes: &[u8]) -> Result<decodesim::trace::ParsedTrace, TraceError> {
    parse_bytes(bytes, Path::new("input.json"), &ParseOptions::default())
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn synthetic_json() -> Vec<u8> {
    serde_json::to_vec_pretty(&common::synth_trace(0, &[0.0], 2, true)).unwrap()
}

#[test]
fn truncated_gzip_is_a_gzip_error_naming_the_file() {
    let full = gz(&synthetic_json());
    let dir = common::scratch("truncated_gzip");
    let p = dir.join("cut.pt.trace.json.gz");
    std::fs::write(&p, &full[..full.len() / 2]).unwrap();
    let err = parse_file(&p, &ParseOptions::default()).unwrap_err();
    assert!(
        matches!(err, TraceError::Gzip { .. } | TraceError::Truncated { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("cut.pt.trace.json.gz") && (msg.contains("gzip") || msg.contains("truncated")),
        "{msg}"
    );
}

#[test]
fn every_prefix_of_a_trace_is_handled_without_panicking() {
    let text = synthetic_json();
    let z = gz(&text);
    for cut in (0..text.len()).step_by(7) {
        let _ = parse(&text[..cut]);
    }
    for cut in 0..z.len() {
        let _ = parse(&z[..cut]);
    }
    // The whole thing parses.
    assert!(parse(&text).is_ok() && parse(&z).is_ok());
}

#[test]
fn corrupted_bytes_never_panic() {
    let text = synthetic_json();
    let mut state = 0x2545F4914F6CDD1Du64;
    for _ in 0..300 {
        let mut t = text.clone();
        for _ in 0..4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let i = (state % t.len() as u64) as usize;
            t[i] = (state >> 32) as u8;
        }
        if let Ok(tr) = parse(&t) {
            let c = Classifier::builtin();
            let opts = SummaryOptions {
                classifier: &c,
                step_marker: None,
                top_unclassified: 3,
                ranks: Default::default(),
            };
            let _ = summarize_parsed(vec![tr], &opts);
        }
    }
}

#[test]
fn invalid_json_names_the_offset() {
    let err =
        parse(br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": }]}"#)
            .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, TraceError::Json { .. })
            && msg.contains("input.json")
            && msg.contains("byte"),
        "{msg}"
    );
    assert!(matches!(
        parse(b"\x00\x01binary"),
        Err(TraceError::Json { .. })
    ));
    assert!(matches!(
        parse(br#"{"traceEvents": [1, 2"#),
        Err(TraceError::Truncated { .. })
    ));
}

#[test]
fn invalid_utf8_is_replaced_not_fatal() {
    let mut t = br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm_"#.to_vec();
    t.extend_from_slice(b"\xc3\x28\xff");
    t.extend_from_slice(
        br#"", "pid": 0, "tid": 7, "ts": 5, "dur": 2, "args": {"correlation": 1}}]}"#,
    );
    let tr = parse(&t).unwrap();
    assert_eq!(tr.counts.lossy_utf8, 1);
    assert_eq!(tr.gpu_ops.len(), 1);
}

#[test]
fn integers_past_2_pow_53_and_64_are_read() {
    let tr = parse(
        br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
        "ts": 1700000000000000.5, "dur": 3, "args": {"correlation": 9007199254740993,
        "External id": 99999999999999999999999, "Comms Id": 18446744073709551615}}]}"#,
    )
    .unwrap();
    assert_eq!(tr.gpu_ops[0].correlation, Some(9007199254740993));
}

#[test]
fn missing_fields_are_skipped_and_counted() {
    let tr = parse(
        br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "no_ts", "dur": 1},
        {"cat": "kernel"}, "a string event", 17,
        {"ph": "X", "cat": "kernel", "name": "ok", "ts": 1, "dur": 1}]}"#,
    )
    .unwrap();
    assert_eq!(tr.gpu_ops.len(), 1);
    assert_eq!(tr.counts.malformed, 3);
    assert_eq!(tr.counts.total, 6);
    assert!(!tr.warnings.is_empty());
}

#[test]
fn old_schema_is_understood() {
    // Kineto before 2021: cat "Kernel"/"Runtime", lowercase "external id", no schemaVersion.
    let tr = parse(
        br#"{"distributedInfo": {"rank": 1}, "traceEvents": [
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5, "ts": 10, "dur": 3,
         "args": {"correlation": 44, "external id": 3}},
        {"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": "stream 7", "ts": 20, "dur": 30,
         "args": {"correlation": 44, "external id": 3, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#4", "pid": 5, "tid": 5, "ts": 0, "dur": 100}]}"#,
    )
    .unwrap();
    assert_eq!(
        (tr.gpu_ops.len(), tr.launches.len(), tr.annotations.len()),
        (1, 1, 1)
    );
    let c = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &c,
        step_marker: None,
        top_unclassified: 3,
        ranks: Default::default(),
    };
    let s = summarize_parsed(vec![tr], &opts).unwrap();
    assert_eq!(s.ranks[0].rank, 1);
    assert_eq!(s.ranks[0].steps.len(), 1);
    assert_eq!(s.breakdown.step_time_us, 30.0);
}

#[test]
fn empty_traces_are_errors_that_say_so() {
    let dir = common::scratch("empty");
    let zero = dir.join("zero.json");
    std::fs::write(&zero, b"").unwrap();
    assert!(matches!(
        parse_file(&zero, &ParseOptions::default()),
        Err(TraceError::Empty { .. })
    ));
    let no_events = dir.join("no_events.json");
    std::fs::write(&no_events, br#"{"schemaVersion": 1}"#).unwrap();
    assert!(matches!(
        parse_file(&no_events, &ParseOptions::default()),
        Err(TraceError::NoTraceEvents { .. })
    ));
    let cpu_only = dir.join("cpu_only.json");
    std::fs::write(&cpu_only, br#"{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 1}]}"#).unwrap();
    let c = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &c,
        step_marker: None,
        top_unclassified: 3,
        ranks: Default::default(),
    };
    let err = summarize(&[cpu_only], &opts).unwrap_err();
    assert!(matches!(err, TraceError::NoGpuActivity), "{err:?}");
    let empty_dir = dir.join("nothing");
    std::fs::create_dir_all(&empty_dir).unwrap();
    assert!(matches!(
        summarize(&[empty_dir], &opts),
        Err(TraceError::EmptyDirectory { .. })
    ));
    assert!(matches!(
        summarize(&[PathBuf::from("/no/such/trace.json")], &opts),
        Err(TraceError::NotATrace { .. })
    ));
}

#[test]
fn duplicate_ranks_are_refused() {
    let dir = common::scratch("dup");
    let a = dir.join("a.json");
    let b = dir.join("b.json");
    // Two different files (one and two decode steps) that both say rank 0.
    let doc =
        |steps| serde_json::to_vec(&common::synth_trace(0, &[0.0, 0.0], steps, true)).unwrap();
    std::fs::write(&a, doc(1)).unwrap();
    std::fs::write(&b, doc(2)).unwrap();
    let c = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &c,
        step_marker: None,
        top_unclassified: 3,
        ranks: Default::default(),
    };
    let err = summarize(&[a, b], &opts).unwrap_err().to_string();
    assert!(
        err.contains("rank 0") && err.contains("a.json") && err.contains("b.json"),
        "{err}"
    );
}

// ---- one test per bad-input class of issue 8, each through the command line ----

/// A synthetic one-rank trace whose attention kernel in the last step lasts `dur` µs.
fn write_with_kernel_dur(dir: &Path, name: &str, dur: &str) -> PathBuf {
    let mut doc = common::synth_trace(0, &[0.0], 2, true);
    let events = doc["traceEvents"].as_array_mut().unwrap();
    let k = events
        .iter()
        .rposition(|e| e["name"].as_str().is_some_and(|n| n.starts_with("fmha")))
        .unwrap();
    events[k]["dur"] = serde_json::json!(0.0);
    let text = serde_json::to_string(&doc).unwrap().replacen(
        r#""dur":0.0"#,
        &format!(r#""dur":{dur}"#),
        1,
    );
    // The replaced dur must be the fmha kernel's: it is the only zero duration.
    assert_eq!(text.matches(&format!(r#""dur":{dur}"#)).count(), 1);
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_kernel_longer_than_the_trace_is_an_error_naming_file_event_and_value() {
    let dir = common::scratch("bad_huge_dur");
    for (name, dur, why) in [
        ("d23.json", "1e23", "an hour"),
        ("d308.json", "1e308", "an hour"),
        ("d9.json", "1e9", "rest of the trace"),
    ] {
        let p = write_with_kernel_dur(&dir, name, dur);
        let (ok, out, err) = common::decodesim_bin(&["trace", "summarize", p.to_str().unwrap()]);
        assert!(!ok, "{out}");
        assert!(
            err.contains(name) && err.contains("fmhaSm100f") && err.contains(why),
            "{err}"
        );
        // Written as typed (1e23, not 24 digits).
        let v: f64 = dur.parse().unwrap();
        let shown = if v < 1e15 {
            v.to_string()
        } else {
            format!("{v:e}")
        };
        assert!(err.contains(&format!("dur {shown} µs")), "{err}");
        assert!(err.len() < 400, "{err}");
    }
}

#[test]
fn trailing_garbage_is_an_error_naming_the_byte_offset() {
    let dir = common::scratch("bad_trailing");
    let mut text = synthetic_json();
    let end = text.len();
    text.extend_from_slice(b"\n{\"traceEvents\": []}");
    let p = dir.join("two.json");
    std::fs::write(&p, &text).unwrap();
    let (ok, _, err) = common::decodesim_bin(&["trace", "summarize", p.to_str().unwrap()]);
    assert!(
        !ok && err.contains("two.json")
            && err.contains(&format!("byte {}", end + 1))
            && err.contains("trailing garbage"),
        "{err}"
    );
    // Also inside gzip.
    let gzp = dir.join("two.json.gz");
    std::fs::write(&gzp, gz(&text)).unwrap();
    let (ok, _, err) = common::decodesim_bin(&["trace", "summarize", gzp.to_str().unwrap()]);
    assert!(!ok && err.contains("trailing garbage"), "{err}");
}

#[test]
fn wrong_types_in_kept_events_are_errors_not_defaults() {
    let err = parse(
        br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": true}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("input.json") && err.contains("invalid type"),
        "{err}"
    );
    let err = parse(
        br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -3}]}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("'dur'") && err.contains("-3") && err.contains("at least 0"),
        "{err}"
    );
}

#[test]
fn rules_that_are_not_regular_files_are_refused_before_reading() {
    let dir = common::scratch("bad_rules");
    let paths = common::write_ranks(&dir, &[0.0], 1, false);
    let p = paths[0].to_str().unwrap();
    for rules in ["/dev/zero", dir.to_str().unwrap()] {
        let (ok, _, err) = common::decodesim_bin(&["trace", "summarize", p, "--rules", rules]);
        assert!(
            !ok && err.contains(rules) && err.contains("not a regular file"),
            "{rules}: {err}"
        );
    }
}

#[test]
fn a_fifo_or_device_as_a_trace_is_refused_without_hanging() {
    let dir = common::scratch("bad_fifo");
    let fifo = dir.join("pipe.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "mkfifo is needed for this test");
    for p in [fifo.to_str().unwrap(), "/dev/zero"] {
        let (ok, _, err) = common::decodesim_bin(&["trace", "summarize", p]);
        assert!(
            !ok && err.contains(p) && err.contains("not a regular file"),
            "{p}: {err}"
        );
    }
}

#[test]
fn duplicate_and_foreign_rank_files_are_refused_through_the_cli() {
    let dir = common::scratch("bad_ranks_cli");
    let paths = common::write_ranks(&dir.join("run"), &[0.0, 0.0], 1, true);
    let a = paths[0].to_str().unwrap();
    let (ok, _, err) = common::decodesim_bin(&["trace", "summarize", a, a]);
    assert!(!ok && err.contains("passed twice"), "{err}");
    let (ok, _, err) = common::decodesim_bin(&["trace", "summarize", a]);
    assert!(!ok && err.contains("missing rank(s) 1"), "{err}");
    let (ok, _, err) = common::decodesim_bin(&["trace", "summarize", a, "--allow-partial-ranks"]);
    assert!(ok, "{err}");
    let other = common::write_ranks(&dir.join("other"), &[0.0, 0.0, 0.0], 1, true);
    let (ok, _, err) =
        common::decodesim_bin(&["trace", "summarize", a, other[1].to_str().unwrap()]);
    assert!(
        !ok && err.contains("different runs") && err.contains("world_size"),
        "{err}"
    );
}

/// One synthetic rank (a prefill and two decode steps) with `edit` applied to its events.
fn write_edited(dir: &Path, name: &str, edit: impl Fn(&mut Vec<serde_json::Value>)) -> PathBuf {
    let mut doc = common::synth_trace(0, &[0.0], 2, true);
    edit(doc["traceEvents"].as_array_mut().unwrap());
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(&doc).unwrap()).unwrap();
    p
}

fn summarize_cli(p: &Path, extra: &[&str]) -> (bool, String, String) {
    let args = [&["trace", "summarize", p.to_str().unwrap()][..], extra].concat();
    common::decodesim_bin(&args)
}

/// A kernel whose `ts` lies hours past the rest of the trace is a corrupt timestamp: an error
/// naming the file, the event and the value, not a step stretched to it.
#[test]
fn a_timestamp_far_outside_the_trace_is_an_error_naming_it() {
    let dir = common::scratch("bad_ts");
    for (name, ts, shown) in [
        ("t300.json", 1e300, "1.000e300"),
        ("t17.json", 1e17, "1.000e17"),
        ("t10.json", 1e10, "10000000000.000"),
    ] {
        let p = write_edited(&dir, name, |ev| {
            let k = ev
                .iter()
                .rposition(|e| e["name"].as_str().is_some_and(|n| n.starts_with("fmha")))
                .unwrap();
            ev[k]["ts"] = serde_json::json!(ts);
        });
        let (ok, out, err) = summarize_cli(&p, &[]);
        assert!(!ok, "{out}");
        assert!(
            err.contains(name) && err.contains("fmhaSm100f") && err.contains(shown),
            "{err}"
        );
        assert!(err.contains("corrupt 'ts'"), "{err}");
    }
}

/// Step markers that cover no GPU work (zero length: the launches fall outside) cannot tell
/// the steps apart: an error, not a 0 µs step nor the whole trace as one step.
#[test]
fn zero_length_step_markers_are_an_error_not_empty_steps() {
    let dir = common::scratch("bad_markers");
    let p = write_edited(&dir, "dur0.json", |ev| {
        for e in ev.iter_mut().filter(|e| e["cat"] == "user_annotation") {
            e["dur"] = serde_json::json!(0.0);
        }
    });
    let (ok, out, err) = summarize_cli(&p, &[]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("dur0.json")
            && err.contains("3 step marker(s)")
            && err.contains("--step-marker"),
        "{err}"
    );
}

/// A step marker whose `dur` overruns into the next steps does not take their work: each step
/// ends where the next marker starts, so the steps are those of the untouched trace.
#[test]
fn an_overrunning_step_marker_does_not_take_the_next_steps() {
    let dir = common::scratch("overrun_marker");
    let plain = write_edited(&dir, "plain.json", |_| {});
    let over = write_edited(&dir, "over.json", |ev| {
        for e in ev.iter_mut().filter(|e| e["cat"] == "user_annotation") {
            e["dur"] = serde_json::json!(1e9);
        }
    });
    let json = |p: &Path| {
        let (ok, out, err) = summarize_cli(p, &["--format", "json"]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["ranks"][0]["step_time_us"].clone()
    };
    let (a, b) = (json(&plain), json(&over));
    assert!(a["median"].as_f64().unwrap() > 0.0, "{a}");
    assert_eq!(a, b);
}

/// `--step-marker` that matches no annotation is an error naming the pattern and some of the
/// annotations the traces hold, not one whole-trace step.
#[test]
fn a_step_marker_matching_nothing_is_an_error() {
    let dir = common::scratch("marker_nomatch");
    let p = write_edited(&dir, "r0.json", |_| {});
    let (ok, out, err) = summarize_cli(&p, &["--step-marker", "nomatch_xyz"]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("nomatch_xyz") && err.contains("execute_context"),
        "{err}"
    );
    let (ok, _, err) = summarize_cli(&p, &["--step-marker", "execute_context_0"]);
    assert!(ok, "{err}");
}

/// Launches of different steps carrying one correlation id (a merged or rewritten trace): the
/// GPU work cannot be matched to its steps, so it is an error, not every step taking all work.
#[test]
fn a_correlation_id_shared_by_launches_is_an_error() {
    let dir = common::scratch("shared_corr");
    let p = write_edited(&dir, "corr.json", |ev| {
        for e in ev.iter_mut() {
            if e["args"]["correlation"].is_number() {
                e["args"]["correlation"] = 1.into();
            }
            if e["cat"] == "ac2g" {
                e["id"] = 1.into();
            }
        }
    });
    let (ok, out, err) = summarize_cli(&p, &[]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("corr.json") && err.contains("correlation id 1"),
        "{err}"
    );
}
