//! The `tables/` folder `--from-nccl-tests` stages beside the profile: the measured rows (one
//! node to `nccl_collectives.csv`, several to the multi-node table), the base profile's rows
//! and tables kept where the files do not measure them, and the manifest saying where each
//! came from.

use super::{Measured, NcclTestsFile, NcclTestsRequest};
use crate::cost::internode::{MULTINODE_CSV, MULTINODE_HEADER};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The base profile's tables copied along when it prices from them (`LICENSE` and `NOTICE`
/// always; `gemm_shapes.csv` with `gemm.csv`).
const BASE_TABLES: [&str; 7] = [
    "moe.csv",
    "gemm.csv",
    "gemm_shapes.csv",
    "mla_generation.csv",
    "custom_allreduce.csv",
    "LICENSE",
    "NOTICE",
];

/// A staged folder written file by file; errors name a file at its final place.
pub(super) struct Stage<'a> {
    pub dir: &'a Path,
    pub final_dir: &'a Path,
}

impl Stage<'_> {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.dir.join(name);
        std::fs::write(&path, bytes).map_err(|source| Error::Write {
            path: self.final_dir.join(name),
            source,
        })
    }

    /// Copies the file `src` in unchanged as `name`.
    fn copy(&self, src: &Path, name: &str) -> Result<()> {
        let bytes = std::fs::read(src).map_err(|e| Error::Read {
            path: src.to_path_buf(),
            source: e,
        })?;
        self.put(name, &bytes)
    }
}

/// What the staged folder holds.
#[derive(Default)]
pub(super) struct WrittenTables {
    /// Rows of `nccl_collectives.csv` (measured and kept) and of the multi-node table.
    pub single_rows: usize,
    pub multi_rows: usize,
    /// (op, ranks) → rows of the single-node table measured by the files.
    pub measured: BTreeMap<(String, u32), usize>,
    /// (op, ranks) → rows kept from the base profile's table.
    pub kept: BTreeMap<(String, u32), usize>,
    pub kept_multinode: bool,
    /// The base's other tables copied along.
    pub copied: Vec<String>,
}

/// Writes the staged tables and their manifest; `sources` names each file read.
pub(super) fn write_tables(
    req: &NcclTestsRequest,
    files: &[NcclTestsFile],
    table: &Measured,
    stage: &Stage,
    sources: &[String],
    date: &str,
) -> Result<WrittenTables> {
    let mut written = WrittenTables::default();
    let (mut csv, multinode) = measured_rows(files, table, &mut written);
    keep_base_rows(req, &mut csv, &mut written)?;
    if written.single_rows > 0 {
        stage.put("nccl_collectives.csv", csv.as_bytes())?;
    }
    // The base's multi-node table stays when no file here ran over several nodes.
    if written.multi_rows > 0 {
        stage.put(MULTINODE_CSV, multinode.as_bytes())?;
    } else if let Some(src) = base_table(req, MULTINODE_CSV) {
        stage.copy(&src, MULTINODE_CSV)?;
        written.kept_multinode = true;
    }
    let base_manifest = copy_base_tables(req, stage, &mut written)?;
    let text = manifest(
        req,
        stage.final_dir,
        sources,
        date,
        &written,
        &base_manifest,
    );
    stage.put("MANIFEST.txt", text.as_bytes())?;
    Ok(written)
}

/// Whether the base profile prices from its table `name` (`aiconfigurator.only` may leave
/// some of its folder's files unused: those stay unused).
fn base_uses(req: &NcclTestsRequest, name: &str) -> bool {
    req.base.aic.as_ref().is_some_and(|t| t.has(name))
}

/// The base's table `name`, where the base prices from it and the file is there.
fn base_table(req: &NcclTestsRequest, name: &str) -> Option<std::path::PathBuf> {
    req.base
        .aic
        .as_ref()
        .map(|t| t.dir.clone())
        .filter(|_| base_uses(req, name))
        .map(|d| d.join(name))
        .filter(|p| p.is_file())
}

/// The measured rows as the text of the single-node and the multi-node table. Files of
/// several nodes go to the multi-node table (cost::internode::MultiNodeTable), keyed by their
/// node count; the others replace the single-node rows.
fn measured_rows(
    files: &[NcclTestsFile],
    table: &Measured,
    written: &mut WrittenTables,
) -> (String, String) {
    let nodes_of: BTreeMap<(String, u32), u32> = files
        .iter()
        .map(|f| ((f.op.clone(), f.nranks), f.nodes))
        .collect();
    let multi = |op: &String, n: &u32| nodes_of.get(&(op.clone(), *n)).copied().unwrap_or(1) > 1;
    let mut csv = String::from("op,impl,mode,dtype,nranks,elements,bytes,latency_us\n");
    let mut mn = format!("{MULTINODE_HEADER}\n");
    for ((op, n, dtype, bytes), (us, elements, _, _)) in table {
        if multi(op, n) {
            let nodes = nodes_of[&(op.clone(), *n)];
            mn.push_str(&format!("{op},{nodes},{n},{dtype},{bytes},{us:.3}\n"));
            written.multi_rows += 1;
        } else {
            csv.push_str(&format!(
                "{op},nccl,unspecified,{dtype},{n},{elements},{bytes},{us:.3}\n"
            ));
            written.single_rows += 1;
            *written.measured.entry((op.clone(), *n)).or_default() += 1;
        }
    }
    (csv, mn)
}

/// Appends the base's measured rows of the collectives and rank counts the files do not
/// measure: an all_reduce file alone must not turn a measured all_gather into a law's guess.
fn keep_base_rows(
    req: &NcclTestsRequest,
    csv: &mut String,
    written: &mut WrittenTables,
) -> Result<()> {
    let Some(src) = base_table(req, "nccl_collectives.csv") else {
        return Ok(());
    };
    for r in crate::measurements::read_aic_comm_csv(&src)? {
        let key = (r.op.clone(), r.nranks);
        if r.impl_name != "nccl" || written.measured.contains_key(&key) {
            continue;
        }
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            r.op, r.impl_name, r.mode, r.dtype, r.nranks, r.elements, r.bytes, r.latency_us
        ));
        written.single_rows += 1;
        *written.kept.entry(key).or_default() += 1;
    }
    Ok(())
}

/// Copies the base's other tables along (the section names one folder); returns the base
/// folder's manifest.
fn copy_base_tables(
    req: &NcclTestsRequest,
    stage: &Stage,
    written: &mut WrittenTables,
) -> Result<String> {
    let Some(dir) = req.base.aic.as_ref().map(|t| t.dir.clone()) else {
        return Ok(String::new());
    };
    for name in BASE_TABLES {
        let used = match name {
            "gemm_shapes.csv" => base_uses(req, "gemm.csv"),
            "LICENSE" | "NOTICE" => true,
            table => base_uses(req, table),
        };
        let src = dir.join(name);
        if used && src.is_file() {
            stage.copy(&src, name)?;
            written.copied.push(name.to_string());
        }
    }
    Ok(std::fs::read_to_string(dir.join("MANIFEST.txt")).unwrap_or_default())
}

/// The staged folder's `MANIFEST.txt`: every table's source.
fn manifest(
    req: &NcclTestsRequest,
    tables_dir: &Path,
    sources: &[String],
    date: &str,
    written: &WrittenTables,
    base_manifest: &str,
) -> String {
    let curves_text = |m: &BTreeMap<(String, u32), usize>| {
        m.iter()
            .map(|((op, n), rows)| format!("{op} at {n} ranks ({rows} rows)"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let column = req.column.name();
    let mut manifest = format!(
        "{}: collective table from nccl-tests, written by decodesim calibrate --from-nccl-tests on {date}\n\nnccl_collectives.csv: the {column} time of every row of\n",
        crate::units::path(tables_dir)
    );
    for s in sources {
        manifest.push_str(&format!("  {s}\n"));
    }
    manifest.push_str("  size = the nccl-tests size column (bytes of the whole buffer), elements = size / dtype size; latency_us = the time column (µs per operation)\n");
    if written.multi_rows > 0 {
        manifest.push_str(&format!(
            "\n{}: the rows of the files run over several nodes ({} rows; nodes = distinct hosts of their '# Rank' lines, or ranks / GPUs per node of system '{}' where they name none); they price collectives whose group spans nodes (cost::internode)\n",
            MULTINODE_CSV,
            written.multi_rows,
            req.system.name
        ));
    }
    if !written.kept.is_empty() {
        manifest.push_str(&format!(
            "\nnccl_collectives.csv also keeps the base profile's measured rows of what the files above do not measure: {}\n",
            curves_text(&written.kept)
        ));
    }
    if written.kept_multinode {
        manifest.push_str(&format!(
            "\n{MULTINODE_CSV}: no file above ran over several nodes; the base profile's multi-node table is kept unchanged\n"
        ));
    }
    if let Some(t) = &req.base.aic {
        let copied = &written.copied;
        manifest.push_str(&format!(
            "\nCopied unchanged from {} ({}); its NCCL rows of the collectives measured above are replaced by the measurements. Its manifest follows.\n\n{base_manifest}",
            crate::units::path(&t.dir),
            if copied.is_empty() { "nothing".to_string() } else { copied.join(", ") }
        ));
    }
    manifest
}
