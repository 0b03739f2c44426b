//! Reads the harness's measurement CSVs (schema in data/README.md). Every value is checked where
//! it enters: names against their choices, numbers finite and within physical bounds, and every
//! error names the file, the row, the column, the value and what is allowed. Reads are bounded:
//! the file's size by its kind, each line to a few KiB, so a stray device or a one-line 200 MB
//! file is refused without being read whole or echoed.

mod aic;
mod kernel_tables;
mod table;

use crate::error::{Error, Result};
use crate::files::InputKind;
use crate::names::enum_names;
use crate::scenario::{Algo, Proto};
use crate::workload::CostFamily;
pub(crate) use aic::{
    read_aic_comm_csv, read_aic_gemm_csv, read_aic_mla_csv, read_aic_moe_csv, AicCommRow,
};
pub(crate) use kernel_tables::read_mla_kv_dtype_csv;
pub use kernel_tables::{read_deepep_ll_csv, DeepEpLlRow, MlaKvDtypeRow};
use std::path::{Path, PathBuf};
use table::{Bound, Table};

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
                format!("row {}", t.line(i)),
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
