//! Reading a converted AIConfigurator folder: each table file into its lines (duplicate rows
//! that conflict refused, lines fitted monotone by `cost::isotonic`), and the device its
//! MANIFEST.txt names.

use super::{AicTables, CommCurve, CommLines, MlaGrid};
use crate::error::{Error, Result};
use crate::measurements::{
    read_aic_comm_csv, read_aic_gemm_csv, read_aic_mla_csv, read_aic_moe_csv, AicCommRow,
};
use std::collections::HashMap;
use std::path::Path;

/// The files a converted tables folder may hold (harness/aiconfigurator_tables.py writes them).
pub const TABLE_FILES: [&str; 6] = [
    "moe.csv",
    "gemm.csv",
    "mla_generation.csv",
    "nccl_collectives.csv",
    "custom_allreduce.csv",
    crate::cost::internode::MULTINODE_CSV,
];

impl AicTables {
    /// Reads the converted tables present in `dir` (moe.csv, gemm.csv, mla_generation.csv,
    /// nccl_collectives.csv, custom_allreduce.csv); at least one must be there.
    pub fn read(dir: &Path) -> Result<Self> {
        Self::read_only(dir, None)
    }

    /// [`AicTables::read`], of the files named in `only` where given (`TABLE_FILES` names).
    pub fn read_only(dir: &Path, only: Option<&[String]>) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Read {
                path: dir.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut t = AicTables {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            // Canonical, so reports name `data/calibration/aiconfigurator/x`, not `a/../x`.
            dir: dir.canonicalize().unwrap_or(dir.to_path_buf()),
            ..Default::default()
        };
        let present = |name: &str| {
            let p = dir.join(name);
            let wanted = only.is_none_or(|o| o.iter().any(|n| n == name));
            (wanted && p.exists()).then_some(p)
        };
        if let Some(p) = present("moe.csv") {
            t.read_moe(&p)?;
        }
        if let Some(p) = present("gemm.csv") {
            t.read_gemm(&p)?;
        }
        if let Some(p) = present("mla_generation.csv") {
            t.read_mla(&p)?;
        }
        if let Some(p) = present("nccl_collectives.csv") {
            t.read_nccl(&p)?;
        }
        if let Some(p) = present("custom_allreduce.csv") {
            t.read_custom(&p)?;
        }
        if let Some(p) = present(crate::cost::internode::MULTINODE_CSV) {
            t.read_multinode(&p)?;
        }
        let manifest = dir.join("MANIFEST.txt");
        if manifest.is_file() {
            let text = crate::files::read_text(&manifest, crate::files::InputKind::Manifest)?;
            t.device = manifest_device(&text);
        }
        if t.files.is_empty() {
            return Err(Error::NothingFound { path: dir.to_path_buf(), what: "no AIConfigurator table found", expected: "moe.csv, gemm.csv, mla_generation.csv, nccl_collectives.csv and/or custom_allreduce.csv, as harness/aiconfigurator_tables.py writes them".into() });
        }
        Ok(t)
    }

    /// moe.csv: the routed-expert call per (distribution, quant, shape, TP, EP), by tokens.
    fn read_moe(&mut self, p: &Path) -> Result<()> {
        let rows = read_aic_moe_csv(p)?;
        self.files.insert("moe.csv".into(), rows.len());
        no_conflicts(
            p,
            rows.iter().map(|r| {
                Some((
                    format!(
                        "{} {} experts={} hidden={} inter={} topk={} moe_tp={} moe_ep={} num_tokens={}",
                        r.distribution, r.quant, r.experts, r.hidden, r.inter, r.topk, r.moe_tp, r.moe_ep, r.tokens
                    ),
                    r.latency_us,
                ))
            }),
        )?;
        for r in rows {
            let key = (
                r.distribution,
                r.quant,
                r.experts,
                r.hidden,
                r.inter,
                r.topk,
                r.moe_tp,
                r.moe_ep,
            );
            self.moe
                .entry(key)
                .or_default()
                .push((r.tokens as f64, r.latency_us));
        }
        let mut pooled = 0;
        for v in self.moe.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            pooled += crate::cost::isotonic::fit_rows(v);
        }
        self.isotonic.insert("moe.csv".into(), pooled);
        Ok(())
    }

    /// gemm.csv: GEMMs per dtype and (n, k), by m.
    fn read_gemm(&mut self, p: &Path) -> Result<()> {
        let rows = read_aic_gemm_csv(p)?;
        self.files.insert("gemm.csv".into(), rows.len());
        no_conflicts(
            p,
            rows.iter().map(|r| {
                Some((
                    format!("{} m={} n={} k={}", r.dtype, r.m, r.n, r.k),
                    r.latency_us,
                ))
            }),
        )?;
        for r in rows {
            self.gemm
                .entry(r.dtype)
                .or_default()
                .entry((r.n, r.k))
                .or_default()
                .push((r.m as f64, r.latency_us));
        }
        let mut pooled = 0;
        for v in self.gemm.values_mut().flat_map(|g| g.values_mut()) {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            pooled += crate::cost::isotonic::fit_rows(v);
        }
        self.isotonic.insert("gemm.csv".into(), pooled);
        Ok(())
    }

    /// mla_generation.csv: the MLA generation module per (KV dtype, heads), by batch and KV length; the BF16-GEMM rows only.
    fn read_mla(&mut self, p: &Path) -> Result<()> {
        let rows = read_aic_mla_csv(p)?;
        self.files.insert("mla_generation.csv".into(), rows.len());
        // The lookup keys on (kv dtype, heads, batch, step) among the BF16-GEMM rows; rows
        // of other GEMM dtypes are not read and cannot conflict.
        no_conflicts(
            p,
            rows.iter().map(|r| {
                (r.gemm_dtype == "bfloat16").then(|| {
                    (
                        format!(
                            "kv_dtype={} num_heads={} batch={} step={}",
                            r.kv_dtype, r.num_heads, r.batch, r.step
                        ),
                        r.latency_us,
                    )
                })
            }),
        )?;
        for r in rows.into_iter().filter(|r| r.gemm_dtype == "bfloat16") {
            self.mla
                .entry((r.kv_dtype, r.num_heads))
                .or_default()
                .push((r.batch as f64, r.step as f64, r.latency_us));
        }
        let mut pooled = 0;
        for v in self.mla.values_mut() {
            v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)));
            pooled += crate::cost::isotonic::fit_grid(v);
        }
        self.isotonic.insert("mla_generation.csv".into(), pooled);
        self.mla_grid = self
            .mla
            .iter()
            .map(|((kv, heads), g)| (kv.clone(), *heads, MlaGrid::new(g)))
            .collect();
        Ok(())
    }

    /// nccl_collectives.csv: NCCL curves per (op, ranks), with their protocol switch.
    fn read_nccl(&mut self, p: &Path) -> Result<()> {
        let rows = read_aic_comm_csv(p)?;
        self.files.insert("nccl_collectives.csv".into(), rows.len());
        self.nccl = comm_curves(p, &rows, |r| r.op.clone())?
            .into_iter()
            .map(|(k, v)| (k, CommCurve::new(v)))
            .collect();
        Ok(())
    }

    /// custom_allreduce.csv: vLLM's custom all-reduce per (mode, ranks).
    fn read_custom(&mut self, p: &Path) -> Result<()> {
        let rows = read_aic_comm_csv(p)?;
        self.files.insert("custom_allreduce.csv".into(), rows.len());
        self.custom = comm_curves(p, &rows, |r| r.mode.clone())?;
        for v in self.custom.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v.dedup_by(|a, b| a.0 == b.0);
        }
        Ok(())
    }

    /// The multi-node nccl-tests table (`cost::internode::MULTINODE_CSV`).
    fn read_multinode(&mut self, p: &Path) -> Result<()> {
        let m = crate::cost::internode::MultiNodeTable::read(p)?;
        self.files
            .insert(crate::cost::internode::MULTINODE_CSV.into(), m.rows());
        self.multinode = Some(m);
        Ok(())
    }
}

/// The device a converted folder's MANIFEST.txt names (`device 'NVIDIA H200'`), as
/// harness/aiconfigurator_tables.py writes it.
pub fn manifest_device(manifest: &str) -> Option<String> {
    let re = regex::Regex::new(r"device '([^']{1,120})'").expect("valid regex");
    re.captures(manifest).map(|c| c[1].to_string())
}

/// Whether tables measured on `device` describe a GPU of this display name (the display name
/// starts with it: 'NVIDIA H200' describes 'NVIDIA H200 SXM').
pub fn device_matches(device: &str, gpu_display_name: &str) -> bool {
    gpu_display_name.starts_with(device)
}

/// Groups collective rows by (key, nranks), keeping per group the element type of 2 bytes when
/// present (BF16 activations are what a decode step reduces), else whatever the group has.
/// Two rows at the same message size with different latencies are an error (see
/// [`no_conflicts`]).
fn comm_curves(
    path: &Path,
    rows: &[AicCommRow],
    key: impl Fn(&AicCommRow) -> String,
) -> Result<CommLines> {
    let mut two_byte: HashMap<(String, u32), bool> = HashMap::new();
    for r in rows {
        let e = two_byte.entry((key(r), r.nranks)).or_default();
        *e |= r.bytes == 2 * r.elements;
    }
    let kept = |r: &AicCommRow| !(two_byte[&(key(r), r.nranks)] && r.bytes != 2 * r.elements);
    no_conflicts(
        path,
        rows.iter().map(|r| {
            kept(r).then(|| {
                (
                    format!("{} nranks={} bytes={}", key(r), r.nranks, r.bytes),
                    r.latency_us,
                )
            })
        }),
    )?;
    let mut out: HashMap<(String, u32), Vec<(f64, f64)>> = HashMap::new();
    for r in rows.iter().filter(|r| kept(r)) {
        out.entry((key(r), r.nranks))
            .or_default()
            .push((r.bytes as f64, r.latency_us));
    }
    Ok(out)
}

/// Refuses two rows of one table with the same lookup key and different latencies: the reader
/// would keep one of them silently. Identical repeats are accepted (they price the same).
/// `rows` yields, per data row in file order, its key and latency, or None for a row the lookup
/// does not read; data row i is line i + 2 of the file (line 1 is the header).
fn no_conflicts(path: &Path, rows: impl Iterator<Item = Option<(String, f64)>>) -> Result<()> {
    let mut seen: HashMap<String, (usize, f64)> = HashMap::new();
    for (i, row) in rows.enumerate() {
        let Some((key, us)) = row else { continue };
        let line = i + 2;
        match seen.get(&key) {
            Some(&(first, v)) if v != us => {
                return Err(Error::Input {
                    path: path.to_path_buf(),
                    problem: format!(
                        "lines {first} and {line} give the same row ({key}) different latencies ({v} and {us} µs): a duplicate that conflicts (remove one; identical repeats are accepted)"
                    ),
                })
            }
            Some(_) => {}
            None => {
                seen.insert(key, (line, us));
            }
        }
    }
    Ok(())
}
