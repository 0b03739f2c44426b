//! vLLM's MLA decode backend per GPU family and how it lays out a verify pass's query tokens
//! (`data/vllm/mla_backends.toml`). The layout says how often the attention kernel reads a
//! sequence's KV span when the sequence carries k+1 query tokens, which is what a verify pass's
//! attention costs over a plain step (`workload::mla`; measured in `data/calibration/mla-verify`).

use crate::error::{Error, Result};
use crate::files::InputKind;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Tiles above this many query rows are refused (no decode kernel holds more in one program).
const MAX_TILE: u32 = 1024;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryToml {
    #[serde(default)]
    prefix: Option<String>,
    backend: String,
    layout: String,
    #[serde(default)]
    tile: Option<u32>,
    source: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    default: EntryToml,
    #[serde(default)]
    by_compute_capability: Vec<EntryToml>,
}

/// How a verify pass's k+1 query tokens per sequence meet the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyLayout {
    /// One grid row per query token: the span is read once per token.
    Rows,
    /// Tokens folded into the head dimension, `tile` (token, head) rows per program: the span
    /// is read once per tile.
    Folded { tile: u32 },
}

impl VerifyLayout {
    /// Reads of one sequence's KV span by a pass of `queries` tokens per sequence over `heads`
    /// query heads per rank, relative to a plain decode step's (1 at one query token in every
    /// layout): what the pass's attention costs over the plain call, as the plain call at
    /// batch x this factor.
    pub fn read_factor(self, queries: u64, heads: u64) -> f64 {
        let (q, h) = (queries.max(1), heads.max(1));
        match self {
            VerifyLayout::Rows => q as f64,
            VerifyLayout::Folded { tile } => {
                let tiles = |rows: u64| rows.div_ceil(tile as u64) as f64;
                tiles(q * h) / tiles(h)
            }
        }
    }
}

/// The rows at which a table measured at one query token prices an MLA decode call whose
/// measurement key holds `rows` query rows over `seqs` sequences at `heads` heads per rank: the
/// sequences times the layout's KV reads per sequence.
pub fn lookup_rows(layout: VerifyLayout, rows: u64, seqs: u64, heads: u64) -> f64 {
    let seqs = seqs.max(1);
    let q = rows.div_ceil(seqs);
    seqs as f64 * layout.read_factor(q, heads)
}

/// The backend a GPU runs and its verify layout, with where that comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct MlaBackend {
    pub name: String,
    pub verify: VerifyLayout,
    pub source: String,
    pub path: PathBuf,
}

pub fn file() -> PathBuf {
    super::catalog::data_root().join("data/vllm/mla_backends.toml")
}

impl MlaBackend {
    /// The bundled table's entry for a GPU of `compute_capability`.
    pub(crate) fn load(compute_capability: &str) -> Result<Self> {
        Self::from_file(&file(), compute_capability)
    }

    fn from_file(path: &Path, compute_capability: &str) -> Result<Self> {
        let f: FileToml = crate::files::read_toml(path, InputKind::SystemToml)?;
        let mut pick = (&f.default, "default");
        for e in &f.by_compute_capability {
            let Some(prefix) = e.prefix.as_deref() else {
                return Err(Error::field(
                    path,
                    "by_compute_capability.prefix",
                    "missing: expected a compute-capability prefix such as \"9.\"".to_string(),
                ));
            };
            if compute_capability.starts_with(prefix) {
                pick = (e, "by_compute_capability");
            }
        }
        let (e, section) = pick;
        let layout = match (e.layout.as_str(), e.tile) {
            ("rows", None) => VerifyLayout::Rows,
            ("folded", Some(tile)) if (1..=MAX_TILE).contains(&tile) => {
                VerifyLayout::Folded { tile }
            }
            ("folded", t) => {
                return Err(Error::field(
                    path,
                    format!("{section}.tile"),
                    format!(
                        "{}: a folded layout needs a tile of 1 to {MAX_TILE} query rows",
                        t.map_or("missing".to_string(), |t| t.to_string())
                    ),
                ))
            }
            ("rows", Some(_)) => {
                return Err(Error::field(
                    path,
                    format!("{section}.tile"),
                    "a rows layout takes no tile".to_string(),
                ))
            }
            (other, _) => {
                let v: String = other.chars().take(80).collect();
                return Err(Error::field(
                    path,
                    format!("{section}.layout"),
                    format!("'{v}' is not a layout: expected rows or folded"),
                ));
            }
        };
        Ok(MlaBackend {
            name: e.backend.clone(),
            verify: layout,
            source: e.source.clone(),
            path: path.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_backends_per_gpu_family() {
        let rtx = MlaBackend::load("12.0").unwrap();
        assert_eq!(rtx.verify, VerifyLayout::Rows);
        assert_eq!(rtx.name, "TRITON_MLA");
        let h200 = MlaBackend::load("9.0").unwrap();
        assert_eq!(h200.verify, VerifyLayout::Folded { tile: 64 });
        assert_eq!(MlaBackend::load("8.9").unwrap().verify, VerifyLayout::Rows);
    }

    #[test]
    fn reads_per_layout() {
        // A plain step is the unit in every layout.
        assert_eq!(VerifyLayout::Rows.read_factor(1, 8), 1.0);
        assert_eq!(VerifyLayout::Folded { tile: 16 }.read_factor(1, 8), 1.0);
        assert_eq!(VerifyLayout::Rows.read_factor(4, 8), 4.0);
        // 4 tokens x 8 heads in tiles of 16: two reads; 3 x 16 in tiles of 16: three.
        assert_eq!(VerifyLayout::Folded { tile: 16 }.read_factor(4, 8), 2.0);
        assert_eq!(VerifyLayout::Folded { tile: 16 }.read_factor(3, 16), 3.0);
        assert_eq!(VerifyLayout::Folded { tile: 64 }.read_factor(4, 8), 1.0);
        // 128 heads in tiles of 64 are read twice already at one token: 3 x 128 reads 6 times.
        assert_eq!(VerifyLayout::Folded { tile: 64 }.read_factor(3, 128), 3.0);
        assert_eq!(VerifyLayout::Folded { tile: 64 }.read_factor(3, 40), 2.0);
    }

    #[test]
    fn bad_layouts_are_refused_by_field() {
        let dir = std::env::temp_dir().join(format!("mla-backend-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("b.toml");
        std::fs::write(
            &p,
            "[default]\nbackend = \"X\"\nlayout = \"folded\"\nsource = \"s\"\n",
        )
        .unwrap();
        let e = MlaBackend::from_file(&p, "9.0").unwrap_err().to_string();
        assert!(
            e.contains("default.tile") && e.contains("needs a tile"),
            "{e}"
        );
        std::fs::write(
            &p,
            "[default]\nbackend = \"X\"\nlayout = \"diagonal\"\nsource = \"s\"\n",
        )
        .unwrap();
        let e = MlaBackend::from_file(&p, "9.0").unwrap_err().to_string();
        assert!(
            e.contains("default.layout") && e.contains("'diagonal'"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
