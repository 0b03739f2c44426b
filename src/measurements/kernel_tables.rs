//! Measured tables of single kernels: MLA decode with a BF16 or FP8 latent cache, and DeepEP's
//! low-latency dispatch and combine.

use super::table::Table;
use crate::error::Result;
use std::path::Path;

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
pub(super) const MLA_KV_DTYPE_VARIANTS: &[&str] = &["bf16", "fp8", "fp8_direct"];

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
pub(super) const DEEPEP_BYTES_PER_ELEMENT: (f64, f64) = (0.9, 2.5);
