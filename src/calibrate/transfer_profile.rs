//! `calibrate --transfer-profile BASE --transfer-to GPU`: a whole profile (laws, its measured
//! table, its AIConfigurator tables) moved to another GPU by physics. The laws need nothing (they
//! price on the scenario's GPU); the profile records the measured GPU's figures and link in
//! `[transfer]`, and `cost::transfer` moves every measured price when it is used. The result is
//! marked transferred in every report.

use super::aiconfigurator::relative_to;
use super::output::write_profile;
use crate::cost::transfer::TransferSection;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::{catalog, GpuSpec, SystemSpec};
use std::path::{Path, PathBuf};

/// What `calibrate --transfer-profile` is asked.
#[derive(Debug, Clone)]
pub struct TransferRequest {
    /// The measured profile (name or path).
    pub base: String,
    /// The system the base was measured on (its GPU and link).
    pub from_system: String,
    /// The target GPU (a file stem in data/systems/gpus).
    pub to_gpu: String,
    pub out: PathBuf,
    /// [default: the output folder's name]
    pub name: Option<String>,
}

/// Writes the transferred profile atomically to `req.out` and reads it back.
pub fn transfer_profile(req: &TransferRequest) -> Result<CalibrationProfile> {
    let base = CalibrationProfile::from_file(&catalog::resolve_profile(&req.base)?)?;
    let system = SystemSpec::from_file(
        &catalog::resolve_system(&req.from_system)?,
        &catalog::gpus_dir(),
    )?;
    if system.gpu.name != base.profile.gpu {
        return Err(Error::Usage {
            flag: "--system".into(),
            problem: format!(
                "names the machine profile '{}' was measured on, a system of GPU '{}'; '{}' has '{}'",
                base.profile.name, base.profile.gpu, system.name, system.gpu.name
            ),
        });
    }
    if base.transfer.is_some() {
        return Err(Error::Usage {
            flag: "--transfer-profile".into(),
            problem: format!(
                "'{}' is itself transferred: transfer the measured profile it came from",
                base.profile.name
            ),
        });
    }
    let target = GpuSpec::from_file(&catalog::gpus_dir().join(format!("{}.toml", req.to_gpu)))?;
    let out_dir = req
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(out_dir).map_err(|e| Error::Write {
        path: out_dir.to_path_buf(),
        source: e,
    })?;
    let mut p = moved(&base, &system, &target, req)?;
    if let Some(m) = &base.measurements {
        let base_dir = base.path.parent().unwrap_or(Path::new("."));
        p.measurements = Some(relative_to(&base_dir.join(m), out_dir));
    }
    let header = format!(
        "# Written by `{}`.\n# {}\n",
        p.profile.method, p.profile.provenance
    );
    write_profile(&req.out, &header, &p)?;
    CalibrationProfile::from_file(&req.out)
}

/// The link the measured machine's collectives ran over, GB/s per direction: NVLink, else the
/// slowest P2P path (as `cost::link::system_link` reads a system).
fn measured_link_gbps(system: &SystemSpec) -> f64 {
    let ic = &system.interconnect;
    match ic.kind {
        crate::scenario::system::LinkKind::Nvlink => ic.nvlink_gbps,
        crate::scenario::system::LinkKind::Pcie
            if ic.sockets > 1 && ic.p2p_gbps_cross_socket > 0.0 =>
        {
            ic.p2p_gbps_cross_socket
        }
        crate::scenario::system::LinkKind::Pcie => ic.p2p_gbps_same_socket,
    }
}

fn moved(
    base: &CalibrationProfile,
    system: &SystemSpec,
    target: &GpuSpec,
    req: &TransferRequest,
) -> Result<CalibrationProfile> {
    let from = &system.gpu;
    let link = measured_link_gbps(system);
    let mut p = base.clone();
    p.profile.name = super::output::profile_name(req.name.as_deref(), &req.out, "transferred");
    p.profile.gpu = target.name.clone();
    p.profile.method = format!(
        "decodesim calibrate --transfer-profile {} --transfer-to {} --system {} --name {}",
        req.base, req.to_gpu, req.from_system, p.profile.name
    );
    p.profile.description = format!(
        "{}: profile '{}' ({}) moved by physics; NOT measured on this GPU",
        target.display_name, base.profile.name, from.display_name
    );
    p.profile.provenance = format!(
        "transferred from '{}' ({} measurements): measured table prices keep their family's fixed cost and scale the rest by the op's roofline ({} -> {} GB/s DRAM, {} -> {} BF16 TFLOPS); collectives' bytes term by the link ({link} -> the system's GB/s); laws as fitted (fractions of each GPU's own peak). From: {}",
        base.profile.name,
        from.name,
        from.memory_bandwidth_gbps,
        target.memory_bandwidth_gbps,
        from.bf16_tflops,
        target.bf16_tflops,
        crate::units::clip(&base.profile.provenance, 300)
    );
    p.transfer = Some(TransferSection {
        from_gpu: from.name.clone(),
        compute_capability: from.compute_capability.clone(),
        memory_bandwidth_gbps: from.memory_bandwidth_gbps,
        bf16_tflops: from.bf16_tflops,
        fp8_tflops: from.fp8_tflops,
        link_gbps: link,
        source: format!(
            "data/systems/gpus/{}.toml and system '{}' (its GPU link), the machine profile '{}' was measured on",
            from.name, system.name, base.profile.name
        ),
    });
    Ok(p)
}
