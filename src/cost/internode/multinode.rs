//! The multi-node collective table `calibrate --from-nccl-tests` writes from nccl-tests runs
//! over several nodes: read and checked row by row, one curve per (op, nodes, ranks).

use crate::error::{Error, Result};
use std::path::Path;

/// The multi-node collective table `calibrate --from-nccl-tests` writes from nccl-tests runs
/// over several nodes (`nccl_multinode.csv` beside `nccl_collectives.csv`): columns
/// `op,nodes,nranks,dtype,bytes,latency_us`, one row per measured size. A collective over
/// `nranks` ranks on `nodes` nodes is priced from its curve as the single-node rows are
/// (`aic::comm_price`: log-log between sizes, linear beyond), in place of the law.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MultiNodeTable {
    /// (op, nodes, nranks) → (bytes, µs) sorted by bytes.
    curves: std::collections::BTreeMap<(String, u32, u32), Vec<(f64, f64)>>,
}

/// The table's file name and header.
pub const MULTINODE_CSV: &str = "nccl_multinode.csv";
pub const MULTINODE_HEADER: &str = "op,nodes,nranks,dtype,bytes,latency_us";

impl MultiNodeTable {
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let mut records = crate::files::csv_records(text, path, false)?.into_iter();
        let header = match records.next() {
            Some((1, h)) => h.join(","),
            _ => String::new(),
        };
        if header != MULTINODE_HEADER {
            return Err(Error::field(
                path,
                "header",
                format!(
                    "found '{}', expected '{MULTINODE_HEADER}'",
                    crate::units::clip(&header, 80)
                ),
            ));
        }
        let mut t = MultiNodeTable::default();
        for (line, fields) in records {
            let f: Vec<&str> = fields.iter().map(String::as_str).collect();
            let row = Row::parse(&f, line, path)?;
            let v = t
                .curves
                .entry((row.op.to_string(), row.nodes, row.nranks))
                .or_default();
            if v.iter().any(|p| p.0 == row.bytes as f64) {
                return Err(Error::field(
                    path,
                    format!("line {line}"),
                    format!(
                        "{} of {} B on {} nodes x {} ranks appears twice",
                        row.op, row.bytes, row.nodes, row.nranks
                    ),
                ));
            }
            v.push((row.bytes as f64, row.us));
        }
        for v in t.curves.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Ok(t)
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text = crate::files::read_text(path, crate::files::InputKind::MeasurementCsv)?;
        Self::parse(&text, path)
    }

    /// The measured curve of `op` (the table's spelling) over `nranks` ranks on `nodes` nodes.
    pub fn curve(&self, op: &str, nodes: u32, nranks: u32) -> Option<&[(f64, f64)]> {
        self.curves
            .get(&(op.to_string(), nodes, nranks))
            .map(|v| v.as_slice())
    }

    /// Data rows in all.
    pub fn rows(&self) -> usize {
        self.curves.values().map(Vec::len).sum()
    }

    /// (op, nodes, nranks) of every curve.
    pub fn keys(&self) -> Vec<(String, u32, u32)> {
        self.curves.keys().cloned().collect()
    }
}

/// One data row of the table, each column checked.
struct Row<'a> {
    op: &'a str,
    nodes: u32,
    nranks: u32,
    bytes: u64,
    us: f64,
}

impl<'a> Row<'a> {
    /// Line `line` of `path`, `f` its fields.
    fn parse(f: &[&'a str], line: usize, path: &Path) -> Result<Self> {
        let bad = |what: String| Error::field(path, format!("line {line}"), what);
        if f.len() != 6 {
            return Err(bad(format!(
                "{} columns, expected 6 ({MULTINODE_HEADER})",
                f.len()
            )));
        }
        if !["all_reduce", "all_gather", "reduce_scatter", "alltoall"].contains(&f[0]) {
            return Err(bad(format!(
                "column op: found '{}', expected all_reduce, all_gather, reduce_scatter or alltoall",
                crate::units::clip(f[0], 20)
            )));
        }
        let int = |k: usize, name: &str, lo: u64| -> Result<u64> {
            f[k].parse::<u64>()
                .ok()
                .filter(|v| *v >= lo)
                .ok_or_else(|| {
                    bad(format!(
                        "column {name}: found '{}', expected a whole number of at least {lo}",
                        crate::units::clip(f[k], 20)
                    ))
                })
        };
        let nodes = int(1, "nodes", 2)?;
        let nranks = int(2, "nranks", 2)?;
        let bytes = int(4, "bytes", 1)?;
        if nranks < nodes || nranks > u32::MAX as u64 || nodes > u32::MAX as u64 {
            return Err(bad(format!(
                "column nranks: {nranks} ranks on {nodes} nodes, expected at least one rank per node"
            )));
        }
        let us = f[5]
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e9)
            .ok_or_else(|| {
                bad(format!(
                    "column latency_us: found '{}', expected a positive time in µs",
                    crate::units::clip(f[5], 20)
                ))
            })?;
        Ok(Row {
            op: f[0],
            nodes: nodes as u32,
            nranks: nranks as u32,
            bytes,
            us,
        })
    }
}
