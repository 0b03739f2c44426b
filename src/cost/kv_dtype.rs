//! An FP8 KV cache priced from a measurement, not from a byte law.
//!
//! A split-KV decode kernel at small batch is bound by its split structure (one program per
//! head block x split x sequence, each walking a short run of tokens, then a reduce), and an FP8
//! cache adds a dequantisation per element; halving the bytes says nothing about either. Where a
//! profile's attention data is BF16 only (the AIConfigurator RTX PRO 6000 MLA table, the
//! harness's micro-benchmarks, the laws), an MLA attention call over an FP8 cache is priced as
//! its BF16 price times the FP8/BF16 ratio measured by `harness/mla_kv_dtype.py`
//! (`data/calibration/kv-dtype/`, H200), interpolated in log batch and log KV length at the
//! nearest measured head count. The ratio is transferred as measured to other GPUs, and the
//! pricing says so. Attention kinds with no FP8 measurement (GQA) are priced as BF16, the
//! nearest measured dtype, with a warning.

use crate::error::{Error, Result};
use crate::measurements::{read_mla_kv_dtype_csv, MlaKvDtypeRow};
use crate::scenario::catalog;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The measured table, relative to the data root.
pub const TABLE: &str = "data/calibration/kv-dtype/mla_kv_dtype.csv";

/// The FP8 variant decodesim prices: the cache dequantised in the kernel (fp32 multiply by the
/// per-tensor scale, then BF16), as vLLM's Triton MLA decode does.
const PRICED_VARIANT: &str = "fp8";

/// FP8/BF16 time ratios on a (batch x KV length) grid, per heads per rank.
#[derive(Debug, Clone)]
pub struct KvDtypeRatios {
    path: PathBuf,
    grids: BTreeMap<u64, Grid>,
    /// Compute capability of the GPU the ratios were measured on (`env.txt` beside the table,
    /// `gpu0: ... sm=9.0`); None where the folder does not say.
    measured_on: Option<String>,
}

#[derive(Debug, Clone)]
struct Grid {
    /// log2 of the measured batches and KV lengths, ascending.
    batches: Vec<f64>,
    lens: Vec<f64>,
    /// ratio[b * lens.len() + l]
    ratio: Vec<f64>,
}

/// One looked-up ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    pub value: f64,
    /// The heads-per-rank grid it was read from.
    pub heads: u64,
    /// Batch or KV length outside the measured grid (held at its edge).
    pub extrapolated: bool,
}

impl KvDtypeRatios {
    /// The table bundled with decodesim (read once per process).
    pub fn bundled() -> Result<&'static KvDtypeRatios> {
        static CELL: OnceLock<std::result::Result<KvDtypeRatios, String>> = OnceLock::new();
        let path = catalog::data_root().join(TABLE);
        CELL.get_or_init(|| Self::read(&path).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|msg| Error::field(&path, "rows", msg.clone()))
    }

    pub fn read(path: &Path) -> Result<Self> {
        let mut t = Self::from_rows(path, &read_mla_kv_dtype_csv(path)?)?;
        t.measured_on = path
            .parent()
            .and_then(|d| std::fs::read_to_string(d.join("env.txt")).ok())
            .and_then(|env| measured_capability(&env));
        Ok(t)
    }

    /// Whether the ratios were measured on a GPU of compute capability `cc`: a ratio of one
    /// architecture's kernels is not the other's (the dequantisation's cost against the bytes
    /// saved depends on the chip), so elsewhere an FP8 cache is priced at the BF16 price and
    /// the ratio only bounds its interval.
    pub fn applies_to(&self, cc: &str) -> bool {
        self.measured_on.as_deref() == Some(cc)
    }

    /// Pairs every FP8 row with the BF16 row of the same shape; each head count must cover a
    /// full batch x length grid (a hole would make the interpolation silently wrong).
    pub fn from_rows(path: &Path, rows: &[MlaKvDtypeRow]) -> Result<Self> {
        // (heads, batch, KV length) → (BF16 µs, FP8 µs), each once seen.
        type Pair = (Option<f64>, Option<f64>);
        let mut by_shape: BTreeMap<(u64, u64, u64), Pair> = BTreeMap::new();
        for r in rows {
            let e = by_shape
                .entry((r.num_heads, r.batch, r.kv_len))
                .or_default();
            let slot = match r.kv_dtype.as_str() {
                "bf16" => &mut e.0,
                v if v == PRICED_VARIANT => &mut e.1,
                _ => continue,
            };
            if slot.is_some() {
                return Err(Error::field(
                    path,
                    "rows",
                    format!(
                        "two {} rows for heads {}, batch {}, kv_len {}: expected one per shape",
                        r.kv_dtype, r.num_heads, r.batch, r.kv_len
                    ),
                ));
            }
            *slot = Some(r.median_us);
        }
        let mut per_heads: BTreeMap<u64, BTreeMap<(u64, u64), f64>> = BTreeMap::new();
        for ((h, b, l), pair) in by_shape {
            let (Some(bf16), Some(fp8)) = pair else {
                return Err(Error::field(
                    path,
                    "rows",
                    format!("heads {h}, batch {b}, kv_len {l}: expected both a bf16 and an {PRICED_VARIANT} row"),
                ));
            };
            per_heads.entry(h).or_default().insert((b, l), fp8 / bf16);
        }
        let mut grids = BTreeMap::new();
        for (h, cells) in per_heads {
            let mut batches: Vec<u64> = cells.keys().map(|k| k.0).collect();
            let mut lens: Vec<u64> = cells.keys().map(|k| k.1).collect();
            batches.dedup();
            lens.sort_unstable();
            lens.dedup();
            let mut ratio = Vec::with_capacity(batches.len() * lens.len());
            for &b in &batches {
                for &l in &lens {
                    let Some(r) = cells.get(&(b, l)) else {
                        return Err(Error::field(
                            path,
                            "rows",
                            format!("heads {h}: no row at batch {b}, kv_len {l}; expected a full batch x kv_len grid"),
                        ));
                    };
                    ratio.push(*r);
                }
            }
            let log2 = |v: &[u64]| v.iter().map(|&x| (x as f64).log2()).collect();
            grids.insert(
                h,
                Grid {
                    batches: log2(&batches),
                    lens: log2(&lens),
                    ratio,
                },
            );
        }
        if grids.is_empty() {
            return Err(Error::field(path, "rows", "no bf16/fp8 pair of rows"));
        }
        Ok(KvDtypeRatios {
            path: path.to_path_buf(),
            grids,
            measured_on: None,
        })
    }

    /// FP8-over-BF16 time of one MLA decode call (stage 1 + reduce) at `heads` heads per rank,
    /// `batch` sequences and KV length `kv_len`.
    pub fn fp8_over_bf16(&self, heads: u64, batch: f64, kv_len: f64) -> Ratio {
        // Nearest measured head count in log distance (8 and 16 bracket TP8 Kimi and DeepSeek).
        let (&h, g) = self
            .grids
            .iter()
            .min_by(|a, b| {
                let d = |x: u64| ((x as f64).log2() - (heads.max(1) as f64).log2()).abs();
                d(*a.0).total_cmp(&d(*b.0))
            })
            .expect("from_rows refuses an empty table");
        let (bi, bt, bx) = locate(&g.batches, batch.max(1.0).log2());
        let (li, lt, lx) = locate(&g.lens, kv_len.max(1.0).log2());
        let n = g.lens.len();
        let at = |b: usize, l: usize| g.ratio[b * n + l];
        let b1 = (bi + 1).min(g.batches.len() - 1);
        let l1 = (li + 1).min(n - 1);
        let lo = at(bi, li) * (1.0 - lt) + at(bi, l1) * lt;
        let hi = at(b1, li) * (1.0 - lt) + at(b1, l1) * lt;
        Ratio {
            value: lo * (1.0 - bt) + hi * bt,
            heads: h,
            extrapolated: bx || lx || h != heads,
        }
    }

    /// One line of provenance for reports.
    pub fn source(&self) -> String {
        format!(
            "FP8/BF16 ratio measured by harness/mla_kv_dtype.py on an NVIDIA H200 (Triton 3.6, TRITON_MLA-structure split-KV kernel, FP8 dequantised in the kernel; {})",
            crate::units::path(&self.path)
        )
    }
}

/// The report's line where an FP8 cache is priced at the BF16 price because the GPU's own FP8
/// attention is unmeasured; `h200_ratio`: the H200's ratio at this shape (the interval's upper
/// bound; the byte-halved law is the lower).
pub fn unmeasured_note(gpu: &str, h200_ratio: f64) -> String {
    format!(
        "attention_mla_decode with an FP8 KV cache: FP8 attention is not measured on {gpu}; priced at the BF16 price (the H200's FP8/BF16 ratio, x{h200_ratio:.2} here, and the byte-halved law bound its interval)"
    )
}

/// The compute capability `harness/env_info.py` printed for the first GPU (`sm=9.0`).
fn measured_capability(env: &str) -> Option<String> {
    let line = env.lines().find(|l| l.starts_with("gpu0:"))?;
    let sm = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("sm="))?;
    Some(sm.to_string())
}

/// Index of the cell holding `x` in ascending `axis`, the fraction within it, and whether `x`
/// lay outside (clamped to the edge).
fn locate(axis: &[f64], x: f64) -> (usize, f64, bool) {
    let last = axis.len() - 1;
    if axis.len() == 1 || x <= axis[0] {
        return (0, 0.0, x < axis[0] - 1e-9);
    }
    if x >= axis[last] {
        return (last, 0.0, x > axis[last] + 1e-9);
    }
    let i = axis.partition_point(|&a| a <= x) - 1;
    (i, (x - axis[i]) / (axis[i + 1] - axis[i]), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kv: &str, h: u64, b: u64, l: u64, us: f64) -> MlaKvDtypeRow {
        MlaKvDtypeRow {
            kv_dtype: kv.into(),
            num_heads: h,
            batch: b,
            kv_len: l,
            median_us: us,
        }
    }

    fn table() -> KvDtypeRatios {
        let mut rows = Vec::new();
        for (b, l, r) in [
            (1, 1024, 1.2),
            (1, 4096, 1.6),
            (4, 1024, 1.4),
            (4, 4096, 2.0),
        ] {
            rows.push(row("bf16", 8, b, l, 10.0));
            rows.push(row("fp8", 8, b, l, 10.0 * r));
            rows.push(row("fp8_direct", 8, b, l, 99.0));
        }
        KvDtypeRatios::from_rows(Path::new("t.csv"), &rows).unwrap()
    }

    #[test]
    fn ratio_is_read_at_grid_points_and_between_them_in_log_space() {
        let t = table();
        assert!((t.fp8_over_bf16(8, 1.0, 1024.0).value - 1.2).abs() < 1e-12);
        assert!((t.fp8_over_bf16(8, 4.0, 4096.0).value - 2.0).abs() < 1e-12);
        // batch 2 and KV 2048 are the log midpoints: the mean of the four corners.
        let mid = t.fp8_over_bf16(8, 2.0, 2048.0);
        assert!((mid.value - 1.55).abs() < 1e-12, "{mid:?}");
        assert!(!mid.extrapolated);
        let out = t.fp8_over_bf16(8, 64.0, 100.0);
        assert!((out.value - 1.4).abs() < 1e-12);
        assert!(out.extrapolated);
        // Another head count reads the nearest grid and says it extrapolated.
        let other = t.fp8_over_bf16(16, 1.0, 1024.0);
        assert_eq!(other.heads, 8);
        assert!(other.extrapolated);
    }

    #[test]
    fn holes_and_unpaired_rows_are_refused() {
        let rows = vec![
            row("bf16", 8, 1, 1024, 10.0),
            row("fp8", 8, 1, 1024, 12.0),
            row("bf16", 8, 4, 4096, 10.0),
            row("fp8", 8, 4, 4096, 12.0),
        ];
        let e = KvDtypeRatios::from_rows(Path::new("t.csv"), &rows).unwrap_err();
        assert!(e.to_string().contains("full batch x kv_len grid"), "{e}");
        let e = KvDtypeRatios::from_rows(Path::new("t.csv"), &rows[..1]).unwrap_err();
        assert!(e.to_string().contains("both a bf16 and an fp8 row"), "{e}");
        let dup = vec![rows[0].clone(), rows[0].clone(), rows[1].clone()];
        let e = KvDtypeRatios::from_rows(Path::new("t.csv"), &dup).unwrap_err();
        assert!(e.to_string().contains("two bf16 rows"), "{e}");
    }

    #[test]
    fn the_bundled_ratios_apply_to_the_gpu_they_were_measured_on_only() {
        let t = KvDtypeRatios::bundled().unwrap();
        assert!(t.applies_to("9.0"));
        assert!(!t.applies_to("12.0") && !t.applies_to("10.0"));
        assert!(
            !table().applies_to("9.0"),
            "a table without env.txt applies nowhere"
        );
        assert_eq!(
            measured_capability("x\ngpu0: NVIDIA H200 sm=9.0 SMs=132\n").as_deref(),
            Some("9.0")
        );
    }

    #[test]
    fn the_bundled_measurement_says_fp8_is_slower_than_bf16_here() {
        let t = KvDtypeRatios::bundled().unwrap();
        // Batch 1 at 128k: 1.64x on the H200 (MANIFEST.txt), nowhere near the 0.5x of a byte law.
        let r = t.fp8_over_bf16(8, 1.0, 131072.0);
        assert!((1.5..1.8).contains(&r.value), "{r:?}");
        assert!(!r.extrapolated);
        for b in [1.0, 8.0, 128.0] {
            for l in [1024.0, 16384.0, 131072.0] {
                let v = t.fp8_over_bf16(8, b, l).value;
                assert!((1.1..2.0).contains(&v), "batch {b} kv {l}: {v}");
            }
        }
    }
}
