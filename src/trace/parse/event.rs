//! One kept event into the parsed trace: a GPU op, a step annotation or a launch call, its
//! fields checked.

use super::raw::RawEvent;
use super::stream::{finders, sniff_cat, want_for, warn, EventError, Want};
use super::ParseOptions;
use crate::trace::model::{Annotation, GpuOp, Interner, Launch, ParsedTrace, Side};

/// Long because: the reader's per-event hot path (~1 GB/s), kept whole so the event borrowed
/// from the raw bytes is checked and stored in one frame.
///
/// Decodes one event if its category is wanted.
pub(super) fn handle_event(
    raw: &[u8],
    index: u64,
    out: &mut ParsedTrace,
    interner: &mut Interner,
    opts: &ParseOptions,
) -> std::result::Result<(), EventError> {
    let want = match sniff_cat(raw) {
        Some(cat) => want_for(cat),
        None => Want::Skip,
    };
    let want = match want {
        // Old-style `ProfilerStep#N` and user markers may be cpu ops; other ops are not needed,
        // and checking the raw bytes first avoids decoding tens of thousands of them.
        Want::CpuOp => {
            if opts.step_marker.is_some() || finders().profiler_step.find(raw).is_some() {
                Want::CpuOp
            } else {
                Want::Skip
            }
        }
        w => w,
    };
    if want == Want::Skip {
        out.counts.skipped_early += 1;
        return Ok(());
    }
    let lossy;
    let ev: RawEvent = match serde_json::from_slice(raw) {
        Ok(ev) => ev,
        Err(e) if std::str::from_utf8(raw).is_err() => {
            // Invalid UTF-8 (seen in real traces from kernel names and paths): replace the bad
            // bytes and read the event anyway, rather than losing the whole file.
            lossy = String::from_utf8_lossy(raw).into_owned();
            match serde_json::from_str(&lossy) {
                Ok(ev) => {
                    out.counts.lossy_utf8 += 1;
                    ev
                }
                Err(_) => return Err(format!("event #{index}: {e}").into()),
            }
        }
        // A field of the wrong type (a `ts` that is an object, a `dur` that is `true`) is an
        // error, not a default: serde's message names the field and the type found.
        Err(e) => return Err(format!("event #{index}: {e}").into()),
    };
    let missing = |out: &mut ParsedTrace, field: &str| {
        out.counts.malformed += 1;
        let name = ev.name.as_ref().map(|n| n.0.as_ref()).unwrap_or("?");
        let short: String = name.chars().take(60).collect();
        warn(
            out,
            format!("event #{index} ({short}) skipped: missing or invalid '{field}'"),
        );
    };
    let (Some(ts), Some(name)) = (ev.ts, ev.name.as_ref()) else {
        missing(out, if ev.ts.is_none() { "ts" } else { "name" });
        return Ok(());
    };
    let dur = ev.dur.map(|d| d.0).unwrap_or(0.0);
    let bad = |field: &'static str, v: f64| EventError::Field {
        event: crate::units::clip(&name.0, 80),
        field,
        value: format!("{v}"),
        expected: "a time in µs must be finite and at least 0".into(),
    };
    if !ts.0.is_finite() || ts.0 < 0.0 {
        return Err(bad("ts", ts.0));
    }
    if !dur.is_finite() || dur < 0.0 {
        return Err(bad("dur", dur));
    }
    let args = ev.args.as_ref();
    match want {
        Want::Gpu(kind) => {
            if ev.dur.is_none() {
                missing(out, "dur");
                return Ok(());
            }
            let device = args
                .and_then(|a| a.device)
                .or(ev.pid)
                .map(|d| d.0 as i64)
                .unwrap_or(0);
            out.gpu_ops.push(GpuOp {
                start_us: ts.0,
                end_us: ts.0 + dur,
                kind,
                name: interner.intern(&name.0),
                device,
                correlation: args.and_then(|a| a.correlation).map(|c| c.0),
                graph: args.is_some_and(|a| a.graph_id.is_some()),
                collective: args.is_some_and(|a| a.collective.is_some()),
                declared: args
                    .and_then(|a| a.category.as_ref())
                    .and_then(|c| c.0.parse::<crate::category::Category>().ok()),
            });
        }
        Want::Annotation(_) | Want::CpuOp => {
            // A cpu_op is kept only when it is a step marker, not merely mentions one.
            let marker = name.0.starts_with("ProfilerStep#")
                || opts.step_marker.is_some_and(|re| re.is_match(&name.0));
            if want == Want::CpuOp && !marker {
                return Ok(());
            }
            out.annotations.push(Annotation {
                name: name.0.clone().into_owned(),
                side: if let Want::Annotation(side) = want {
                    side
                } else {
                    Side::Cpu
                },
                start_us: ts.0,
                end_us: ts.0 + dur,
                pid: ev.pid.map(|p| p.0 as i64).unwrap_or(0),
                tid: ev.tid.map(|p| p.0 as i64).unwrap_or(0),
            })
        }
        Want::Runtime => {
            if let Some(c) = args.and_then(|a| a.correlation) {
                out.launches.push(Launch {
                    start_us: ts.0,
                    end_us: ts.0 + dur,
                    correlation: c.0,
                    graph: name.0.contains("GraphLaunch"),
                });
            }
        }
        Want::Skip => {}
    }
    Ok(())
}
