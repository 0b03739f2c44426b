//! The streaming writer: CSV rows, a JSON document written element by element, or a summary.

use super::digits::{push_fixed, push_json_f64, push_u64};
use super::rows::{csv_row, csv_rows, json_row, json_string, Listed};
use super::summary::{summary, summary_intervals};
use super::{csv_header, DecisionIntervals, Kind};
use crate::error::{Error, Result};
use crate::whatif::sweep::{Meta, Output, Row, RowFormat, Summary};
use crate::whatif::uncertainty::Interval;
use std::io::Write;

/// A sweep's output written to `w` as the rows come: CSV, JSON or the summary.
pub struct Writer<W: Write> {
    pub w: W,
    pub kind: Kind,
    /// Only the Pareto front (written at the end), not every row.
    pub pareto_only: bool,
    /// Wall-clock start, for the summary's rate.
    pub started: std::time::Instant,
    prefix: Vec<u8>,
    /// Rows written so far (the JSON array's separators).
    written: u64,
    io: fn(std::io::Error) -> Error,
    /// Intervals on the best rows and the Pareto front (`--intervals`): the rows a decision
    /// is made on, priced once the stream has chosen them.
    pub intervals: Option<DecisionIntervals>,
    /// The layout settings rows name only where the grid lists them (`Meta::settings`).
    listed: Listed,
}

impl<W: Write> Writer<W> {
    /// `io` turns a write error into the command's error (naming the file, or standard output).
    pub fn new(w: W, kind: Kind, pareto_only: bool, io: fn(std::io::Error) -> Error) -> Self {
        Writer {
            w,
            kind,
            pareto_only,
            started: std::time::Instant::now(),
            prefix: Vec::new(),
            written: 0,
            io,
            intervals: None,
            listed: Listed::default(),
        }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.w.write_all(bytes).map_err(self.io)
    }

    fn rows_now(&self) -> bool {
        self.kind != Kind::Summary && !self.pareto_only
    }

    /// The Pareto front's CSV rows (`--pareto`), each with its interval's two columns when
    /// intervals were asked for.
    fn csv_front(&self, s: &Summary, interval_of: &dyn Fn(&Row) -> Option<Interval>) -> Vec<u8> {
        let mut out = Vec::new();
        for r in &s.front {
            csv_row(&mut out, &self.prefix, r);
            self.listed.push(&mut out, Kind::Csv, r);
            if let Some(i) = interval_of(r) {
                // The header named two more columns (`csv_header_with_intervals`).
                out.pop();
                out.push(b',');
                push_fixed(&mut out, i.p5, 3);
                out.push(b',');
                push_fixed(&mut out, i.p95, 3);
                out.push(b'\n');
            }
        }
        out
    }

    /// The JSON document's end: the front as the rows (`--pareto`), then the counts, the best
    /// rows and the front, each row with its interval when intervals were asked for.
    fn json_tail(&self, s: &Summary, interval_of: &dyn Fn(&Row) -> Option<Interval>) -> Vec<u8> {
        let mut out = Vec::new();
        let row = |out: &mut Vec<u8>, r: &Row| {
            json_row(out, r);
            self.listed.push(out, Kind::Json, r);
            if let Some(i) = interval_of(r) {
                out.pop();
                out.extend_from_slice(b",\"tokens_per_s_interval\":{\"p5\":");
                push_json_f64(out, i.p5);
                out.extend_from_slice(b",\"p50\":");
                push_json_f64(out, i.p50);
                out.extend_from_slice(b",\"p95\":");
                push_json_f64(out, i.p95);
                out.extend_from_slice(b"}}");
            }
        };
        let rows = |out: &mut Vec<u8>, rows: &[Row]| {
            for (i, r) in rows.iter().enumerate() {
                out.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
                row(out, r);
            }
        };
        if self.pareto_only {
            rows(&mut out, &s.front);
        }
        out.extend_from_slice(b"\n],\"fitting\":");
        push_u64(&mut out, s.fitting);
        out.extend_from_slice(b",\"unpriced\":");
        push_u64(&mut out, s.unpriced);
        out.extend_from_slice(b",\"best\":{\"tokens_per_s\":");
        for (i, b) in [s.best_total, s.best_per_user].iter().enumerate() {
            if i == 1 {
                out.extend_from_slice(b",\"tokens_per_s_per_user\":");
            }
            match b {
                Some(r) => row(&mut out, r),
                None => out.extend_from_slice(b"null"),
            }
        }
        out.extend_from_slice(b"},\"pareto\":[");
        rows(&mut out, &s.front);
        out.extend_from_slice(b"\n]}\n");
        out
    }
}

impl<W: Write> Output for Writer<W> {
    fn begin(&mut self, meta: &Meta) -> Result<()> {
        self.started = std::time::Instant::now();
        self.prefix = format!("{},{},{},", meta.model, meta.system, meta.calibration).into_bytes();
        self.listed = Listed::of(meta);
        match self.kind {
            Kind::Csv => {
                let mut h = csv_header();
                if self.listed.any() {
                    h.pop();
                    h.push_str(self.listed.header());
                    h.push('\n');
                }
                if self.pareto_only && self.intervals.is_some() {
                    h.pop();
                    h.push_str(",tokens_per_s_p5,tokens_per_s_p95\n");
                }
                self.put(h.as_bytes())
            }
            Kind::Json => {
                let head = format!(
                    "{{\"model\":{},\"system\":{},\"calibration\":{},\"scenarios\":{},\"include_infeasible\":{},\"rows\":[",
                    json_string(&meta.model),
                    json_string(&meta.system),
                    json_string(&meta.calibration),
                    meta.scenarios,
                    meta.include_infeasible
                );
                self.put(head.as_bytes())
            }
            Kind::Summary => Ok(()),
        }
    }

    fn formatter(&self) -> RowFormat<'static> {
        let (kind, now, prefix) = (self.kind, self.rows_now(), self.prefix.clone());
        let listed = self.listed.clone();
        Box::new(move |rows: &[Row], out: &mut Vec<u8>| {
            if !now {
                return;
            }
            if listed.any() {
                for r in rows {
                    if kind == Kind::Csv {
                        csv_row(out, &prefix, r);
                    } else {
                        out.extend_from_slice(b",\n");
                        json_row(out, r);
                    }
                    listed.push(out, kind, r);
                }
                return;
            }
            if kind == Kind::Csv {
                csv_rows(out, &prefix, rows);
                return;
            }
            for r in rows {
                match kind {
                    Kind::Csv => csv_row(out, &prefix, r),
                    _ => {
                        // Every row is preceded by a separator; `write` drops the document's
                        // first.
                        out.extend_from_slice(b",\n");
                        json_row(out, r);
                    }
                }
            }
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let skip = if self.kind == Kind::Json && self.written == 0 {
            1 // the first row's leading comma; its newline stays
        } else {
            0
        };
        self.written += 1;
        self.put(&bytes[skip..])
    }

    fn finish(&mut self, meta: &Meta, s: &Summary) -> Result<()> {
        // The decisions' intervals: best by total, best per user, then the front.
        let decided: Vec<Row> = [s.best_total, s.best_per_user]
            .into_iter()
            .flatten()
            .chain(s.front.iter().copied())
            .collect();
        let iv = match &self.intervals {
            Some(f) => Some(f(&decided)?),
            None => None,
        };
        let interval_of = |r: &Row| -> Option<Interval> {
            let iv = iv.as_ref()?;
            decided.iter().position(|d| d == r).map(|i| iv[i])
        };
        match self.kind {
            Kind::Csv => {
                if self.pareto_only {
                    let out = self.csv_front(s, &interval_of);
                    self.put(&out)?;
                }
            }
            Kind::Json => {
                let out = self.json_tail(s, &interval_of);
                self.put(&out)?;
            }
            Kind::Summary => {
                let mut text = summary(meta, s, self.started.elapsed().as_secs_f64());
                if iv.is_some() {
                    text.push_str(&summary_intervals(s, &self.listed, &interval_of));
                }
                self.put(text.as_bytes())?;
            }
        }
        self.w.flush().map_err(self.io)
    }
}
