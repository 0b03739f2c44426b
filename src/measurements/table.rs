//! A CSV read with bounds: records of a few KiB at most, columns found by name, every value
//! checked against its bound, and errors naming file, row, column and value. The csv crate
//! reads it, quoted fields included (a label or source holding a comma).

use super::{MAX_CALL_US, MAX_COUNT, MAX_LINE_BYTES};
use crate::error::{Error, Result};
use crate::files::{open_input, InputKind};
use crate::units::echo;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where [`LineLimited`] is in the CSV's grammar: only a line break outside quotes ends a
/// record.
#[derive(Clone, Copy, PartialEq)]
enum Quoting {
    /// At the start of a field, where a `"` opens a quoted field.
    FieldStart,
    /// In an unquoted field.
    Unquoted,
    /// In a quoted field.
    Quoted,
    /// A `"` in a quoted field: it closes the field, or a second `"` makes it a literal quote.
    QuoteInQuoted,
}

/// A reader that refuses a record longer than [`MAX_LINE_BYTES`], so the CSV parser never
/// buffers an unbounded record: the count restarts at a line break outside quotes, so a quoted
/// field cannot hide a long record behind line breaks.
pub(super) struct LineLimited<R> {
    inner: R,
    since_newline: usize,
    line: usize,
    quoting: Quoting,
}

impl<R> LineLimited<R> {
    pub(super) fn new(inner: R) -> Self {
        LineLimited {
            inner,
            since_newline: 0,
            line: 1,
            quoting: Quoting::FieldStart,
        }
    }
}

impl<R: Read> Read for LineLimited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            use Quoting::*;
            let (next, ends_record) = match (self.quoting, b) {
                (Quoted, b'"') => (QuoteInQuoted, false),
                (Quoted, _) => (Quoted, false),
                (QuoteInQuoted, b'"') => (Quoted, false),
                (FieldStart, b'"') => (Quoted, false),
                (_, b',') => (FieldStart, false),
                (_, b'\n') => (FieldStart, true),
                _ => (Unquoted, false),
            };
            self.quoting = next;
            if b == b'\n' {
                self.line += 1;
            }
            if ends_record {
                self.since_newline = 0;
            } else {
                self.since_newline += 1;
                if self.since_newline > MAX_LINE_BYTES {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        LineTooLong(self.line),
                    ));
                }
            }
        }
        Ok(n)
    }
}

#[derive(Debug)]
pub(super) struct LineTooLong(usize);

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} is longer than {MAX_LINE_BYTES} bytes (a measurement row is about a hundred): not a measurement table",
            self.0
        )
    }
}

impl std::error::Error for LineTooLong {}

pub(super) fn csv_error(path: &Path, e: csv::Error) -> Error {
    if let csv::ErrorKind::Io(io) = e.kind() {
        if let Some(long) = io.get_ref().and_then(|x| x.downcast_ref::<LineTooLong>()) {
            return Error::Input {
                path: path.to_path_buf(),
                problem: long.to_string(),
            };
        }
    }
    Error::Syntax {
        path: path.to_path_buf(),
        format: "CSV",
        message: echo(&e.to_string()),
    }
}

/// A CSV table with named columns.
pub(super) struct Table {
    pub(super) path: PathBuf,
    cols: HashMap<String, usize>,
    pub(super) rows: Vec<csv::StringRecord>,
    /// The line each row starts on (the header is line 1).
    lines: Vec<u64>,
}

/// What a numeric column may hold.
#[derive(Clone, Copy)]
pub(super) enum Bound {
    /// 0 < v ≤ max.
    Positive(f64),
    /// 0 ≤ v ≤ max.
    NonNegative(f64),
    /// A whole number in lo..=hi.
    Count(f64, f64),
}

impl Table {
    pub(super) fn read(path: &Path, required: &[&str]) -> Result<Self> {
        let input = LineLimited::new(open_input(path, InputKind::MeasurementCsv)?);
        let mut rdr = csv::ReaderBuilder::new().from_reader(input);
        let header = rdr.headers().map_err(|e| csv_error(path, e))?.clone();
        let cols: HashMap<String, usize> = header
            .iter()
            .enumerate()
            .map(|(i, h)| (h.trim().to_string(), i))
            .collect();
        for r in required {
            if !cols.contains_key(*r) {
                return Err(Error::field(
                    path,
                    *r,
                    format!(
                        "required column missing (header: {})",
                        echo(&header.iter().collect::<Vec<_>>().join(","))
                    ),
                ));
            }
        }
        let (mut rows, mut lines) = (Vec::new(), Vec::new());
        for rec in rdr.records() {
            let rec = rec.map_err(|e| csv_error(path, e))?;
            lines.push(rec.position().map_or(rows.len() as u64 + 2, |p| p.line()));
            rows.push(rec);
        }
        Ok(Table {
            path: path.to_path_buf(),
            cols,
            rows,
            lines,
        })
    }

    /// The line row `i` starts on, as errors name it ("row N").
    pub(super) fn line(&self, i: usize) -> u64 {
        self.lines[i]
    }

    pub(super) fn str(&self, i: usize, col: &str) -> &str {
        self.rows[i].get(self.cols[col]).unwrap_or("").trim()
    }

    fn field(&self, i: usize, col: &str) -> String {
        format!("row {} column '{col}'", self.line(i))
    }

    pub(super) fn bad(&self, i: usize, col: &str, expected: impl std::fmt::Display) -> Error {
        Error::field(
            &self.path,
            self.field(i, col),
            format!("found '{}', expected {expected}", echo(self.str(i, col))),
        )
    }

    pub(super) fn num(&self, i: usize, col: &str, bound: Bound) -> Result<f64> {
        let v = self
            .str(i, col)
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite());
        let ok = match (v, bound) {
            (None, _) => false,
            (Some(v), Bound::Positive(max)) => v > 0.0 && v <= max,
            (Some(v), Bound::NonNegative(max)) => v >= 0.0 && v <= max,
            (Some(v), Bound::Count(lo, hi)) => v.fract() == 0.0 && v >= lo && v <= hi,
        };
        match v {
            Some(v) if ok => Ok(v),
            // The expectation is written only for the error (tables of thousands of cells are
            // read at every start).
            _ => {
                let what = match (v, bound) {
                    (None, _) => "a finite number".to_string(),
                    (_, Bound::Positive(max)) => format!("a number in (0, {max:e}]"),
                    (_, Bound::NonNegative(max)) => format!("a number in [0, {max:e}]"),
                    (_, Bound::Count(lo, hi)) => format!("a whole number from {lo} to {hi:e}"),
                };
                Err(self.bad(i, col, what))
            }
        }
    }

    /// A time of one call, µs: positive and at most a second.
    pub(super) fn time(&self, i: usize, col: &str) -> Result<f64> {
        self.num(i, col, Bound::Positive(MAX_CALL_US)).map_err(|_| {
            self.bad(
                i,
                col,
                format!("a time in (0, {MAX_CALL_US:e}] µs (no single call in a decode step takes a second)"),
            )
        })
    }

    pub(super) fn ranks(&self, i: usize, col: &str) -> Result<u32> {
        Ok(self.num(i, col, Bound::Count(1.0, 65_536.0))? as u32)
    }

    /// An optional whole-number shape column (0 when the file has no such column).
    pub(super) fn count_or_zero(&self, i: usize, col: &str) -> Result<u64> {
        if self.cols.contains_key(col) {
            Ok(self.num(i, col, Bound::Count(0.0, MAX_COUNT))? as u64)
        } else {
            Ok(0)
        }
    }

    pub(super) fn parse<T: std::str::FromStr<Err = Error>>(
        &self,
        i: usize,
        col: &str,
    ) -> Result<T> {
        self.str(i, col).parse::<T>().map_err(|e| match e {
            Error::Unknown { kind, choices, .. } => {
                self.bad(i, col, format!("a {kind}: one of {}", choices.join(", ")))
            }
            e => e,
        })
    }
}
