//! The kernel price sources after AIConfigurator's tables: the profile's measured table where
//! it holds the op's shape (log-log interpolated, `cost::table`), else the roofline law
//! (`cost::kernel`), each with its split (`Pricing::split_us`) and its range notes.

use crate::category::Category;
use crate::cost::{aic, kernel, law_price, Pricer};
use crate::error::{Error, Result};
use crate::workload::{CostFamily, Op};

impl Pricer<'_> {
    /// The measured table's price of this op's shape, if the table holds it, and its split
    /// (`Pricing::split_us`): attention's price at the table's smallest context, a routed-expert
    /// GEMM's DRAM roofline of its bytes (the weight read).
    pub(super) fn table_price(&mut self, op: &Op, next: Option<&Op>) -> Option<(f64, f64)> {
        let (table, mk) = (self.p.table.as_ref()?, op.measure.as_ref()?);
        // MLA decode is measured at one query token: a verify pass reads at its layout's rows.
        let read = (op.family == CostFamily::AttentionMlaDecode).then(|| {
            let rows = crate::scenario::mla_backend::lookup_rows(
                self.s.mla_backend.verify,
                mk.m,
                mk.batch,
                mk.n,
            );
            crate::workload::op::MeasureKey {
                m: rows.round().max(1.0) as u64,
                ..*mk
            }
        });
        let mk = read.as_ref().unwrap_or(mk);
        let tp = table.price(mk)?;
        let mut us = tp.us;
        if mk.includes_next {
            // The measurement covers this kernel and the next: leave the next its law.
            if let Some(next) = next {
                if let Some(k) = self.kernels.get(next.family) {
                    us = (us - kernel::kernel_us(next, k, &self.s.system.gpu)).max(0.5 * us);
                }
            }
        }
        if tp.extrapolated {
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "{}: shape outside the measured table {} (m = {}, context = {}); extrapolated",
                    mk.family,
                    table.path.display(),
                    mk.m,
                    mk.context
                )
            );
        }
        self.from_table += 1;
        // A family's time anchored to a measured step (`table_scales`) scales price and split.
        let f = self.p.table_scale(op.family.key());
        let split = f * if op.category == Category::Attention {
            match table.min_context(mk) {
                None => us,
                Some(c) => table
                    .price(&crate::workload::op::MeasureKey { context: c, ..*mk })
                    .map_or(0.0, |lo| us * (lo.us / tp.us.max(1e-12)).min(1.0)),
            }
        } else if aic::is_moe_gemm(op.family) {
            (op.bytes / (self.s.system.gpu.memory_bandwidth_gbps * 1e3)).min(us)
        } else {
            0.0
        };
        Some((f * us, split))
    }

    /// The roofline law's price and its split (`Pricing::split_us`): attention's fixed cost (all
    /// of the KV write, which does not grow with the context), a routed-expert GEMM's memory
    /// term (the weight read at the law's achieved bandwidth).
    pub(crate) fn by_law(&mut self, op: &Op) -> Result<(f64, f64)> {
        let key = op.family;
        let k = self.kernels.get(key).ok_or_else(|| {
            Error::field(
                &self.p.path,
                format!("kernels.{key}"),
                format!("missing: op '{}' needs this kernel family", op.name),
            )
        })?;
        note!(
            self.quiet,
            self.families,
            (key.to_string(), k.source.clone())
        );
        // An elementwise op's M is its element count (`Builder::elementwise`), while the
        // calibration's M is rows: the two do not compare, and its bytes (checked below) are
        // what the law prices.
        let m_in_rows = key != CostFamily::Elementwise;
        if let (Some([lo, hi]), true) = (k.measured_m, m_in_rows) {
            let m = op.shape.m as f64;
            if m < lo || m > hi {
                note!(
                    self.quiet,
                    self.warnings,
                    format!("{key}: M = {m} is outside the measured range {lo}..{hi}")
                );
            }
        }
        if let Some([lo, hi]) = k.measured_bytes {
            if op.bytes < lo * 0.5 || op.bytes > hi * 2.0 {
                note!(
                    self.quiet,
                    self.warnings,
                    format!(
                        "{key}: {} is outside the measured range {}..{}",
                        crate::units::bytes(op.bytes),
                        crate::units::bytes(lo),
                        crate::units::bytes(hi)
                    )
                );
            }
        }
        Ok(law_price(op, k, &self.s.system.gpu))
    }
}
