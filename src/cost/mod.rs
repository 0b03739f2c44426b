//! Prices every op of a workload from a calibration profile. Every parameter comes from the
//! profile file; this module holds the laws, not the numbers.

pub mod collective;
pub mod kernel;
pub mod profile;
pub mod table;

pub use profile::CalibrationProfile;

use crate::error::{Error, Result};
use crate::spec::{CommPath, Proto, Scenario};
use crate::workload::{Op, Workload};
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

/// Prices every op: collectives by the NCCL law of the cheapest eligible profile entry, kernels
/// from the measurement table where it holds the shape, else by the roofline law.
pub fn price(w: &Workload, s: &Scenario, p: &CalibrationProfile) -> Result<Pricing> {
    let mut pr = Pricer::new(s, p);
    let mut base_us = Vec::with_capacity(w.ops.len());
    for (i, op) in w.ops.iter().enumerate() {
        let us = if op.family.is_sync() {
            0.0
        } else if op.family.is_collective() {
            pr.collective(op)?
        } else if let Some(us) = pr.from_table(op, w.ops.get(i + 1)) {
            us
        } else {
            pr.by_law(op)?
        };
        base_us.push(us);
    }
    Ok(pr.finish(base_us))
}

/// What pricing one workload accumulates besides the durations.
struct Pricer<'a> {
    s: &'a Scenario,
    p: &'a CalibrationProfile,
    path: CommPath,
    /// The protocol actually eligible on this path (LL128 falls back off NVLink).
    proto: Proto,
    warnings: BTreeSet<String>,
    families: BTreeSet<(String, String)>,
    collectives: Vec<CollectiveChoice>,
    from_table: usize,
}

impl<'a> Pricer<'a> {
    fn new(s: &'a Scenario, p: &'a CalibrationProfile) -> Self {
        let gpu = &s.system.gpu;
        let path = s.comm_path();
        let mut warnings = BTreeSet::new();
        if p.profile.gpu != gpu.name {
            warnings.insert(format!(
                "calibration profile '{}' describes GPU '{}' but the system has '{}': kernel efficiencies are transferred",
                p.profile.name, p.profile.gpu, gpu.name
            ));
        }
        for mark in p.poor_fit_marks() {
            warnings.insert(format!(
                "calibration profile '{}' was written despite a poor fit (--allow-poor-fit): {mark}",
                p.profile.name
            ));
        }
        let mut proto = s.nccl.proto;
        if proto == Proto::Ll128 && path != CommPath::Nvlink {
            warnings.insert(format!(
                "NCCL_PROTO=LL128 is not eligible on the {} path (NCCL enables LL128 only over NVLink); priced as NCCL's fallback",
                path.name()
            ));
            proto = Proto::Auto;
        }
        Pricer {
            s,
            p,
            path,
            proto,
            warnings,
            families: BTreeSet::new(),
            collectives: Vec::new(),
            from_table: 0,
        }
    }

    fn collective(&mut self, op: &Op) -> Result<f64> {
        let (p, n, path) = (self.p, self.s.tp, self.path);
        let cands = collective::candidates(
            &p.collectives,
            op.family,
            path,
            self.s.nccl.algo,
            self.proto,
        );
        let Some((c, t)) = collective::choose(&cands, op.family, n, op.message_bytes) else {
            return Err(Error::field(
                &p.path,
                "collectives",
                format!(
                    "no entry for {} on path '{}' with algo '{}' and proto '{}' (entries present: {})",
                    op.family,
                    path,
                    self.s.nccl.algo,
                    self.proto,
                    p.collectives
                        .iter()
                        .map(|c| format!("{}/{}/{}/{}", c.op, c.path, c.algo, c.proto))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        if !c.measured_nranks.is_empty() && !c.measured_nranks.contains(&n) {
            self.warnings.insert(format!(
                "collective {}/{}/{}: measured at {:?} ranks, extrapolated to {n}",
                c.path, c.algo, c.proto, c.measured_nranks
            ));
        }
        if let Some([lo, hi]) = c.measured_bytes {
            let b = op.message_bytes as f64;
            if b < lo || b > hi {
                self.warnings.insert(format!(
                    "{} of {} bytes is outside the measured range {lo:.0}..{hi:.0} bytes of {}/{}/{}",
                    op.family, op.message_bytes, c.path, c.algo, c.proto
                ));
            }
        }
        match self
            .collectives
            .iter_mut()
            .find(|x| x.op == op.family.key() && x.bytes == op.message_bytes)
        {
            Some(x) => x.count += 1,
            None => self.collectives.push(CollectiveChoice {
                op: op.family.key(),
                bytes: op.message_bytes,
                count: 1,
                path: path.name(),
                algo: c.algo.name().to_ascii_lowercase(),
                proto: c.proto.name().to_string(),
                time_us: t,
                source: c.source.clone(),
            }),
        }
        Ok(t)
    }

    /// The measured table's price of this op's shape, if the table holds it.
    fn from_table(&mut self, op: &Op, next: Option<&Op>) -> Option<f64> {
        let (table, mk) = (self.p.table.as_ref()?, op.measure.as_ref()?);
        let tp = table.price(mk)?;
        let mut us = tp.us;
        if mk.includes_next {
            // The measurement covers this kernel and the next: leave the next its law.
            if let Some(next) = next {
                if let Some(k) = self.p.kernel(next.family) {
                    us = (us - kernel::kernel_us(next, k, &self.s.system.gpu)).max(0.5 * us);
                }
            }
        }
        if tp.extrapolated {
            self.warnings.insert(format!(
                "{}: shape outside the measured table {} (m = {}, context = {}); extrapolated",
                mk.family,
                table.path.display(),
                mk.m,
                mk.context
            ));
        }
        self.from_table += 1;
        Some(us)
    }

    fn by_law(&mut self, op: &Op) -> Result<f64> {
        let key = op.family;
        let k = self.p.kernel(key).ok_or_else(|| {
            Error::field(
                &self.p.path,
                format!("kernels.{key}"),
                format!("missing: op '{}' needs this kernel family", op.name),
            )
        })?;
        self.families.insert((key.to_string(), k.source.clone()));
        if let Some([lo, hi]) = k.measured_m {
            let m = op.shape.m as f64;
            if m < lo || m > hi {
                self.warnings.insert(format!(
                    "{key}: M = {m} is outside the measured range {lo}..{hi}"
                ));
            }
        }
        if let Some([lo, hi]) = k.measured_bytes {
            if op.bytes < lo * 0.5 || op.bytes > hi * 2.0 {
                self.warnings.insert(format!(
                    "{key}: {:.3e} bytes is outside the measured range {lo:.3e}..{hi:.3e}",
                    op.bytes
                ));
            }
        }
        Ok(kernel::kernel_us(op, k, &self.s.system.gpu))
    }

    fn finish(mut self, base_us: Vec<f64>) -> Pricing {
        if let Some(t) = &self.p.table {
            self.families.insert((
                "measured table".to_string(),
                format!(
                    "{} ops interpolated from {} ({} points)",
                    self.from_table,
                    t.path.display(),
                    t.len()
                ),
            ));
        }
        Pricing {
            base_us,
            collectives: self.collectives,
            families: self.families.into_iter().collect(),
            warnings: self.warnings.into_iter().collect(),
        }
    }
}
