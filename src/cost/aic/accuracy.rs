//! How far a price read between the tables' rows may be off: each interior row predicted from
//! its two neighbours on its line, log-log as the lookups interpolate (leave-one-out), the rms
//! of ln(row / prediction) per table family; `whatif::uncertainty` draws it.

use super::{AicTables, MoeShape};
use crate::cost::table::log_lerp;
use std::collections::BTreeMap;

/// The leave-one-out rms log error of log-log interpolation along each line of rows (x, µs):
/// every inner row predicted from its two neighbours.
fn loo(lines: &mut dyn Iterator<Item = Vec<(f64, f64)>>) -> Option<f64> {
    let mut sq = Vec::new();
    for line in lines {
        for w in line.windows(3) {
            let (a, b, c) = (w[0], w[1], w[2]);
            let ok = |p: (f64, f64)| p.0 > 0.0 && p.1 > 0.0;
            if !(ok(a) && ok(b) && ok(c)) || a.0 >= b.0 || b.0 >= c.0 {
                continue;
            }
            let pred = log_lerp(a.0, a.1, c.0, c.1, b.0);
            if pred > 0.0 && pred.is_finite() {
                sq.push((b.1 / pred).ln().powi(2));
            }
        }
    }
    // The lines come in a hash map's order, which changes from run to run: summed in sorted
    // order, the figure (and every interval drawn from it) is the same bit for bit each run.
    sq.sort_by(f64::total_cmp);
    let n = sq.len();
    (n > 0).then(|| (sq.iter().sum::<f64>() / n as f64).sqrt())
}

/// Leave-one-out error of the tables' log-log interpolation, per table family (`moe`, `gemm`,
/// `mla`, `nccl`): each interior row predicted from its two neighbours on its line (log-log
/// between them, as the lookups interpolate), the rms of ln(row / prediction). What a price read
/// between rows may be off by; `whatif::uncertainty` draws it. Families with fewer than one
/// interior row are absent.
impl AicTables {
    /// [`AicTables::interpolation_rms_log_error`]'s MoE figure over the rows of one shape
    /// ([`moe_shape`]); None where the table holds none of them (the law prices those experts).
    pub fn moe_rms_log_error_for(&self, shape: &MoeShape) -> Option<f64> {
        loo(&mut self
            .moe
            .iter()
            .filter(|(k, _)| {
                (k.1.as_str(), k.2, k.3, k.4, k.5) == (shape.0, shape.1, shape.2, shape.3, shape.4)
            })
            .map(|(_, v)| v.clone()))
    }

    pub fn interpolation_rms_log_error(&self) -> BTreeMap<&'static str, f64> {
        let mut out = BTreeMap::new();
        let moe = loo(&mut self.moe.values().cloned());
        let gemm = loo(&mut self.gemm.values().flat_map(|g| g.values().cloned()));
        // MLA rows vary in batch (at each KV length) and in KV length (at each batch).
        let mla = loo(&mut self.mla.values().flat_map(|g| {
            let mut by_step: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
            let mut by_batch: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
            for &(b, st, us) in g {
                by_step.entry(st as u64).or_default().push((b, us));
                by_batch.entry(b as u64).or_default().push((st, us));
            }
            let mut lines: Vec<Vec<(f64, f64)>> = by_step
                .into_values()
                .chain(by_batch.into_values())
                .collect();
            for l in &mut lines {
                l.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            lines
        }));
        let nccl = loo(&mut self.nccl.values().map(|c| c.pts.clone()));
        for (k, v) in [("moe", moe), ("gemm", gemm), ("mla", mla), ("nccl", nccl)] {
            if let Some(v) = v {
                out.insert(k, v);
            }
        }
        out
    }
}
