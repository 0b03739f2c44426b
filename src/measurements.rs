//! Reads the harness's measurement CSVs (schema in data/README.md), naming file, row and column
//! in every error.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One measured kernel (`kernels.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelPoint {
    pub family: String,
    pub m: f64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub context: u64,
    pub flops: f64,
    pub bytes: f64,
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
}

/// One measured collective (`collectives.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct CollectivePoint {
    pub op: String,
    pub nranks: u32,
    pub bytes: f64,
    pub proto: String,
    pub algo: String,
    pub p2p: bool,
    pub mode: String,
    pub median_us: f64,
}

/// One launch-cost measurement (`launch.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchPoint {
    pub mode: String,
    pub kernels: f64,
    pub total_us: f64,
}

/// One timing of a graph of small kernels with some all_reduces interleaved
/// (`graph_overheads.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct GraphOverheadPoint {
    pub nranks: u32,
    pub bytes: f64,
    pub collectives: f64,
    pub median_us: f64,
}

/// The first collective's wait per step when ranks are driven independently (`launch_skew.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchSkewPoint {
    pub nranks: u32,
    pub median_first_wait_us: f64,
}

#[derive(Debug, Clone, Default)]
pub struct Measurements {
    pub graph_overheads: Vec<GraphOverheadPoint>,
    pub launch_skew: Vec<LaunchSkewPoint>,
    pub dir: PathBuf,
    pub kernels: Vec<KernelPoint>,
    pub collectives: Vec<CollectivePoint>,
    pub launch: Vec<LaunchPoint>,
    /// The MANIFEST's text, recorded in the profile's method.
    pub manifest: String,
}

/// A CSV table with named columns.
struct Table {
    path: PathBuf,
    cols: HashMap<String, usize>,
    rows: Vec<csv::StringRecord>,
}

impl Table {
    fn read(path: &Path, required: &[&str]) -> Result<Self> {
        let mut rdr = csv::Reader::from_path(path).map_err(|e| Error::Read {
            path: path.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let header = rdr
            .headers()
            .map_err(|e| Error::Syntax {
                path: path.to_path_buf(),
                format: "CSV",
                message: e.to_string(),
            })?
            .clone();
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
                        header.iter().collect::<Vec<_>>().join(",")
                    ),
                ));
            }
        }
        let mut rows = Vec::new();
        for rec in rdr.records() {
            rows.push(rec.map_err(|e| Error::Syntax {
                path: path.to_path_buf(),
                format: "CSV",
                message: e.to_string(),
            })?);
        }
        Ok(Table {
            path: path.to_path_buf(),
            cols,
            rows,
        })
    }

    fn str<'a>(&self, row: &'a csv::StringRecord, col: &str) -> &'a str {
        row.get(self.cols[col]).unwrap_or("").trim()
    }

    fn num(&self, i: usize, col: &str) -> Result<f64> {
        let s = self.str(&self.rows[i], col);
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                Error::field(
                    &self.path,
                    format!("row {} column '{col}'", i + 2),
                    format!("expected a finite number, found '{s}'"),
                )
            })
    }
}

impl Measurements {
    pub fn read_dir(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Read {
                path: dir.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        let mut m = Measurements {
            dir: dir.to_path_buf(),
            ..Default::default()
        };
        let kpath = dir.join("kernels.csv");
        if kpath.exists() {
            m.kernels = read_kernels_csv(&kpath)?;
        }
        let cpath = dir.join("collectives.csv");
        if cpath.exists() {
            let t = Table::read(
                &cpath,
                &[
                    "op",
                    "nranks",
                    "bytes",
                    "proto",
                    "algo",
                    "p2p",
                    "mode",
                    "median_us",
                ],
            )?;
            for i in 0..t.rows.len() {
                let row = &t.rows[i];
                let p2p = match t.str(row, "p2p") {
                    "on" => true,
                    "off" => false,
                    other => {
                        return Err(Error::field(
                            &cpath,
                            format!("row {} column 'p2p'", i + 2),
                            format!("expected 'on' or 'off', found '{other}'"),
                        ))
                    }
                };
                m.collectives.push(CollectivePoint {
                    op: t.str(row, "op").to_string(),
                    nranks: t.num(i, "nranks")? as u32,
                    bytes: t.num(i, "bytes")?,
                    proto: t.str(row, "proto").to_string(),
                    algo: t.str(row, "algo").to_string(),
                    p2p,
                    mode: t.str(row, "mode").to_string(),
                    median_us: t.num(i, "median_us")?,
                });
            }
        }
        let lpath = dir.join("launch.csv");
        if lpath.exists() {
            let t = Table::read(&lpath, &["mode", "kernels", "total_us"])?;
            for i in 0..t.rows.len() {
                m.launch.push(LaunchPoint {
                    mode: t.str(&t.rows[i], "mode").to_string(),
                    kernels: t.num(i, "kernels")?,
                    total_us: t.num(i, "total_us")?,
                });
            }
        }
        let gpath = dir.join("graph_overheads.csv");
        if gpath.exists() {
            let t = Table::read(&gpath, &["nranks", "bytes", "collectives", "median_us"])?;
            for i in 0..t.rows.len() {
                m.graph_overheads.push(GraphOverheadPoint {
                    nranks: t.num(i, "nranks")? as u32,
                    bytes: t.num(i, "bytes")?,
                    collectives: t.num(i, "collectives")?,
                    median_us: t.num(i, "median_us")?,
                });
            }
        }
        let spath = dir.join("launch_skew.csv");
        if spath.exists() {
            let t = Table::read(&spath, &["nranks", "median_first_wait_us"])?;
            for i in 0..t.rows.len() {
                m.launch_skew.push(LaunchSkewPoint {
                    nranks: t.num(i, "nranks")? as u32,
                    median_first_wait_us: t.num(i, "median_first_wait_us")?,
                });
            }
        }
        if m.kernels.is_empty() && m.collectives.is_empty() {
            return Err(Error::Other(format!(
                "{}: no measurements found (expected kernels.csv and/or collectives.csv, schema in data/README.md)",
                dir.display()
            )));
        }
        m.manifest = std::fs::read_to_string(dir.join("MANIFEST.txt")).unwrap_or_default();
        Ok(m)
    }
}

/// Reads a `kernels.csv` measurement table.
pub fn read_kernels_csv(kpath: &Path) -> Result<Vec<KernelPoint>> {
    let mut out = Vec::new();
    let t = Table::read(
        kpath,
        &[
            "family",
            "m",
            "flops",
            "bytes",
            "median_us",
            "p10_us",
            "p90_us",
        ],
    )?;
    for i in 0..t.rows.len() {
        let int = |col: &str| -> Result<u64> {
            if t.cols.contains_key(col) {
                Ok(t.num(i, col)?.max(0.0) as u64)
            } else {
                Ok(0)
            }
        };
        let p = KernelPoint {
            family: t.str(&t.rows[i], "family").to_string(),
            m: t.num(i, "m")?,
            n: int("n")?,
            k: int("k")?,
            batch: int("batch")?,
            context: int("context")?,
            flops: t.num(i, "flops")?,
            bytes: t.num(i, "bytes")?,
            median_us: t.num(i, "median_us")?,
            p10_us: t.num(i, "p10_us")?,
            p90_us: t.num(i, "p90_us")?,
        };
        if p.median_us <= 0.0 {
            return Err(Error::field(
                kpath,
                format!("row {} column 'median_us'", i + 2),
                "expected a positive time",
            ));
        }
        out.push(p);
    }
    Ok(out)
}
