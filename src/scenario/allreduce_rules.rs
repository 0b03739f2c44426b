//! vLLM's all-reduce rules that depend on the GPU (`data/vllm/allreduce.toml`): whether torch
//! symmetric memory is on, the custom all-reduce's size cap it implies, and whether vLLM can
//! fuse the all-reduce with the RMSNorm that follows it (`--fuse-allreduce-rms`), resolved for
//! one GPU and TP size when a scenario is loaded.

use crate::error::{Error, Result};
use crate::files::InputKind;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SizeToml {
    capability: String,
    world_size: u32,
    bytes: u64,
    source: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FusionToml {
    capabilities: Vec<String>,
    source: String,
    #[serde(default)]
    max_size: Vec<SizeToml>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    source: String,
    symm_mem_capabilities: Vec<String>,
    #[serde(default)]
    custom_max_size: Vec<SizeToml>,
    fusion: FusionToml,
}

/// A size limit with where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeCap {
    pub bytes: u64,
    pub source: String,
}

/// The rules for one GPU (compute capability); the size caps per world size.
#[derive(Debug, Clone, PartialEq)]
pub struct AllreduceRules {
    /// Torch symmetric memory is on (it takes what the custom all-reduce refuses by size).
    pub symm_mem: bool,
    /// `CUSTOM_ALL_REDUCE_MAX_SIZES` for this capability, by world size (empty where symmetric
    /// memory is off).
    custom_caps: Vec<(u32, SizeCap)>,
    /// vLLM can fuse the all-reduce with the RMSNorm here.
    pub fusion_supported: bool,
    /// Largest message the fusion takes, by world size (none listed: every size).
    fusion_caps: Vec<(u32, SizeCap)>,
    pub fusion_source: String,
    pub source: String,
    pub path: PathBuf,
}

pub fn file() -> PathBuf {
    super::catalog::data_root().join("data/vllm/allreduce.toml")
}

fn caps_for(list: &[SizeToml], capability: &str) -> Vec<(u32, SizeCap)> {
    list.iter()
        .filter(|e| e.capability == capability)
        .map(|e| {
            let cap = SizeCap {
                bytes: e.bytes,
                source: e.source.clone(),
            };
            (e.world_size, cap)
        })
        .collect()
}

fn cap_at(list: &[(u32, SizeCap)], world: u32) -> Option<&SizeCap> {
    list.iter().find(|(w, _)| *w == world).map(|(_, c)| c)
}

impl AllreduceRules {
    /// The bundled rules for a GPU of `compute_capability`.
    pub(crate) fn load(compute_capability: &str) -> Result<Self> {
        Self::from_file(&file(), compute_capability)
    }

    /// `CUSTOM_ALL_REDUCE_MAX_SIZES` at `world` ranks (None: the profile's `max_size` stands).
    pub fn custom_cap(&self, world: u32) -> Option<&SizeCap> {
        cap_at(&self.custom_caps, world)
    }

    /// The largest message the fusion takes at `world` ranks (None: every size).
    pub fn fusion_cap(&self, world: u32) -> Option<&SizeCap> {
        cap_at(&self.fusion_caps, world)
    }

    fn from_file(path: &Path, compute_capability: &str) -> Result<Self> {
        let f: FileToml = crate::files::read_toml(path, InputKind::SystemToml)?;
        let sizes = f
            .custom_max_size
            .iter()
            .map(|e| ("custom_max_size", e))
            .chain(f.fusion.max_size.iter().map(|e| ("fusion.max_size", e)));
        for (field, e) in sizes {
            if e.bytes == 0 || e.bytes > 1 << 40 || e.world_size == 0 {
                return Err(Error::field(
                    path,
                    field,
                    format!(
                        "capability {} world_size {} bytes {}: expected a world size of at least 1 and 1 to 2^40 bytes",
                        e.capability, e.world_size, e.bytes
                    ),
                ));
            }
        }
        let has = |list: &[String]| list.iter().any(|c| c == compute_capability);
        let symm_mem = has(&f.symm_mem_capabilities);
        Ok(AllreduceRules {
            symm_mem,
            // The cap applies only with symmetric memory on (docs/sources.md §3.3).
            custom_caps: if symm_mem {
                caps_for(&f.custom_max_size, compute_capability)
            } else {
                Vec::new()
            },
            fusion_supported: has(&f.fusion.capabilities),
            fusion_caps: caps_for(&f.fusion.max_size, compute_capability),
            fusion_source: f.fusion.source,
            source: f.source,
            path: path.to_path_buf(),
        })
    }
}

/// `--fuse-allreduce-rms on` where vLLM can fuse: a GPU whose capability has FlashInfer's
/// fusion tables, TP above 1 inside one NVLink node, vLLM's runtime, TP experts (the all-reduce
/// the pass fuses is the TP group's; data-parallel and all-to-all layouts are not modelled).
pub(crate) fn check_fusion(s: &super::Scenario) -> Result<()> {
    if !s.comm.fuse_allreduce_rms {
        return Ok(());
    }
    let refuse = |problem: String| {
        Err(Error::ScenarioSetting {
            flag: "--fuse-allreduce-rms",
            value: "on".into(),
            problem,
        })
    };
    let (gpu, r) = (&s.system.gpu, &s.allreduce_rules);
    if !r.fusion_supported {
        return refuse(format!(
            ": vLLM cannot fuse the all-reduce with RMSNorm on {} (compute capability {}): FlashInfer's fusion has size tables only for capabilities 9.0, 10.0, 10.3 and 10.7 ({}); use --fuse-allreduce-rms off",
            gpu.display_name,
            gpu.compute_capability,
            crate::units::path(&r.path)
        ));
    }
    if s.runtime != super::Runtime::Vllm {
        return refuse(": the fusion is a vLLM compile pass; the reference runtime reduces with torch.distributed (use --runtime vllm)".into());
    }
    if s.layout.tp < 2 {
        return refuse(format!(
            " at --tp {}: there is no tensor-parallel all-reduce to fuse (expected --tp 2 or more)",
            s.layout.tp
        ));
    }
    if s.system.spans_nodes(s.layout.tp) || s.comm_path() != super::CommPath::Nvlink {
        return refuse(format!(
            ": decodesim models FlashInfer's fused all-reduce inside one node over NVLink (its kernels need the GPUs' shared NVSwitch memory); --tp {} on {} runs over {}",
            s.layout.tp,
            s.system.name,
            if s.system.spans_nodes(s.layout.tp) { "several nodes".to_string() } else { s.comm_path().name().to_string() }
        ));
    }
    if s.layout.dp_size() > 1 || s.comm.ep_comm.is_all_to_all() || s.layout.pp_size() > 1 {
        return refuse(": fused all-reduces are modelled for tensor parallelism alone (expected --dp 1, --pp 1 and --ep-comm allreduce)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_rules_per_gpu() {
        let h200 = AllreduceRules::load("9.0").unwrap();
        assert!(h200.symm_mem && h200.fusion_supported);
        assert_eq!(h200.custom_cap(8).unwrap().bytes, 256 << 10);
        assert_eq!(h200.fusion_cap(8).unwrap().bytes, 256 << 10);
        // At 2 GPUs the sources state no cap: the profile's max_size stands.
        assert_eq!(h200.custom_cap(2), None);
        let b200 = AllreduceRules::load("10.0").unwrap();
        assert_eq!(b200.custom_cap(8).unwrap().bytes, 1 << 20);
        let rtx = AllreduceRules::load("12.0").unwrap();
        assert!(!rtx.symm_mem && !rtx.fusion_supported && rtx.custom_cap(8).is_none());
    }

    #[test]
    fn a_zero_size_is_refused_by_field() {
        let dir = std::env::temp_dir().join(format!("ar-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.toml");
        std::fs::write(
            &p,
            "source = \"s\"\nsymm_mem_capabilities = [\"9.0\"]\n[[custom_max_size]]\ncapability = \"9.0\"\nworld_size = 8\nbytes = 0\nsource = \"s\"\n[fusion]\ncapabilities = []\nsource = \"s\"\n",
        )
        .unwrap();
        let e = AllreduceRules::from_file(&p, "9.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("custom_max_size") && e.contains("a.toml"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
