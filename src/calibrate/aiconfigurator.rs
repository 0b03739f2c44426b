//! `calibrate --from-aiconfigurator DIR`: a profile that prices from AIConfigurator's measured
//! tables (converted by harness/aiconfigurator_tables.py; a converter rather than a Parquet
//! reader keeps the Rust build light). The profile references the folder; `cost::aic` reads it
//! at load time and prices, with interpolation, the routed-expert MoE call, BF16 GEMMs, the MLA
//! decode kernel and NCCL collectives; vLLM's custom all-reduce gets a law fitted to the table
//! rows where the custom kernel ran. Everything else (norms, elementwise, router top-k,
//! sampling, launch, variability, collectives the tables do not hold) comes from a base profile.

use super::output::write_profile;
use super::regression::weighted_least_squares;
use crate::cost::aic::AicTables;
use crate::cost::allreduce::stage_bytes;
use crate::cost::profile::{AicSection, CustomAllreduce, CustomArLaw, NcclDefaults};
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::files::InputKind;
use crate::scenario::system::LinkKind;
use crate::scenario::{catalog, CommPath, ModelSpec, SystemSpec};
use std::path::{Component, Path, PathBuf};

/// vLLM's default `max_size` of its custom all-reduce (docs/sources.md §3.3: 8 MiB).
const CUSTOM_AR_MAX_SIZE: u64 = 8 << 20;

/// What `calibrate --from-aiconfigurator` is asked.
#[derive(Debug, Clone)]
pub struct AicRequest {
    /// The converted AIConfigurator folder (moe.csv, gemm.csv, ...).
    pub dir: PathBuf,
    /// The decodesim system the tables describe (its GPU and link).
    pub system: String,
    /// Profile supplying what the tables do not hold [default: the system's own].
    pub base: Option<String>,
    pub out: PathBuf,
    /// [default: the output folder's name]
    pub name: Option<String>,
}

/// The written profile and what it took from where.
#[derive(Debug, Clone)]
pub struct AicResult {
    pub profile: CalibrationProfile,
    /// (table file, rows, what it prices)
    pub(crate) tables: Vec<(String, usize, String)>,
    pub(crate) notes: Vec<String>,
}

/// Reads the tables, builds the profile and writes it atomically to `req.out`.
pub fn from_aiconfigurator(req: &AicRequest) -> Result<AicResult> {
    let tables = AicTables::read(&req.dir)?;
    let system =
        SystemSpec::from_file(&catalog::resolve_system(&req.system)?, &catalog::gpus_dir())?;
    let base_name = req
        .base
        .clone()
        .unwrap_or_else(|| system.default_calibration.clone());
    let base = CalibrationProfile::from_file(&catalog::resolve_profile(&base_name)?)?;
    let manifest_path = req.dir.join("MANIFEST.txt");
    let manifest = if manifest_path.is_file() {
        crate::files::read_text(&manifest_path, InputKind::Manifest)?
    } else {
        String::new()
    };
    // The tables' folder is named after the system AIConfigurator measured.
    let aic_system = req
        .dir
        .canonicalize()
        .unwrap_or(req.dir.clone())
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("unknown")
        .to_string();
    check_device(&manifest, &manifest_path, &system)?;
    let nvlink = system.interconnect.kind == LinkKind::Nvlink;
    let mut notes = Vec::new();
    let mla_dims = mla_dims(&manifest, &tables, &mut notes)?;
    let out_dir = out_folder(&req.out)?;
    let origin = TableOrigin {
        rel: relative_to(&req.dir, out_dir),
        source: manifest_source(&manifest),
        // `created` is set when the profile is written; the tables' date goes in the
        // provenance.
        collected: collection_date(&manifest)
            .map(|d| format!("; tables collected {d}"))
            .unwrap_or_default(),
        system: aic_system,
    };

    let mut p = base.clone();
    p.aic = None;
    // The base's own measurement table stays referenced from wherever this profile goes.
    if let Some(m) = &base.measurements {
        let base_dir = base.path.parent().unwrap_or(Path::new("."));
        p.measurements = Some(relative_to(&base_dir.join(m), out_dir));
    }
    p.aiconfigurator = Some(section(&origin, nvlink, mla_dims));
    p.custom_allreduce = custom_allreduce(&tables, nvlink, &origin.system, &mut notes)
        .or(base.custom_allreduce.clone());
    if !nvlink {
        p.nccl = Some(pcie_nccl_defaults());
    }
    let priced = priced_families(&tables);
    let command = describe(&mut p, req, &system, &base, &origin, &priced);
    let header = format!(
        "# Written by `{command}`.\n# {}\n# {}\n",
        p.profile.method, p.profile.provenance
    );
    write_profile(&req.out, &header, &p)?;
    // Read back as any user would: the references must resolve from where the profile is.
    let p = CalibrationProfile::from_file(&req.out)?;
    Ok(AicResult {
        profile: p,
        tables: priced,
        notes,
    })
}

/// Where the tables came from, as the profile names them.
struct TableOrigin {
    /// The system AIConfigurator measured (the tables' folder's name).
    system: String,
    /// The tables' folder from the profile's.
    rel: String,
    /// The package's version and the tables' line of the MANIFEST.
    source: String,
    /// "; tables collected DATE" where the MANIFEST dates them.
    collected: String,
}

/// The profile's name (`--name`, else its folder's), GPU, description, method, provenance and
/// fit record; returns the command that rebuilds it.
fn describe(
    p: &mut CalibrationProfile,
    req: &AicRequest,
    system: &SystemSpec,
    base: &CalibrationProfile,
    origin: &TableOrigin,
    priced: &[(String, usize, String)],
) -> String {
    let TableOrigin {
        system: aic_system,
        rel,
        source,
        collected,
    } = origin;
    p.profile.name = super::output::profile_name(req.name.as_deref(), &req.out, "aiconfigurator");
    p.profile.gpu = system.gpu.name.clone();
    p.profile.description = format!(
        "{}: measured AIConfigurator tables ({aic_system}) where they apply, the rest from '{}'",
        system.gpu.display_name, base.profile.name
    );
    // The whole command, so the profile can be rebuilt from its own header.
    let command = format!(
        "decodesim calibrate --from-aiconfigurator {} --system {} --fallback {} --name {}",
        req.dir.display(),
        req.system,
        base.profile.name,
        p.profile.name
    );
    p.profile.method = format!(
        "{command} (tables referenced as '{rel}', read and interpolated at load time: cost::aic). Source: {source}"
    );
    p.profile.provenance = format!(
        "measured (AIConfigurator {aic_system}): {}; from '{}' ({}): the rest{collected}",
        priced
            .iter()
            .map(|t| format!("{} ({} rows, {})", t.0, t.1, t.2))
            .collect::<Vec<_>>()
            .join("; "),
        base.profile.name,
        crate::units::clip(&base.profile.provenance, 400)
    );
    p.fit.insert(
        "aiconfigurator".into(),
        toml::Value::String(format!("tables {rel}: {source}")),
    );
    command
}

/// Where the tables came from, as the MANIFEST states it: the package's version and the
/// tables' line.
fn manifest_source(manifest: &str) -> String {
    let version =
        manifest_line(manifest, "package").unwrap_or("version not stated (no MANIFEST.txt)");
    let backend = manifest_line(manifest, "tables").unwrap_or("");
    format!("{version}; {backend}")
        .trim_end_matches("; ")
        .to_string()
}

/// The folder the profile `out` is written into, created.
fn out_folder(out: &Path) -> Result<&Path> {
    let out_dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(out_dir).map_err(|e| Error::Write {
        path: out_dir.to_path_buf(),
        source: e,
    })?;
    Ok(out_dir)
}

/// The profile's `[aiconfigurator]` section: the tables where `origin` says, with the link the
/// system's collectives take.
fn section(origin: &TableOrigin, nvlink: bool, mla_dims: Option<[u64; 6]>) -> AicSection {
    AicSection {
        tables: origin.rel.clone(),
        system: origin.system.clone(),
        source: origin.source.clone(),
        nccl_path: if nvlink {
            CommPath::Nvlink
        } else {
            CommPath::PcieP2p
        },
        nvlink,
        mla_dims,
        scales: Default::default(),
        only: None,
    }
}

/// The tables must describe the system's GPU: the MANIFEST names the device they were measured
/// on (`device 'NVIDIA H200'`), which the system's GPU display name must start with.
fn check_device(manifest: &str, path: &Path, system: &SystemSpec) -> Result<()> {
    let re = regex::Regex::new(r"device '([^']{1,120})'").expect("valid regex");
    let Some(c) = re.captures(manifest) else {
        return Ok(());
    };
    let device = &c[1];
    if system.gpu.display_name.starts_with(device) {
        return Ok(());
    }
    Err(Error::field(
        path,
        "device",
        format!(
            "the tables were measured on '{device}' but system '{}' has '{}': pass --system with a system of that GPU (decodesim list)",
            system.name, system.gpu.display_name
        ),
    ))
}

/// What each table present prices.
fn priced_families(t: &AicTables) -> Vec<(String, usize, String)> {
    let what = |f: &str| match f {
        "moe.csv" => "the routed-expert call: moe_align, expert GEMMs, activation, moe_sum",
        "gemm.csv" => "BF16 GEMMs",
        "mla_generation.csv" => "MLA decode attention (the module's growth with the KV length)",
        "nccl_collectives.csv" => "NCCL all_reduce and all_gather on the measured path",
        "custom_allreduce.csv" => "vLLM custom all-reduce (graph and eager)",
        _ => "",
    };
    t.files
        .iter()
        .map(|(f, n)| (f.clone(), *n, what(f).to_string()))
        .collect()
}

/// The line of the MANIFEST that starts (after spaces) with `key`, without the key.
fn manifest_line<'a>(manifest: &'a str, key: &str) -> Option<&'a str> {
    manifest
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(char::is_whitespace))
        .map(|l| l[key.len()..].trim())
}

fn collection_date(manifest: &str) -> Option<String> {
    let re = regex::Regex::new(r"collected (20\d\d-[01]\d-[0-3]\d)").expect("valid regex");
    re.captures(manifest).map(|c| c[1].to_string())
}

/// The MLA dimensions the module rows were measured with: the MANIFEST names the model
/// (AIConfigurator measures the module of `deepseek-ai/DeepSeek-V3`), whose config.json is
/// bundled as `deepseek-v3`.
fn mla_dims(manifest: &str, t: &AicTables, notes: &mut Vec<String>) -> Result<Option<[u64; 6]>> {
    if !t.has("mla_generation.csv") {
        return Ok(None);
    }
    if !manifest.contains("deepseek-ai/DeepSeek-V3") {
        notes.push(
            "mla_generation.csv: the MANIFEST does not name the model the module was measured with (expected deepseek-ai/DeepSeek-V3): MLA attention stays with the law".into(),
        );
        return Ok(None);
    }
    let m = ModelSpec::from_file(&catalog::resolve_model("deepseek-v3")?)?;
    let Some(mla) = m.mla else {
        return Err(Error::Invariant(
            "bundled model deepseek-v3 has no MLA dimensions",
        ));
    };
    Ok(Some([
        m.hidden as u64,
        mla.q_lora_rank.unwrap_or(0) as u64,
        mla.kv_lora_rank as u64,
        mla.qk_nope_head_dim as u64,
        mla.qk_rope_head_dim as u64,
        mla.v_head_dim as u64,
    ]))
}

/// NCCL's defaults on a PCIe-only node, against which the knobs are priced.
fn pcie_nccl_defaults() -> NcclDefaults {
    let mut d = super::nccl_tests::channels::nccl_defaults(crate::scenario::system::LinkKind::Pcie);
    d.default_nchannels = 2;
    d.source = format!("{}; 2 channels: ASSUMPTION, not in the tables: NCCL's ring search on a PCIe-only node builds few channels, and docs/sources.md §2.1 reports 22.2 GB/s bus bandwidth with defaults against 37.6-41.1 GB/s with NCCL_MIN_NCHANNELS=8; set it from your NCCL log ('Channel 00/0N')", d.source);
    d
}

/// Fits vLLM's custom all-reduce law to the table rows where the custom kernel ran: every
/// supported world size on a fully NVLink-connected machine, else 2 GPUs only (docs/sources.md §3.3;
/// other rows are NCCL's fallback), and sizes below max_size.
fn custom_allreduce(
    t: &AicTables,
    nvlink: bool,
    system: &str,
    notes: &mut Vec<String>,
) -> Option<CustomAllreduce> {
    if !t.has("custom_allreduce.csv") {
        return None;
    }
    let graph = custom_ar_law(t, nvlink, system, notes, "graph")?;
    let eager = custom_ar_law(t, nvlink, system, notes, "eager");
    Some(CustomAllreduce {
        graph,
        eager,
        max_size_bytes: CUSTOM_AR_MAX_SIZE,
        source: "vLLM custom all-reduce: one stage at 2 GPUs (every rank reads its peer's buffer), two stages beyond vLLM's size thresholds on NVLink; max_size 8 MiB (docs/sources.md §3.3)".into(),
    })
}

/// The custom all-reduce law of one vLLM mode (`graph` or `eager`), fitted to the rows where
/// the custom kernel ran; None, with a note, when the fit is unphysical.
fn custom_ar_law(
    t: &AicTables,
    nvlink: bool,
    system: &str,
    notes: &mut Vec<String>,
    mode: &str,
) -> Option<CustomArLaw> {
    let mut rows = Vec::new();
    let mut ranks = Vec::new();
    for n in [2u32, 4, 6, 8, 16] {
        if !(nvlink || n == 2) {
            continue;
        }
        let Some(c) = t.custom_curve(mode, n) else {
            continue;
        };
        ranks.push(n);
        for &(b, us) in c.iter().filter(|r| r.0 < CUSTOM_AR_MAX_SIZE as f64) {
            rows.push((n, b, us));
        }
    }
    let multi = ranks.len() > 1;
    let x: Vec<Vec<f64>> = rows
        .iter()
        .map(|&(n, b, _)| {
            let sb = stage_bytes(n, b as u64) / 1e3;
            if multi {
                vec![1.0, (n - 1) as f64, sb]
            } else {
                vec![1.0, sb]
            }
        })
        .collect();
    let y: Vec<f64> = rows.iter().map(|r| r.2).collect();
    // Relative errors: small messages (a few µs) count as much as large ones.
    let w: Vec<f64> = y.iter().map(|v| 1.0 / (v * v)).collect();
    let f = weighted_least_squares(&x, &y, &w)?;
    let (base, per_rank, inv_bw) = if multi {
        (f.coef[0], f.coef[1], f.coef[2])
    } else {
        (f.coef[0], 0.0, f.coef[1])
    };
    if !(base >= 0.0 && per_rank >= 0.0 && inv_bw > 0.0) {
        notes.push(format!(
            "custom_allreduce.csv {mode}: the law fit is unphysical (base {base:.2} µs, per rank {per_rank:.2} µs, 1/bw {inv_bw:.3e}); not written"
        ));
        return None;
    }
    let lo = rows.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let hi = rows.iter().map(|r| r.1).fold(0.0, f64::max);
    let pred_err: Vec<f64> = rows
        .iter()
        .zip(&x)
        .map(|(r, xi)| {
            let p: f64 = xi.iter().zip(&f.coef).map(|(a, b)| a * b).sum();
            (p / r.2 - 1.0).abs()
        })
        .collect();
    let mut e = pred_err.clone();
    e.sort_by(f64::total_cmp);
    let median = e.get(e.len() / 2).copied().unwrap_or(0.0);
    Some(CustomArLaw {
        base_us: base,
        per_rank_us: per_rank,
        bw_gbps: 1.0 / inv_bw,
        measured_nranks: ranks.clone(),
        measured_bytes: Some([lo, hi]),
        source: format!(
            "fitted: AIConfigurator custom_allreduce.csv ({system}), vLLM {mode} mode, {} rows below max_size at {ranks:?} ranks (where vLLM ran its custom kernel), median |rel err| {:.1}%{}",
            rows.len(),
            median * 100.0,
            if multi { "" } else { "; one world size cannot separate the per-rank latency (0)" }
        ),
    })
}

/// `to` relative to the folder `from` ("../aiconfigurator/x"), so a profile and the tables it
/// references move together. Always relative, never absolute (a profile written with an
/// absolute path breaks on every other machine and checkout): when the two share only the root,
/// the path climbs to it. Folders not created yet are resolved through their nearest existing
/// ancestor.
pub(crate) fn relative_to(to: &Path, from: &Path) -> String {
    let (to, from) = (absolute(to), absolute(from));
    let a: Vec<Component> = to.components().collect();
    let b: Vec<Component> = from.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut rel = PathBuf::new();
    for _ in common..b.len() {
        rel.push("..");
    }
    for c in &a[common..] {
        rel.push(c.as_os_str());
    }
    if rel.as_os_str().is_empty() {
        ".".into()
    } else {
        rel.display().to_string()
    }
}

/// `p` made absolute and canonical as far as it exists (symbolic links and `..` resolved), the
/// part that does not exist yet appended as written.
fn absolute(p: &Path) -> PathBuf {
    let p = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    let p = std::path::absolute(p).unwrap_or(p.to_path_buf());
    let mut rest = Vec::new();
    let mut cur = p.as_path();
    loop {
        if let Ok(c) = cur.canonicalize() {
            let mut out = c;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return p.clone(),
        }
    }
}

/// The profile with its AIConfigurator folder referenced from where it is about to be written
/// (`out`): every writer (anchoring, throughput fits) keeps the tables reachable.
pub(crate) fn rebase_tables(p: &CalibrationProfile, out: &Path) -> CalibrationProfile {
    let mut p = p.clone();
    if let (Some(t), Some(sec)) = (&p.aic, p.aiconfigurator.as_mut()) {
        let out_dir = out
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sec.tables = relative_to(&t.dir, out_dir);
    }
    p
}
