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

use super::error::{Result, TraceError};
use super::format::TraceFormat;
use super::model::{Annotation, GpuKind, GpuOp, Interner, Launch, ParsedTrace, Side};
use super::scan::{Input, ScanError};
use regex::Regex;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

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

struct Parser<'o, R> {
    input: Input<R>,
    path: PathBuf,
    gzip: bool,
    opts: ParseOptions<'o>,
    interner: Interner,
    out: ParsedTrace,
}

/// What to do with an event, decided from its `cat` alone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Gpu(GpuKind),
    Annotation(Side),
    /// A `cpu_op` that may be a step marker (old `ProfilerStep#N`, or `--step-marker`).
    CpuOp,
    Runtime,
    Skip,
}

fn want_for(cat: &[u8]) -> Want {
    // Case-insensitive: the old schema writes "Kernel", "Runtime", "Memcpy".
    let is = |s: &str| cat.eq_ignore_ascii_case(s.as_bytes());
    if is("kernel") {
        Want::Gpu(GpuKind::Kernel)
    } else if is("gpu_memcpy") || is("memcpy") {
        Want::Gpu(GpuKind::Memcpy)
    } else if is("gpu_memset") || is("memset") {
        Want::Gpu(GpuKind::Memset)
    } else if is("user_annotation") {
        Want::Annotation(Side::Cpu)
    } else if is("gpu_user_annotation") {
        Want::Annotation(Side::Gpu)
    } else if is("cuda_runtime") || is("runtime") || is("cuda_driver") || is("driver") {
        Want::Runtime
    } else if is("cpu_op") || is("operator") {
        Want::CpuOp
    } else {
        Want::Skip
    }
}

impl<R: Read> Parser<'_, R> {
    fn scan_err(&self, e: ScanError, context: &'static str) -> TraceError {
        let offset = self.input.offset();
        match e {
            ScanError::Io(source) if self.gzip => TraceError::Gzip {
                path: self.path.clone(),
                offset,
                source,
            },
            ScanError::Io(source) => TraceError::Io {
                path: self.path.clone(),
                source,
            },
            ScanError::Eof => TraceError::Truncated {
                path: self.path.clone(),
                offset,
                context,
            },
            ScanError::Unexpected(b) => {
                self.json_err(format!("unexpected {} in {context}", describe_byte(b)))
            }
        }
    }

    fn json_err(&self, message: String) -> TraceError {
        TraceError::Json {
            path: self.path.clone(),
            offset: self.input.offset(),
            message,
        }
    }

    fn peek(&mut self, context: &'static str) -> Result<Option<u8>> {
        self.input.peek().map_err(|e| self.scan_err(e, context))
    }

    /// Only whitespace may follow the top-level value.
    fn trailing(&mut self) -> Result<()> {
        match self.peek("the end of the file")? {
            None => Ok(()),
            Some(b) => Err(TraceError::TrailingData {
                path: self.path.clone(),
                offset: self.input.offset(),
                found: describe_byte(b),
            }),
        }
    }

    fn document(&mut self) -> Result<()> {
        self.input
            .skip_bom()
            .map_err(|e| self.scan_err(e, "the file start"))?;
        match self.peek("the file start")? {
            None => Err(TraceError::Empty {
                path: self.path.clone(),
            }),
            Some(b'[') => self.events(),
            Some(b'{') => {
                self.input.bump();
                let mut saw_events = false;
                loop {
                    match self.peek("the top-level object")? {
                        None => return Err(self.scan_err(ScanError::Eof, "the top-level object")),
                        Some(b'}') => {
                            self.input.bump();
                            break;
                        }
                        Some(b',') => self.input.bump(),
                        Some(b'"') => {
                            let key = self.key()?;
                            if key == "traceEvents" {
                                self.events()?;
                                saw_events = true;
                            } else {
                                self.metadata(&key)?;
                            }
                        }
                        Some(b) => {
                            return Err(self.json_err(format!(
                                "expected a key in the top-level object, found {}",
                                describe_byte(b)
                            )))
                        }
                    }
                }
                if saw_events {
                    Ok(())
                } else {
                    Err(TraceError::NoTraceEvents {
                        path: self.path.clone(),
                    })
                }
            }
            Some(b) => Err(self.json_err(format!(
                "expected '{{' or '[' at the start of a trace, found {}",
                describe_byte(b)
            ))),
        }
    }

    /// Reads `"key":` and leaves the cursor on the value.
    fn key(&mut self) -> Result<String> {
        let key = match self.input.next_value() {
            Ok(raw) => serde_json::from_slice::<String>(raw)
                .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned()),
            Err(e) => return Err(self.scan_err(e, "a top-level key")),
        };
        match self.peek("a top-level key")? {
            Some(b':') => {
                self.input.bump();
                Ok(key)
            }
            Some(b) => Err(self.json_err(format!(
                "expected ':' after key \"{key}\", found {}",
                describe_byte(b)
            ))),
            None => Err(self.scan_err(ScanError::Eof, "a top-level key")),
        }
    }

    /// A top-level value other than `traceEvents`: decoded only when it is metadata we use.
    fn metadata(&mut self, key: &str) -> Result<()> {
        if self.peek("a top-level value")?.is_none() {
            return Err(self.scan_err(ScanError::Eof, "a top-level value"));
        }
        let raw = match self.input.next_value() {
            Ok(raw) => raw,
            Err(e) => return Err(self.scan_err(e, "a top-level value")),
        };
        // Metadata we cannot read is a warning, not an error: the events are what matter.
        match key {
            "distributedInfo" => match serde_json::from_slice::<DistInfo>(raw) {
                Ok(d) => {
                    self.out.meta.rank = d.rank.map(|r| r.0 as i64);
                    self.out.meta.world_size = d.world_size.map(|r| r.0 as i64);
                    self.out.meta.backend = d.backend;
                    self.out.meta.nccl_version = d.nccl_version;
                }
                Err(e) => warn(&mut self.out, format!("distributedInfo ignored: {e}")),
            },
            "deviceProperties" => match serde_json::from_slice::<Vec<DeviceProp>>(raw) {
                Ok(v) => {
                    self.out.meta.device_names = v
                        .into_iter()
                        .filter_map(|d| d.name)
                        .filter(|n| !n.is_empty())
                        .collect()
                }
                Err(e) => warn(&mut self.out, format!("deviceProperties ignored: {e}")),
            },
            "baseTimeNanoseconds" => match serde_json::from_slice::<f64>(raw) {
                Ok(v) if v.is_finite() => self.out.meta.base_time_ns = Some(v),
                _ => warn(
                    &mut self.out,
                    "baseTimeNanoseconds ignored: not a number".into(),
                ),
            },
            "otherData" => {
                if let Ok(o) = serde_json::from_slice::<OtherData>(raw) {
                    self.out.meta.declares_categories = o.generator.as_deref() == Some("decodesim");
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn events(&mut self) -> Result<()> {
        match self.peek("traceEvents")? {
            Some(b'[') => self.input.bump(),
            Some(b) => {
                return Err(self.json_err(format!(
                    "\"traceEvents\" must be an array, found {}",
                    describe_byte(b)
                )))
            }
            None => return Err(self.scan_err(ScanError::Eof, "traceEvents")),
        }
        loop {
            match self.peek("the traceEvents array")? {
                None => return Err(self.scan_err(ScanError::Eof, "the traceEvents array")),
                Some(b']') => {
                    self.input.bump();
                    return Ok(());
                }
                Some(b',') => self.input.bump(),
                Some(_) => {
                    let start = self.input.offset();
                    let raw = match self.input.next_value() {
                        Ok(raw) => raw,
                        Err(e) => {
                            // The scanner moved nothing on error; report the event's start.
                            return Err(self.scan_err(e, "an event of traceEvents"));
                        }
                    };
                    let index = self.out.counts.total;
                    self.out.counts.total += 1;
                    // `raw` borrows the input buffer; decoding needs `&mut self.out` only.
                    let out = &mut self.out;
                    let interner = &mut self.interner;
                    let opts = self.opts;
                    match handle_event(raw, index, out, interner, &opts) {
                        Ok(()) => {}
                        Err(EventError::Syntax(message)) => {
                            return Err(TraceError::Json {
                                path: self.path.clone(),
                                offset: start,
                                message,
                            })
                        }
                        Err(EventError::Field {
                            event,
                            field,
                            value,
                            expected,
                        }) => {
                            return Err(TraceError::Field {
                                path: self.path.clone(),
                                index,
                                event,
                                field,
                                value,
                                expected,
                            })
                        }
                    }
                }
            }
        }
    }
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

fn warn(out: &mut ParsedTrace, msg: String) {
    if out.warnings.len() < MAX_WARNINGS {
        out.warnings.push(msg);
    }
}

/// The value of the `"cat"` key of a raw event object, found without decoding the event.
/// Kineto writes `cat` near the start of every event; a `"cat"` inside `args` or inside an
/// escaped string is not mistaken for it because the key must follow `{` or `,`.
fn sniff_cat(raw: &[u8]) -> Option<&[u8]> {
    for at in finders().cat.find_iter(raw) {
        let before = raw[..at]
            .iter()
            .rev()
            .find(|b| !b.is_ascii_whitespace())
            .copied();
        if !matches!(before, Some(b'{') | Some(b',')) {
            continue;
        }
        let mut i = at + 5;
        while i < raw.len() && raw[i].is_ascii_whitespace() {
            i += 1;
        }
        if raw.get(i) != Some(&b':') {
            continue;
        }
        i += 1;
        while i < raw.len() && raw[i].is_ascii_whitespace() {
            i += 1;
        }
        if raw.get(i) != Some(&b'"') {
            return None;
        }
        let rest = &raw[i + 1..];
        let end = memchr::memchr(b'"', rest)?;
        return Some(&rest[..end]);
    }
    None
}

/// Substring searchers built once: `memmem::find` builds its searcher on every call, which cost
/// more than the search itself on events of a few hundred bytes.
struct Finders {
    cat: memchr::memmem::Finder<'static>,
    profiler_step: memchr::memmem::Finder<'static>,
}

fn finders() -> &'static Finders {
    static F: std::sync::OnceLock<Finders> = std::sync::OnceLock::new();
    F.get_or_init(|| Finders {
        cat: memchr::memmem::Finder::new(b"\"cat\""),
        profiler_step: memchr::memmem::Finder::new(b"ProfilerStep#"),
    })
}

/// Why a kept event cannot be read.
enum EventError {
    /// Invalid JSON, or a field of the wrong type (the message names it).
    Syntax(String),
    /// A field whose value no profiler writes.
    Field {
        event: String,
        field: &'static str,
        value: String,
        expected: String,
    },
}

impl From<String> for EventError {
    fn from(s: String) -> Self {
        EventError::Syntax(s)
    }
}

/// Decodes one event if its category is wanted.
fn handle_event(
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

// ---- the decoded shape of an event: only the fields we read; serde skips the rest ----

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(default, borrow)]
    name: Option<Str<'a>>,
    #[serde(default)]
    pid: Option<Id>,
    #[serde(default)]
    tid: Option<Id>,
    #[serde(default)]
    ts: Option<Num>,
    #[serde(default)]
    dur: Option<Num>,
    #[serde(default, borrow)]
    args: Option<RawArgs<'a>>,
}

#[derive(Deserialize)]
struct RawArgs<'a> {
    #[serde(default)]
    correlation: Option<Id>,
    /// Not kept (the analysis never read it), but still decoded, so that a stream that is no
    /// id (an object, an array) is refused as before.
    #[serde(default)]
    #[allow(dead_code)]
    stream: Option<Id>,
    #[serde(default)]
    device: Option<Id>,
    #[serde(default, rename = "graph id")]
    graph_id: Option<Id>,
    #[serde(default, borrow, rename = "Collective name")]
    collective: Option<Str<'a>>,
    #[serde(default, borrow)]
    category: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct OtherData {
    #[serde(default)]
    generator: Option<String>,
}

#[derive(Deserialize)]
struct DistInfo {
    #[serde(default)]
    rank: Option<Id>,
    #[serde(default)]
    world_size: Option<Id>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    nccl_version: Option<String>,
}

#[derive(Deserialize)]
struct DeviceProp {
    #[serde(default)]
    name: Option<String>,
}

/// A string that borrows from the input when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(
                self,
                v: &'de str,
            ) -> std::result::Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// An id (correlation, stream, pid, rank): any integer, a float (ints past 2^64 arrive as
/// floats), or a string such as `"7"` or `"stream 7"`. Never an error for a scalar: ids are only
/// compared for equality, so a wrapped or hashed value is as good as the original.
#[derive(Clone, Copy)]
struct Id(u64);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer id or a string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Id, E> {
                Ok(Id(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Id, E> {
                Ok(Id(v as u64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Id, E> {
                if v.fract() == 0.0 && v.abs() < 9.0e18 {
                    Ok(Id(v as i64 as u64))
                } else {
                    Ok(Id(v.to_bits()))
                }
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Id, E> {
                Ok(Id(v as u64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Id, E> {
                Ok(Id(id_from_str(v)))
            }
        }
        d.deserialize_any(V)
    }
}

fn id_from_str(s: &str) -> u64 {
    let t = s.trim();
    if let Ok(v) = t.parse::<i64>() {
        return v as u64;
    }
    if let Ok(v) = t.parse::<u64>() {
        return v;
    }
    // "stream 7", "GPU 0": the trailing number is the id.
    let digits = t.len() - t.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 {
        if let Ok(v) = t[t.len() - digits..].parse::<u64>() {
            return v;
        }
    }
    // FNV-1a: any other string still gets a stable id.
    t.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// A time in µs: a number, or a number written as a string.
#[derive(Clone, Copy)]
struct Num(f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Num, E> {
                v.trim()
                    .parse::<f64>()
                    .map(Num)
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
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
