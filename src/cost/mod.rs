//! Prices every op of a workload from a calibration profile. Every parameter comes from the
//! profile file; this module holds the laws, not the numbers.

pub mod collective;
pub mod kernel;
pub mod profile;
pub mod table;

pub use profile::CalibrationProfile;

use crate::error::{Error, Result};
use crate::spec::{Proto, Scenario};
use crate::workload::Workload;
use serde::Serialize;
use std::collections::BTreeSet;

/// Which collective configuration was picked for a message size, and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveChoice {
    pub op: &'static str,
    pub bytes: u64,
    pub count: u32,
    pub path: &'static str,
    pub algo: String,
    pub proto: String,
    /// Transfer time once every rank has arrived (no waiting), µs.
    pub time_us: f64,
    pub source: String,
}

/// Base durations of a workload's ops (before jitter and waiting), plus what the report must
/// say about them.
#[derive(Debug, Clone)]
pub struct Pricing {
    pub base_us: Vec<f64>,
    pub collectives: Vec<CollectiveChoice>,
    /// Cost-model families that priced at least one op, with their provenance.
    pub families: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

pub fn price(w: &Workload, s: &Scenario, p: &CalibrationProfile) -> Result<Pricing> {
    let gpu = &s.system.gpu;
    let n = s.tp;
    let path = s.comm_path();
    let mut warnings = BTreeSet::new();
    if p.profile.gpu != gpu.name {
        warnings.insert(format!(
            "calibration profile '{}' describes GPU '{}' but the system has '{}': kernel efficiencies are transferred",
            p.profile.name, p.profile.gpu, gpu.name
        ));
    }
    let mut proto = s.nccl.proto;
    if proto == Proto::Ll128 && path != crate::spec::CommPath::Nvlink {
        warnings.insert(format!(
            "NCCL_PROTO=LL128 is not eligible on the {} path (NCCL enables LL128 only over NVLink); priced as NCCL's fallback",
            path.name()
        ));
        proto = Proto::Auto;
    }
    let mut base_us = Vec::with_capacity(w.ops.len());
    let mut families = BTreeSet::new();
    let mut collectives: Vec<CollectiveChoice> = Vec::new();
    let mut from_table = 0usize;
    for (i, op) in w.ops.iter().enumerate() {
        if op.family.is_sync() {
            base_us.push(0.0);
            continue;
        }
        if op.family.is_collective() {
            let cands = collective::candidates(&p.collectives, op.family, path, s.nccl.algo, proto);
            let Some((c, t)) = collective::choose(&cands, op.family, n, op.message_bytes) else {
                return Err(Error::field(
                    &p.path,
                    "collectives",
                    format!(
                        "no entry for {} on path '{}' with algo '{}' and proto '{}' (entries present: {})",
                        op.family.key(),
                        path.name(),
                        s.nccl.algo,
                        proto,
                        p.collectives
                            .iter()
                            .map(|c| format!("{}/{}/{}/{}", c.op, c.path, c.algo, c.proto))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            };
            if !c.measured_nranks.is_empty() && !c.measured_nranks.contains(&n) {
                warnings.insert(format!(
                    "collective {}/{}/{}: measured at {:?} ranks, extrapolated to {n}",
                    c.path, c.algo, c.proto, c.measured_nranks
                ));
            }
            if let Some([lo, hi]) = c.measured_bytes {
                let b = op.message_bytes as f64;
                if b < lo || b > hi {
                    warnings.insert(format!(
                        "{} of {} bytes is outside the measured range {lo:.0}..{hi:.0} bytes of {}/{}/{}",
                        op.family.key(), op.message_bytes, c.path, c.algo, c.proto
                    ));
                }
            }
            match collectives
                .iter_mut()
                .find(|x| x.op == op.family.key() && x.bytes == op.message_bytes)
            {
                Some(x) => x.count += 1,
                None => collectives.push(CollectiveChoice {
                    op: op.family.key(),
                    bytes: op.message_bytes,
                    count: 1,
                    path: path.name(),
                    algo: c.algo.clone(),
                    proto: c.proto.clone(),
                    time_us: t,
                    source: c.source.clone(),
                }),
            }
            base_us.push(t);
            continue;
        }
        if let (Some(table), Some(mk)) = (&p.table, &op.measure) {
            if let Some(tp) = table.price(mk) {
                let mut us = tp.us;
                if mk.includes_next {
                    // The measurement covers this kernel and the next: leave the next its law.
                    if let Some(next) = w.ops.get(i + 1) {
                        if let Some(k) = p.kernel(next.family.key()) {
                            us = (us - kernel::kernel_us(next, k, gpu)).max(0.5 * us);
                        }
                    }
                }
                if tp.extrapolated {
                    warnings.insert(format!(
                        "{}: shape outside the measured table {} (m = {}, context = {}); extrapolated",
                        mk.family,
                        table.path.display(),
                        mk.m,
                        mk.context
                    ));
                }
                from_table += 1;
                base_us.push(us);
                continue;
            }
        }
        let key = op.family.key();
        let k = p.kernel(key).ok_or_else(|| {
            Error::field(
                &p.path,
                format!("kernels.{key}"),
                format!("missing: op '{}' needs this kernel family", op.name),
            )
        })?;
        families.insert((key.to_string(), k.source.clone()));
        if let Some([lo, hi]) = k.measured_m {
            let m = op.shape.m as f64;
            if m < lo || m > hi {
                warnings.insert(format!(
                    "{key}: M = {m} is outside the measured range {lo}..{hi}"
                ));
            }
        }
        if let Some([lo, hi]) = k.measured_bytes {
            if op.bytes < lo * 0.5 || op.bytes > hi * 2.0 {
                warnings.insert(format!(
                    "{key}: {:.3e} bytes is outside the measured range {lo:.3e}..{hi:.3e}",
                    op.bytes
                ));
            }
        }
        base_us.push(kernel::kernel_us(op, k, gpu));
    }
    if let Some(t) = &p.table {
        families.insert((
            "measured table".to_string(),
            format!(
                "{from_table} ops interpolated from {} ({} points)",
                t.path.display(),
                t.len()
            ),
        ));
    }
    Ok(Pricing {
        base_us,
        collectives,
        families: families.into_iter().collect(),
        warnings: warnings.into_iter().collect(),
    })
}
