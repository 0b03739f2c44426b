//! The walk over the file: one event at a time, its `cat` sniffed from the raw bytes, only the
//! kept categories decoded.

use super::event::handle_event;
use super::raw::{DeviceProp, DistInfo, OtherData};
use super::{ParseOptions, MAX_WARNINGS};
use crate::trace::error::{Result, TraceError};
use crate::trace::model::{GpuKind, Interner, ParsedTrace, Side};
use crate::trace::scan::{Input, ScanError};
use std::io::Read;
use std::path::PathBuf;

pub(super) struct Parser<'o, R> {
    pub(super) input: Input<R>,
    pub(super) path: PathBuf,
    pub(super) gzip: bool,
    pub(super) opts: ParseOptions<'o>,
    pub(super) interner: Interner,
    pub(super) out: ParsedTrace,
}

/// What to do with an event, decided from its `cat` alone.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    Gpu(GpuKind),
    Annotation(Side),
    /// A `cpu_op` that may be a step marker (old `ProfilerStep#N`, or `--step-marker`).
    CpuOp,
    Runtime,
    Skip,
}

pub(super) fn want_for(cat: &[u8]) -> Want {
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
    pub(super) fn trailing(&mut self) -> Result<()> {
        match self.peek("the end of the file")? {
            None => Ok(()),
            Some(b) => Err(TraceError::TrailingData {
                path: self.path.clone(),
                offset: self.input.offset(),
                found: describe_byte(b),
            }),
        }
    }

    pub(super) fn document(&mut self) -> Result<()> {
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

pub(super) fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

pub(super) fn warn(out: &mut ParsedTrace, msg: String) {
    if out.warnings.len() < MAX_WARNINGS {
        out.warnings.push(msg);
    }
}

/// The value of the `"cat"` key of a raw event object, found without decoding the event.
/// Kineto writes `cat` near the start of every event; a `"cat"` inside `args` or inside an
/// escaped string is not mistaken for it because the key must follow `{` or `,`.
pub(super) fn sniff_cat(raw: &[u8]) -> Option<&[u8]> {
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
pub(super) struct Finders {
    cat: memchr::memmem::Finder<'static>,
    pub(super) profiler_step: memchr::memmem::Finder<'static>,
}

pub(super) fn finders() -> &'static Finders {
    static F: std::sync::OnceLock<Finders> = std::sync::OnceLock::new();
    F.get_or_init(|| Finders {
        cat: memchr::memmem::Finder::new(b"\"cat\""),
        profiler_step: memchr::memmem::Finder::new(b"ProfilerStep#"),
    })
}

/// Why a kept event cannot be read.
pub(super) enum EventError {
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
