//! AIConfigurator tables, as harness/aiconfigurator_tables.py converts them: MoE, GEMM, MLA and
//! collective rows (columns and units in the MANIFEST.txt beside each converted folder, e.g.
//! data/calibration/aiconfigurator/rtx_pro_6000_server/MANIFEST.txt). Latencies are µs.

use super::table::{Bound, Table};
use super::MAX_COUNT;
use crate::error::{Error, Result};
use std::path::Path;

/// MoE quantisation modes AIConfigurator 0.12 names in `moe_perf` (its `MoEQuantMode`).
pub(super) const AIC_MOE_QUANTS: &[&str] = &[
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
pub(super) const AIC_GEMM_DTYPES: &[&str] = &[
    "bfloat16",
    "float16",
    "fp8",
    "fp8_block",
    "int4_wo",
    "int8_wo",
    "nvfp4",
];
/// KV-cache dtypes of `mla_generation_module_perf`.
pub(super) const AIC_KV_DTYPES: &[&str] = &["bfloat16", "fp8"];
/// Element types of the collective tables, with their size in bytes.
pub(super) const AIC_COMM_DTYPES: &[(&str, u64)] = &[
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
    pub(super) fn one_of(&self, i: usize, col: &str, allowed: &[&str]) -> Result<String> {
        let v = self.str(i, col);
        if allowed.contains(&v) {
            Ok(v.to_string())
        } else {
            Err(self.bad(i, col, format!("one of {}", allowed.join(", "))))
        }
    }

    pub(super) fn count(&self, i: usize, col: &str, lo: f64) -> Result<u64> {
        Ok(self.num(i, col, Bound::Count(lo, MAX_COUNT))? as u64)
    }

    /// A table with no data row is refused: it would silently price nothing.
    pub(super) fn non_empty(self) -> Result<Self> {
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
