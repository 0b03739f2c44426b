//! Streaming, gzip-aware reader of Kineto (torch.profiler) Chrome traces.
//!
//! The file is walked one event at a time with [`crate::trace::scan`]; each event's `cat` is
//! sniffed from its raw bytes, and only the categories the analysis needs (GPU kernels, memcpy
//! and memset, step annotations on both timelines, runtime launch calls) are decoded. Python
//! stack events, which are most of a vLLM trace, are never decoded, and memory is bounded by the
//! kept events rather than the file.
//!
//! Tolerated and documented: the old schema (`cat` "Kernel"/"Runtime", lowercase
//! `external id`, no `schemaVersion`), integers past 2^53 (read as floats or wrapped ids, never
//! an error), ids written as strings (`"stream 7"`), invalid UTF-8 (replaced by U+FFFD and
//! counted), events missing a needed field (skipped and counted), a top-level array instead of
//! an object. Errors: a path that is not a regular file or is larger than a trace may be
//! (refused before reading, [`crate::files::check_input`]), unreadable or truncated gzip,
//! invalid JSON inside a kept event, JSON that ends early, bytes after the top-level value, a
//! file without `traceEvents`; in a kept event, a field of the wrong type, a `ts`/`dur` that is
//! negative or not finite, and a GPU op lasting longer than the trace itself (see
//! [`MAX_DURATION_US`]), which would otherwise become the step time.

mod event;
mod raw;
mod stream;

use super::error::{Result, TraceError};
use super::format::TraceFormat;
use super::model::{Interner, ParsedTrace};
use super::scan::Input;
use regex::Regex;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use stream::Parser;

/// How many tolerated problems are described in `ParsedTrace::warnings` (the rest are counted).
const MAX_WARNINGS: usize = 5;

/// No GPU op lasts an hour: a profiled window is seconds long (a trace of an hour would be many
/// gigabytes), so a longer `dur` is corrupt or in the wrong unit. Shorter durations are held
/// against the span of the rest of the trace instead.
const MAX_DURATION_US: f64 = 3.6e9;

/// What the parser should keep beyond its fixed set.
#[derive(Debug, Clone, Copy, Default)]
pub struct ParseOptions<'a> {
    /// A user step marker (`--step-marker`): `cpu_op` events whose name matches it are kept
    /// as annotations, since some frameworks mark steps with plain ops.
    pub step_marker: Option<&'a Regex>,
}

/// Reads a trace file (`.json` or gzip, detected from the magic bytes, not the extension:
/// [`TraceFormat::detect`]).
pub fn parse_file(path: &Path, opts: &ParseOptions) -> Result<ParsedTrace> {
    let io_err = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = crate::files::open_input(path, crate::files::InputKind::Trace)
        .map_err(|e| input_error(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let format = TraceFormat::detect(reader.fill_buf().map_err(io_err)?);
    if format == TraceFormat::Gzip {
        parse_reader(
            flate2::bufread::MultiGzDecoder::new(reader),
            path,
            true,
            opts,
        )
    } else {
        parse_reader(reader, path, false, opts)
    }
}

/// A refusal of `crate::files` as a trace error (same file, same words).
pub(crate) fn input_error(path: &Path, e: crate::error::Error) -> TraceError {
    match e {
        crate::error::Error::Read { path, source } => TraceError::Io { path, source },
        crate::error::Error::Input { path, problem } => TraceError::Input { path, problem },
        other => TraceError::Input {
            path: path.to_path_buf(),
            problem: other.to_string(),
        },
    }
}

/// Reads a trace held in memory (plain JSON or gzip); used by benchmarks and the fuzz target.
pub fn parse_bytes(bytes: &[u8], path: &Path, opts: &ParseOptions) -> Result<ParsedTrace> {
    if TraceFormat::detect(bytes) == TraceFormat::Gzip {
        parse_reader(flate2::read::MultiGzDecoder::new(bytes), path, true, opts)
    } else {
        parse_reader(bytes, path, false, opts)
    }
}

/// Reads a trace from any reader of JSON text. `gzip` only changes how read errors are named.
fn parse_reader<R: Read>(
    reader: R,
    path: &Path,
    gzip: bool,
    opts: &ParseOptions,
) -> Result<ParsedTrace> {
    let mut p = Parser {
        input: Input::new(reader),
        path: path.to_path_buf(),
        gzip,
        opts: *opts,
        interner: Interner::default(),
        out: ParsedTrace {
            path: path.to_path_buf(),
            ..ParsedTrace::default()
        },
    };
    p.document()?;
    p.trailing()?;
    let mut out = p.out;
    out.names = p.interner.into_names();
    check_durations(&out, path)?;
    keep_linked_launches(&mut out);
    Ok(out)
}

/// Drops the runtime calls whose correlation id no GPU op carries, once their spans have been
/// checked ([`check_durations`]): only a call that launched GPU work can put it in a step
/// (`steps::find_steps` looks launches up among the ops' ids) or blame a gap on the CPU
/// (`summary::gap_stats` looks ops' ids up among the launches), so the summary is the same
/// without them. In a real trace three quarters of the runtime calls are device queries and
/// attribute calls; keeping them cost 32 bytes each for the whole summary.
fn keep_linked_launches(out: &mut ParsedTrace) {
    let mut ids: Vec<u64> = out.gpu_ops.iter().filter_map(|o| o.correlation).collect();
    ids.sort_unstable();
    ids.dedup();
    out.launches
        .retain(|l| ids.binary_search(&l.correlation).is_ok());
    out.launches.shrink_to_fit();
}

/// Refuses GPU ops longer than [`MAX_DURATION_US`] or than the span of the rest of the trace
/// (every other kept event, start to end). Only checked when at least two other events exist:
/// a trace of one or two kernels has no span to hold a duration against.
fn check_durations(t: &ParsedTrace, path: &Path) -> Result<()> {
    let spans = t
        .gpu_ops
        .iter()
        .map(|o| (o.start_us, o.end_us))
        .chain(t.annotations.iter().map(|a| (a.start_us, a.end_us)))
        .chain(t.launches.iter().map(|l| (l.start_us, l.end_us)));
    // The two smallest starts and two largest ends give the span without any one event.
    let ([s1, s2], [e1, e2], n) = two_extremes(spans);
    for o in &t.gpu_ops {
        let dur = o.end_us - o.start_us;
        let name = || crate::units::clip(t.name(o.name), 80);
        if dur > MAX_DURATION_US || !o.end_us.is_finite() {
            return Err(TraceError::Duration {
                path: path.to_path_buf(),
                event: name(),
                value: dur,
                why: format!(
                    "longer than {} µs (an hour): no GPU op of a profiled window lasts that long",
                    MAX_DURATION_US
                ),
            });
        }
        if n >= 3 {
            let lo = if o.start_us == s1 { s2 } else { s1 };
            let hi = if o.end_us == e1 { e2 } else { e1 };
            let span = hi - lo;
            // A start an hour past the end of everything else (or an end an hour before its
            // start) is a corrupt timestamp: taken as it is, it would stretch a step to it.
            if o.start_us > hi + MAX_DURATION_US || o.end_us < lo - MAX_DURATION_US {
                let (side, gap) = if o.start_us > hi {
                    ("after the rest of the trace ends", o.start_us - hi)
                } else {
                    ("before the rest of the trace starts", lo - o.end_us)
                };
                let show = |v: f64| {
                    if v.abs() < 1e15 {
                        format!("{v:.3}")
                    } else {
                        format!("{v:.3e}")
                    }
                };
                return Err(TraceError::Timestamp {
                    path: path.to_path_buf(),
                    event: name(),
                    ts: show(o.start_us),
                    gap: show(gap),
                    side,
                });
            }
            if dur > span {
                return Err(TraceError::Duration {
                    path: path.to_path_buf(),
                    event: name(),
                    value: dur,
                    why: format!(
                        "longer than the whole rest of the trace ({span:.3} µs from its first event to its last)"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The two smallest starts and the two largest ends of `spans` (±∞ where there are fewer),
/// and how many spans there are.
fn two_extremes(spans: impl Iterator<Item = (f64, f64)>) -> ([f64; 2], [f64; 2], usize) {
    let (mut s1, mut s2, mut e1, mut e2) = (
        f64::INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    );
    let mut n = 0usize;
    for (s, e) in spans {
        n += 1;
        if s < s1 {
            s2 = s1;
            s1 = s;
        } else if s < s2 {
            s2 = s;
        }
        if e > e1 {
            e2 = e1;
            e1 = e;
        } else if e > e2 {
            e2 = e;
        }
    }
    ([s1, s2], [e1, e2], n)
}

#[cfg(test)]
mod tests {
    use super::stream::sniff_cat;
    use super::*;

    fn parse(text: &str) -> Result<ParsedTrace> {
        parse_bytes(
            text.as_bytes(),
            Path::new("t.json"),
            &ParseOptions::default(),
        )
    }

    #[test]
    fn sniffs_cat_only_at_key_positions() {
        assert_eq!(
            sniff_cat(br#"{"ph": "X", "cat": "kernel", "name": "a"}"#),
            Some(&b"kernel"[..])
        );
        assert_eq!(
            sniff_cat(br#"{"name": "x \"cat\": \"kernel\"", "cat":"cpu_op"}"#),
            Some(&b"cpu_op"[..])
        );
        assert_eq!(sniff_cat(br#"{"ph": "M", "name": "process_name"}"#), None);
    }

    #[test]
    fn keeps_gpu_events_and_skips_python() {
        let t = parse(
            r#"{"schemaVersion":1,"distributedInfo":{"rank":3,"world_size":8},
            "traceEvents":[
             {"ph":"X","cat":"python_function","name":"f","pid":1,"tid":1,"ts":1,"dur":2},
             {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":10.5,"dur":2,
              "args":{"correlation":99,"stream":7,"device":0,"External id":18446744073709551615}},
             {"ph":"X","cat":"cuda_runtime","name":"cudaGraphLaunch","pid":1,"tid":1,"ts":9,"dur":1,
              "args":{"correlation":99}},
             {"ph":"X","cat":"user_annotation","name":"execute_context_0(0)_generation_4(4)",
              "pid":1,"tid":1,"ts":8,"dur":5}
            ]}"#,
        )
        .unwrap();
        assert_eq!(t.meta.rank, Some(3));
        assert_eq!(t.gpu_ops.len(), 1);
        assert_eq!(t.gpu_ops[0].correlation, Some(99));
        assert_eq!(t.gpu_ops[0].end_us, 12.5);
        assert!(t.launches[0].graph);
        assert_eq!(t.annotations.len(), 1);
        assert_eq!(t.counts.skipped_early, 1);
    }

    #[test]
    fn huge_ints_and_string_ids_are_ids_not_errors() {
        let t = parse(
            r#"[{"ph":"X","cat":"Kernel","name":"k","pid":"GPU 3","tid":"stream 7","ts":1,"dur":1,
               "args":{"correlation":123456789012345678901234567890,"external id":-5}}]"#,
        )
        .unwrap();
        assert_eq!(t.gpu_ops[0].device, 3);
        assert!(t.gpu_ops[0].correlation.is_some());
    }

    #[test]
    fn invalid_utf8_is_replaced_and_counted() {
        let mut bytes = br#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k"#.to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(br#"","pid":0,"tid":1,"ts":1,"dur":1}]}"#);
        let t = parse_bytes(&bytes, Path::new("u.json"), &ParseOptions::default()).unwrap();
        assert_eq!(t.counts.lossy_utf8, 1);
        assert!(t.name(t.gpu_ops[0].name).contains('\u{fffd}'));
    }

    #[test]
    fn missing_fields_are_skipped_with_a_warning() {
        let t = parse(
            r#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1},
                               {"ph":"X","cat":"kernel","name":"k2","dur":1}]}"#,
        )
        .unwrap();
        assert_eq!(t.gpu_ops.len(), 0);
        assert_eq!(t.counts.malformed, 2);
        assert!(t.warnings[0].contains("'dur'"), "{:?}", t.warnings);
    }

    #[test]
    fn wrong_types_and_bad_times_are_errors_naming_the_event() {
        let e = parse(
            r#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k3","ts":{"a":1},"dur":1}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("t.json") && e.contains("event #0") && e.contains("invalid type"),
            "{e}"
        );
        let e =
            parse(r#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"neg","ts":1,"dur":-4}]}"#)
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("'neg'") && e.contains("'dur'") && e.contains("-4"),
            "{e}"
        );
        let e =
            parse(r#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":"NaN","dur":1}]}"#)
                .unwrap_err()
                .to_string();
        assert!(e.contains("'ts'") && e.contains("NaN"), "{e}");
    }

    #[test]
    fn trailing_garbage_is_an_error_naming_the_offset() {
        let e = parse(r#"{"traceEvents":[]} {"traceEvents":[]}"#).unwrap_err();
        assert!(
            matches!(e, TraceError::TrailingData { offset: 19, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("byte 19"), "{e}");
        assert!(parse("{\"traceEvents\":[]}\n\n").is_ok());
        assert!(matches!(
            parse("[] x"),
            Err(TraceError::TrailingData { .. })
        ));
    }

    #[test]
    fn durations_longer_than_the_trace_are_refused() {
        let ev = |name: &str, ts: f64, dur: f64| {
            format!(
                r#"{{"ph":"X","cat":"kernel","name":"{name}","pid":0,"tid":7,"ts":{ts},"dur":{dur}}}"#
            )
        };
        let doc = |big: f64| {
            format!(
                r#"{{"traceEvents":[{},{},{},{}]}}"#,
                ev("a", 0.0, 10.0),
                ev("b", 20.0, 10.0),
                ev("huge", 40.0, big),
                ev("c", 60.0, 10.0)
            )
        };
        assert!(parse(&doc(5.0)).is_ok());
        let e = parse(&doc(1e6)).unwrap_err().to_string();
        assert!(
            e.contains("'huge'") && e.contains("1000000") && e.contains("rest of the trace"),
            "{e}"
        );
        for v in [1e23, 1e308] {
            let e = parse(&doc(v)).unwrap_err().to_string();
            assert!(e.contains("'huge'") && e.contains("an hour"), "{e}");
        }
    }

    #[test]
    fn structural_errors_are_values() {
        assert!(matches!(parse(""), Err(TraceError::Empty { .. })));
        assert!(matches!(parse("{}"), Err(TraceError::NoTraceEvents { .. })));
        assert!(matches!(
            parse(r#"{"traceEvents":[{"cat":"kernel""#),
            Err(TraceError::Truncated { .. })
        ));
        assert!(matches!(
            parse(r#"{"traceEvents":[{"cat":"kernel","ts":1,,}]}"#),
            Err(TraceError::Json { .. })
        ));
        assert!(matches!(parse("hello"), Err(TraceError::Json { .. })));
        assert!(matches!(
            parse(r#"{"traceEvents": 5}"#),
            Err(TraceError::Json { .. })
        ));
        let t = parse(r#"{"traceEvents": []}"#).unwrap();
        assert_eq!(t.counts.total, 0);
    }
}
