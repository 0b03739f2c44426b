//! Reads the harness's measurement CSVs (schema in data/README.md). Every value is checked where
//! it enters: names against their choices, numbers finite and within physical bounds, and every
//! error names the file, the row, the column, the value and what is allowed. Reads are bounded:
//! the file's size by its kind, each line to a few KiB, so a stray device or a one-line 200 MB
//! file is refused without being read whole or echoed.

use crate::error::{Error, Result};
use crate::files::{open_input, InputKind};
use crate::names::enum_names;
use crate::scenario::{Algo, Proto};
use crate::units::echo;
use crate::workload::CostFamily;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The longest line a measurement CSV may have: real rows are about a hundred bytes.
const MAX_LINE_BYTES: usize = 4096;
/// No single kernel or collective call in a decode step takes a second; a time beyond this is a
/// unit mistake or a corrupt file, and would swamp every fit.
const MAX_CALL_US: f64 = 1e6;
/// More arithmetic than any GPU does in [`MAX_CALL_US`] (B200 FP8: 4.5 PFLOP/s).
const MAX_FLOPS: f64 = 1e16;
/// More bytes than any GPU moves in [`MAX_CALL_US`] (B200: 7.7 TB/s).
const MAX_BYTES: f64 = 1e13;
/// Shape columns (tokens, features, heads, context) and rank counts beyond this are corrupt.
const MAX_COUNT: f64 = 1e12;

/// A kernel family as the harness names it in `kernels.csv` (data/README.md). Several harness
/// families calibrate one profile section ([`KernelFamily::cost_family`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum KernelFamily {
    GemmBf16,
    GemmInt4,
    GemmFp8,
    MoeGroupedBf16,
    MoeGemmInt4,
    AttentionMlaDecode,
    AttentionGqaDecode,
    NormRms,
    NormFusedAddRms,
    ActSiluMul,
    Rope,
    ElementwiseAdd,
    KvWrite,
    RouterTopk,
    MoeAlign,
    MoeSum,
    Sampling,
    Embedding,
}

enum_names!(serde KernelFamily, "harness kernel family",
    KernelFamily::GemmBf16 => ["gemm_bf16"],
    KernelFamily::GemmInt4 => ["gemm_int4"],
    KernelFamily::GemmFp8 => ["gemm_fp8"],
    KernelFamily::MoeGroupedBf16 => ["moe_grouped_bf16"],
    KernelFamily::MoeGemmInt4 => ["moe_gemm_int4"],
    KernelFamily::AttentionMlaDecode => ["attention_mla_decode"],
    KernelFamily::AttentionGqaDecode => ["attention_gqa_decode"],
    KernelFamily::NormRms => ["norm_rms"],
    KernelFamily::NormFusedAddRms => ["norm_fused_add_rms"],
    KernelFamily::ActSiluMul => ["act_silu_mul"],
    KernelFamily::Rope => ["rope"],
    KernelFamily::ElementwiseAdd => ["elementwise_add"],
    KernelFamily::KvWrite => ["kv_write"],
    KernelFamily::RouterTopk => ["router_topk"],
    KernelFamily::MoeAlign => ["moe_align"],
    KernelFamily::MoeSum => ["moe_sum"],
    KernelFamily::Sampling => ["sampling"],
    KernelFamily::Embedding => ["embedding"],
);

impl KernelFamily {
    /// The profile section (`[kernels.<family>]`) this harness family calibrates.
    pub(crate) fn cost_family(self) -> CostFamily {
        use KernelFamily as K;
        match self {
            K::GemmBf16 => CostFamily::GemmBf16,
            K::GemmInt4 => CostFamily::GemmInt4,
            K::GemmFp8 => CostFamily::GemmFp8,
            K::MoeGroupedBf16 => CostFamily::MoeGemmBf16,
            K::MoeGemmInt4 => CostFamily::MoeGemmInt4,
            K::AttentionMlaDecode => CostFamily::AttentionMlaDecode,
            K::AttentionGqaDecode => CostFamily::AttentionGqaDecode,
            K::NormRms | K::NormFusedAddRms => CostFamily::Norm,
            K::ActSiluMul | K::Rope | K::ElementwiseAdd => CostFamily::Elementwise,
            K::KvWrite => CostFamily::KvWrite,
            K::RouterTopk => CostFamily::RouterTopk,
            K::MoeAlign => CostFamily::MoeAlign,
            K::MoeSum => CostFamily::MoeSum,
            K::Sampling => CostFamily::Sampling,
            K::Embedding => CostFamily::Embedding,
        }
    }
}

/// How a timing was taken (`mode` in collectives.csv and launch.csv).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LaunchMode {
    /// Replays of a CUDA graph.
    Graph,
    /// Launched one by one from Python.
    Eager,
    /// 123 all_reduces on their own buffers in one graph, as one Kimi decode step issues
    /// (collectives.csv only).
    Burst,
}

enum_names!(serde LaunchMode, "launch mode",
    LaunchMode::Graph => ["graph"], LaunchMode::Eager => ["eager"], LaunchMode::Burst => ["burst"]);

/// One measured kernel (`kernels.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelPoint {
    pub(crate) family: KernelFamily,
    pub(crate) m: f64,
    pub(crate) n: u64,
    pub(crate) k: u64,
    pub(crate) batch: u64,
    pub(crate) context: u64,
    pub(crate) flops: f64,
    pub(crate) bytes: f64,
    pub(crate) median_us: f64,
    pub(crate) p10_us: f64,
    pub(crate) p90_us: f64,
}

/// One measured collective (`collectives.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct CollectivePoint {
    /// `AllReduce` or `AllGather`.
    pub(crate) op: CostFamily,
    pub(crate) nranks: u32,
    pub(crate) bytes: f64,
    /// `Auto`: NCCL_PROTO unset ("default" in the file).
    pub(crate) proto: Proto,
    /// `Auto`: NCCL_ALGO unset ("default" in the file).
    pub(crate) algo: Algo,
    pub(crate) p2p: bool,
    pub(crate) mode: LaunchMode,
    pub(crate) median_us: f64,
}

/// One launch-cost measurement (`launch.csv`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LaunchPoint {
    /// `Graph` or `Eager`.
    pub(crate) mode: LaunchMode,
    pub(crate) kernels: f64,
    pub(crate) total_us: f64,
}

/// One timing of a graph of small kernels with some all_reduces interleaved
/// (`graph_overheads.csv`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GraphOverheadPoint {
    nranks: u32,
    pub(crate) bytes: f64,
    pub(crate) collectives: f64,
    pub(crate) median_us: f64,
}

/// The first collective's wait per step when ranks are driven independently (`launch_skew.csv`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LaunchSkewPoint {
    pub(crate) nranks: u32,
    pub(crate) median_first_wait_us: f64,
}

#[derive(Debug, Clone, Default)]
pub struct Measurements {
    pub(crate) graph_overheads: Vec<GraphOverheadPoint>,
    pub(crate) launch_skew: Vec<LaunchSkewPoint>,
    pub(crate) dir: PathBuf,
    pub kernels: Vec<KernelPoint>,
    pub collectives: Vec<CollectivePoint>,
    pub(crate) launch: Vec<LaunchPoint>,
    /// The MANIFEST's text, recorded in the profile's method.
    pub(crate) manifest: String,
}

/// A reader that refuses a line longer than [`MAX_LINE_BYTES`], so the CSV parser never
/// buffers an unbounded record.
struct LineLimited<R> {
    inner: R,
    since_newline: usize,
    line: usize,
}

impl<R: Read> Read for LineLimited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            if b == b'\n' {
                self.since_newline = 0;
                self.line += 1;
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
struct LineTooLong(usize);

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

fn csv_error(path: &Path, e: csv::Error) -> Error {
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
struct Table {
    path: PathBuf,
    cols: HashMap<String, usize>,
    rows: Vec<csv::StringRecord>,
}

/// What a numeric column may hold.
#[derive(Clone, Copy)]
enum Bound {
    /// 0 < v ≤ max.
    Positive(f64),
    /// 0 ≤ v ≤ max.
    NonNegative(f64),
    /// A whole number in lo..=hi.
    Count(f64, f64),
}

impl Table {
    fn read(path: &Path, required: &[&str]) -> Result<Self> {
        let input = LineLimited {
            inner: open_input(path, InputKind::MeasurementCsv)?,
            since_newline: 0,
            line: 1,
        };
        // The harness never quotes; without quoting a record is one line, which the limit bounds.
        let mut rdr = csv::ReaderBuilder::new().quoting(false).from_reader(input);
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
        let mut rows = Vec::new();
        for rec in rdr.records() {
            rows.push(rec.map_err(|e| csv_error(path, e))?);
        }
        Ok(Table {
            path: path.to_path_buf(),
            cols,
            rows,
        })
    }

    fn str(&self, i: usize, col: &str) -> &str {
        self.rows[i].get(self.cols[col]).unwrap_or("").trim()
    }

    fn field(&self, i: usize, col: &str) -> String {
        format!("row {} column '{col}'", i + 2)
    }

    fn bad(&self, i: usize, col: &str, expected: impl std::fmt::Display) -> Error {
        Error::field(
            &self.path,
            self.field(i, col),
            format!("found '{}', expected {expected}", echo(self.str(i, col))),
        )
    }

    fn num(&self, i: usize, col: &str, bound: Bound) -> Result<f64> {
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
    fn time(&self, i: usize, col: &str) -> Result<f64> {
        self.num(i, col, Bound::Positive(MAX_CALL_US)).map_err(|_| {
            self.bad(
                i,
                col,
                format!("a time in (0, {MAX_CALL_US:e}] µs (no single call in a decode step takes a second)"),
            )
        })
    }

    fn ranks(&self, i: usize, col: &str) -> Result<u32> {
        Ok(self.num(i, col, Bound::Count(1.0, 65_536.0))? as u32)
    }

    /// An optional whole-number shape column (0 when the file has no such column).
    fn count_or_zero(&self, i: usize, col: &str) -> Result<u64> {
        if self.cols.contains_key(col) {
            Ok(self.num(i, col, Bound::Count(0.0, MAX_COUNT))? as u64)
        } else {
            Ok(0)
        }
    }

    fn parse<T: std::str::FromStr<Err = Error>>(&self, i: usize, col: &str) -> Result<T> {
        self.str(i, col).parse::<T>().map_err(|e| match e {
            Error::Unknown { kind, choices, .. } => {
                self.bad(i, col, format!("a {kind}: one of {}", choices.join(", ")))
            }
            e => e,
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
        let present = |name: &str| {
            let p = dir.join(name);
            p.exists().then_some(p)
        };
        if let Some(p) = present("kernels.csv") {
            m.kernels = read_kernels_csv(&p)?;
        }
        if let Some(p) = present("collectives.csv") {
            m.collectives = read_collectives_csv(&p)?;
        }
        if let Some(p) = present("launch.csv") {
            m.launch = read_launch_csv(&p)?;
        }
        if let Some(p) = present("graph_overheads.csv") {
            let t = Table::read(&p, &["nranks", "bytes", "collectives", "median_us"])?;
            for i in 0..t.rows.len() {
                m.graph_overheads.push(GraphOverheadPoint {
                    nranks: t.ranks(i, "nranks")?,
                    bytes: t.num(i, "bytes", Bound::NonNegative(MAX_BYTES))?,
                    collectives: t.num(i, "collectives", Bound::Count(0.0, 1e6))?,
                    median_us: t.time(i, "median_us")?,
                });
            }
        }
        if let Some(p) = present("launch_skew.csv") {
            let t = Table::read(&p, &["nranks", "median_first_wait_us"])?;
            for i in 0..t.rows.len() {
                m.launch_skew.push(LaunchSkewPoint {
                    nranks: t.ranks(i, "nranks")?,
                    median_first_wait_us: t.num(
                        i,
                        "median_first_wait_us",
                        Bound::NonNegative(MAX_CALL_US),
                    )?,
                });
            }
        }
        if m.kernels.is_empty() && m.collectives.is_empty() {
            return Err(Error::NothingFound {
                path: dir.to_path_buf(),
                what: "no measurements found",
                expected: "kernels.csv and/or collectives.csv, schema in data/README.md".into(),
            });
        }
        if let Some(p) = present("MANIFEST.txt") {
            m.manifest = crate::files::read_text(&p, InputKind::Manifest)?;
        }
        Ok(m)
    }
}

/// Reads a `kernels.csv` measurement table.
pub(crate) fn read_kernels_csv(path: &Path) -> Result<Vec<KernelPoint>> {
    let t = Table::read(
        path,
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
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        let p = KernelPoint {
            family: t.parse(i, "family")?,
            m: t.num(i, "m", Bound::NonNegative(MAX_COUNT))?,
            n: t.count_or_zero(i, "n")?,
            k: t.count_or_zero(i, "k")?,
            batch: t.count_or_zero(i, "batch")?,
            context: t.count_or_zero(i, "context")?,
            flops: t.num(i, "flops", Bound::NonNegative(MAX_FLOPS))?,
            bytes: t.num(i, "bytes", Bound::NonNegative(MAX_BYTES))?,
            median_us: t.time(i, "median_us")?,
            p10_us: t.time(i, "p10_us")?,
            p90_us: t.time(i, "p90_us")?,
        };
        if !(p.p10_us <= p.median_us && p.median_us <= p.p90_us) {
            return Err(Error::field(
                path,
                format!("row {}", i + 2),
                format!(
                    "percentiles out of order: p10 {} µs, median {} µs, p90 {} µs (expected p10 <= median <= p90)",
                    p.p10_us, p.median_us, p.p90_us
                ),
            ));
        }
        out.push(p);
    }
    Ok(out)
}

/// Reads a `collectives.csv` measurement table. A row with a rank count below 1, or any value
/// out of range, is an error naming the row: nothing is dropped silently.
fn read_collectives_csv(path: &Path) -> Result<Vec<CollectivePoint>> {
    let t = Table::read(
        path,
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
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        let op: CostFamily = t.parse(i, "op")?;
        if !op.is_collective() {
            return Err(t.bad(i, "op", "all_reduce or all_gather"));
        }
        let p2p = match t.str(i, "p2p") {
            "on" => true,
            "off" => false,
            _ => return Err(t.bad(i, "p2p", "'on' or 'off'")),
        };
        out.push(CollectivePoint {
            op,
            nranks: t.ranks(i, "nranks")?,
            bytes: t.num(i, "bytes", Bound::Positive(MAX_BYTES))?,
            proto: t.parse(i, "proto")?,
            algo: t.parse(i, "algo")?,
            p2p,
            mode: t.parse(i, "mode")?,
            median_us: t.time(i, "median_us")?,
        });
    }
    Ok(out)
}

/// Reads a `launch.csv` measurement table.
fn read_launch_csv(path: &Path) -> Result<Vec<LaunchPoint>> {
    let t = Table::read(path, &["mode", "kernels", "total_us"])?;
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        let mode: LaunchMode = t.parse(i, "mode")?;
        if mode == LaunchMode::Burst {
            return Err(t.bad(i, "mode", "'graph' or 'eager'"));
        }
        let kernels = t.num(i, "kernels", Bound::Count(1.0, 1e6))?;
        let total_us = t.num(i, "total_us", Bound::Positive(MAX_CALL_US * kernels))?;
        out.push(LaunchPoint {
            mode,
            kernels,
            total_us,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// AIConfigurator tables, as harness/aiconfigurator_tables.py converts them (columns and units in
// the MANIFEST.txt beside each converted folder, e.g.
// data/calibration/aiconfigurator/rtx_pro_6000_server/MANIFEST.txt). Latencies are µs.

/// MoE quantisation modes AIConfigurator 0.12 names in `moe_perf` (its `MoEQuantMode`).
const AIC_MOE_QUANTS: &[&str] = &[
    "bfloat16",
    "fp8",
    "fp8_block",
    "int4_wo",
    "int8_wo",
    "nvfp4",
    "w4afp8",
    "w4a16_mxfp4",
];
/// GEMM dtypes of `gemm_perf` (its `GEMMQuantMode`).
const AIC_GEMM_DTYPES: &[&str] = &[
    "bfloat16",
    "float16",
    "fp8",
    "fp8_block",
    "int4_wo",
    "int8_wo",
    "nvfp4",
];
/// KV-cache dtypes of `mla_generation_module_perf`.
const AIC_KV_DTYPES: &[&str] = &["bfloat16", "fp8"];
/// Element types of the collective tables, with their size in bytes.
const AIC_COMM_DTYPES: &[(&str, u64)] = &[
    ("half", 2),
    ("float16", 2),
    ("bfloat16", 2),
    ("int8", 1),
    ("fp8", 1),
    ("float32", 4),
];

/// One row of `moe.csv`: the routed-expert call at one shape, routing distribution and size.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AicMoeRow {
    pub(crate) distribution: String,
    pub(crate) quant: String,
    pub(crate) experts: u64,
    pub(crate) hidden: u64,
    /// The full expert intermediate size (moe_tp splits it).
    pub(crate) inter: u64,
    pub(crate) topk: u64,
    pub(crate) moe_tp: u32,
    pub(crate) moe_ep: u32,
    pub(crate) tokens: u64,
    pub(crate) latency_us: f64,
}

/// One row of `gemm.csv`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AicGemmRow {
    pub(crate) dtype: String,
    pub(crate) m: u64,
    pub(crate) n: u64,
    pub(crate) k: u64,
    pub(crate) latency_us: f64,
}

/// One row of `mla_generation.csv`: the MLA generation module (fused_qkv_a + q_b + attention +
/// o_proj) at `num_heads` heads per rank, `batch` sequences, KV length `step`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AicMlaRow {
    kernel: String,
    pub(crate) kv_dtype: String,
    pub(crate) gemm_dtype: String,
    pub(crate) num_heads: u64,
    pub(crate) batch: u64,
    pub step: u64,
    pub(crate) latency_us: f64,
}

/// One row of `nccl_collectives.csv` or `custom_allreduce.csv`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AicCommRow {
    /// `all_reduce`, `all_gather`, `reduce_scatter` or `alltoall`.
    pub(crate) op: String,
    /// `nccl` or `vllm_custom`.
    pub(crate) impl_name: String,
    /// `graph`, `eager` or `unspecified`.
    pub(crate) mode: String,
    pub(crate) dtype: String,
    pub(crate) nranks: u32,
    pub(crate) elements: u64,
    pub(crate) bytes: u64,
    pub(crate) latency_us: f64,
}

impl Table {
    fn one_of(&self, i: usize, col: &str, allowed: &[&str]) -> Result<String> {
        let v = self.str(i, col);
        if allowed.contains(&v) {
            Ok(v.to_string())
        } else {
            Err(self.bad(i, col, format!("one of {}", allowed.join(", "))))
        }
    }

    fn count(&self, i: usize, col: &str, lo: f64) -> Result<u64> {
        Ok(self.num(i, col, Bound::Count(lo, MAX_COUNT))? as u64)
    }

    /// A table with no data row is refused: it would silently price nothing.
    fn non_empty(self) -> Result<Self> {
        if self.rows.is_empty() {
            return Err(Error::field(
                &self.path,
                "rows",
                "no data row below the header",
            ));
        }
        Ok(self)
    }
}

/// Reads an AIConfigurator `moe.csv` (converted).
pub(crate) fn read_aic_moe_csv(path: &Path) -> Result<Vec<AicMoeRow>> {
    let cols = [
        "distribution",
        "quant",
        "experts",
        "hidden",
        "inter",
        "topk",
        "moe_tp",
        "moe_ep",
        "num_tokens",
        "latency_us",
    ];
    let t = Table::read(path, &cols)?.non_empty()?;
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        let distribution = t.str(i, "distribution").to_string();
        let known = distribution == "balanced"
            || distribution
                .strip_prefix("power_law_")
                .and_then(|a| a.parse::<f64>().ok())
                .is_some_and(|a| a.is_finite() && a > 0.0);
        if !known {
            return Err(t.bad(i, "distribution", "'balanced' or 'power_law_ALPHA'"));
        }
        out.push(AicMoeRow {
            distribution,
            quant: t.one_of(i, "quant", AIC_MOE_QUANTS)?,
            experts: t.count(i, "experts", 1.0)?,
            hidden: t.count(i, "hidden", 1.0)?,
            inter: t.count(i, "inter", 1.0)?,
            topk: t.count(i, "topk", 1.0)?,
            moe_tp: t.ranks(i, "moe_tp")?,
            moe_ep: t.ranks(i, "moe_ep")?,
            tokens: t.count(i, "num_tokens", 1.0)?,
            latency_us: t.time(i, "latency_us")?,
        });
    }
    Ok(out)
}

/// Reads an AIConfigurator `gemm.csv` (converted).
pub(crate) fn read_aic_gemm_csv(path: &Path) -> Result<Vec<AicGemmRow>> {
    let t = Table::read(path, &["dtype", "m", "n", "k", "latency_us"])?.non_empty()?;
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        out.push(AicGemmRow {
            dtype: t.one_of(i, "dtype", AIC_GEMM_DTYPES)?,
            m: t.count(i, "m", 1.0)?,
            n: t.count(i, "n", 1.0)?,
            k: t.count(i, "k", 1.0)?,
            latency_us: t.time(i, "latency_us")?,
        });
    }
    Ok(out)
}

/// Reads an AIConfigurator `mla_generation.csv` (converted).
pub(crate) fn read_aic_mla_csv(path: &Path) -> Result<Vec<AicMlaRow>> {
    let cols = [
        "kernel",
        "kv_dtype",
        "gemm_dtype",
        "num_heads",
        "batch",
        "step",
        "latency_us",
    ];
    let t = Table::read(path, &cols)?.non_empty()?;
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        out.push(AicMlaRow {
            kernel: t.str(i, "kernel").to_string(),
            kv_dtype: t.one_of(i, "kv_dtype", AIC_KV_DTYPES)?,
            gemm_dtype: t.one_of(i, "gemm_dtype", AIC_GEMM_DTYPES)?,
            num_heads: t.count(i, "num_heads", 1.0)?,
            batch: t.count(i, "batch", 1.0)?,
            step: t.count(i, "step", 1.0)?,
            latency_us: t.time(i, "latency_us")?,
        });
    }
    Ok(out)
}

/// Reads an AIConfigurator collective table (`nccl_collectives.csv`, `custom_allreduce.csv`).
/// `bytes` must equal `elements` × the dtype's size: the source counts elements, and a file
/// that disagrees was converted with the wrong unit.
pub(crate) fn read_aic_comm_csv(path: &Path) -> Result<Vec<AicCommRow>> {
    let cols = [
        "op",
        "impl",
        "mode",
        "dtype",
        "nranks",
        "elements",
        "bytes",
        "latency_us",
    ];
    let t = Table::read(path, &cols)?.non_empty()?;
    let names: Vec<&str> = AIC_COMM_DTYPES.iter().map(|d| d.0).collect();
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        let dtype = t.one_of(i, "dtype", &names)?;
        let size = AIC_COMM_DTYPES
            .iter()
            .find(|d| d.0 == dtype)
            .map_or(1, |d| d.1);
        let elements = t.count(i, "elements", 1.0)?;
        let bytes = t.count(i, "bytes", 1.0)?;
        if elements.checked_mul(size) != Some(bytes) {
            return Err(t.bad(
                i,
                "bytes",
                format!(
                    "elements x {size} (the size of {dtype}) = {}",
                    elements.saturating_mul(size)
                ),
            ));
        }
        out.push(AicCommRow {
            op: t.one_of(
                i,
                "op",
                &["all_reduce", "all_gather", "reduce_scatter", "alltoall"],
            )?,
            impl_name: t.one_of(i, "impl", &["nccl", "vllm_custom"])?,
            mode: t.one_of(i, "mode", &["graph", "eager", "unspecified"])?,
            dtype,
            nranks: t.ranks(i, "nranks")?,
            elements,
            bytes,
            latency_us: t.time(i, "latency_us")?,
        });
    }
    Ok(out)
}

/// One row of `data/calibration/kv-dtype/mla_kv_dtype.csv` (harness/mla_kv_dtype.py): one split-KV
/// MLA decode call (stage 1 + reduce) with a BF16 or an FP8 latent cache.
#[derive(Debug, Clone, PartialEq)]
pub struct MlaKvDtypeRow {
    /// `bf16`, `fp8` (dequantised in the kernel) or `fp8_direct`.
    pub(crate) kv_dtype: String,
    pub(crate) num_heads: u64,
    pub(crate) batch: u64,
    pub(crate) kv_len: u64,
    pub(crate) median_us: f64,
}

/// The cache formats `harness/mla_kv_dtype.py` measures.
const MLA_KV_DTYPE_VARIANTS: &[&str] = &["bf16", "fp8", "fp8_direct"];

/// Reads the measured BF16-vs-FP8 MLA decode table.
pub(crate) fn read_mla_kv_dtype_csv(path: &Path) -> Result<Vec<MlaKvDtypeRow>> {
    let cols = ["kv_dtype", "num_heads", "batch", "kv_len", "median_us"];
    let t = Table::read(path, &cols)?.non_empty()?;
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        out.push(MlaKvDtypeRow {
            kv_dtype: t.one_of(i, "kv_dtype", MLA_KV_DTYPE_VARIANTS)?,
            num_heads: t.count(i, "num_heads", 1.0)?,
            batch: t.count(i, "batch", 1.0)?,
            kv_len: t.count(i, "kv_len", 1.0)?,
            median_us: t.time(i, "median_us")?,
        });
    }
    Ok(out)
}

/// One row of a DeepEP low-latency table (`deepep_ll.csv`, harness/aiconfigurator_tables.py):
/// one phase's kernel time at `num_tokens` tokens per rank over `ranks` ranks, `bytes` the
/// rank's payload.
#[derive(Debug, Clone, PartialEq)]
pub struct DeepEpLlRow {
    /// `dispatch` or `combine`.
    pub phase: String,
    pub hidden: u64,
    pub topk: u64,
    pub experts: u64,
    pub ranks: u32,
    pub tokens: u64,
    pub bytes: f64,
    pub latency_us: f64,
}

/// Reads a DeepEP low-latency table (`deepep_ll.csv`).
pub fn read_deepep_ll_csv(path: &Path) -> Result<Vec<DeepEpLlRow>> {
    let cols = [
        "phase",
        "hidden",
        "topk",
        "experts",
        "ranks",
        "num_tokens",
        "bytes",
        "latency_us",
    ];
    let t = Table::read(path, &cols)?.non_empty()?;
    let mut out = Vec::with_capacity(t.rows.len());
    for i in 0..t.rows.len() {
        out.push(DeepEpLlRow {
            phase: t.one_of(i, "phase", &["dispatch", "combine"])?,
            hidden: t.count(i, "hidden", 1.0)?,
            topk: t.count(i, "topk", 1.0)?,
            experts: t.count(i, "experts", 1.0)?,
            ranks: t.ranks(i, "ranks")?,
            tokens: t.count(i, "num_tokens", 1.0)?,
            bytes: t.count(i, "bytes", 1.0)? as f64,
            latency_us: t.time(i, "latency_us")?,
        });
        // The payload DeepEP moves per rank is tokens × top-k × hidden elements: FP8 with
        // per-128 scales on dispatch (about 1.03 B each), BF16 on combine (2 B). Bytes far
        // from that are another unit (KiB, bits) or another shape: refused by line, as a fit
        // to them would price every step wrong.
        let r = &out[i];
        let elements = r.tokens as f64 * r.topk as f64 * r.hidden as f64;
        let per = r.bytes / elements;
        if !(DEEPEP_BYTES_PER_ELEMENT.0..=DEEPEP_BYTES_PER_ELEMENT.1).contains(&per) {
            return Err(t.bad(
                i,
                "bytes",
                format!(
                    "about num_tokens × topk × hidden = {} elements at 1 (FP8 dispatch, scales included) to 2 (BF16) bytes each; {} is {per:.4} B per element (bytes in another unit, such as KiB or bits?)",
                    crate::units::grouped(elements, 0),
                    crate::units::grouped(r.bytes, 0)
                ),
            ));
        }
    }
    Ok(out)
}

/// Bytes per (token × top-k × hidden) element a DeepEP low-latency row may state: FP8 dispatch
/// with its scales is 1.03 to 1.04, BF16 dispatch or combine 2 (and a little for headers).
const DEEPEP_BYTES_PER_ELEMENT: (f64, f64) = (0.9, 2.5);
