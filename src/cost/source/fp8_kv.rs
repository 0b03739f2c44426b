//! An FP8 KV cache over prices that came from BF16 data (the measured table, the roofline law
//! fitted on BF16 runs): MLA at the BF16 price times the FP8/BF16 ratio measured on the GPU it
//! was measured on (`cost::kv_dtype`), other attention at the BF16 price.

use crate::cost::{kv_dtype, Pricer};
use crate::error::Result;
use crate::workload::{CostFamily, OpRole, Workload};

impl Pricer<'_> {
    /// Attention over an FP8 KV cache where the price came from BF16 data (a measured table, a
    /// law whose efficiencies were fitted on BF16 runs): the BF16 price times the measured
    /// FP8/BF16 ratio for MLA (`kv_dtype`), BF16 as the nearest measured dtype for the rest.
    /// MLA calls the AIConfigurator tables priced carry the ratio already (`aic`).
    pub(super) fn fp8_kv_attention(
        &mut self,
        w: &Workload,
        aic_us: &[Option<f64>],
        by_law: &[usize],
        base_us: &mut [f64],
        split_us: &mut [f64],
    ) -> Result<()> {
        let s = self.s;
        for (i, op) in w.ops.iter().enumerate() {
            let mla = op.family == CostFamily::AttentionMlaDecode;
            if !(mla || op.family == CostFamily::AttentionGqaDecode)
                || aic_us.get(i).copied().flatten().is_some()
            {
                continue;
            }
            if by_law.contains(&i) {
                // The law read the FP8 cache's bytes: price the BF16 cache's instead.
                let q_out = match op.family {
                    CostFamily::AttentionMlaDecode => {
                        (op.shape.m * op.shape.batch * (op.shape.k + op.shape.n)) as f64 * 2.0
                    }
                    _ => 2.0 * (op.shape.m * op.shape.batch * op.shape.n) as f64 * 2.0,
                };
                let mut bf16 = op.clone();
                bf16.bytes = q_out + (op.bytes - q_out).max(0.0) * 2.0 / s.kv_bytes;
                (base_us[i], split_us[i]) = self.by_law(&bf16)?;
            }
            if !mla {
                note!(self.quiet, self.warnings, format!(
                    "{}: no FP8 KV measurement for this attention kind; priced as a BF16 cache (the nearest measured dtype)",
                    op.family
                ));
                continue;
            }
            let t = kv_dtype::KvDtypeRatios::bundled()?;
            let mk = op.measure.as_ref();
            let ctx = mk.map_or(s.context, |m| m.context) as f64;
            let r = t.fp8_over_bf16(op.shape.batch, s.rank_batch() as f64, ctx);
            if !t.applies_to(&s.system.gpu.compute_capability) {
                // The BF16 price stands: a ratio of the H200's kernels is not this GPU's.
                note!(
                    self.quiet,
                    self.warnings,
                    kv_dtype::unmeasured_note(&s.system.gpu.name, r.value)
                );
                continue;
            }
            base_us[i] *= r.value;
            split_us[i] *= r.value;
            if w.ops
                .get(i + 1)
                .is_some_and(|n| n.role == OpRole::AttentionReduce)
            {
                base_us[i + 1] *= r.value;
                split_us[i + 1] *= r.value;
            }
            self.note_fp8_ratio(r, t);
        }
        Ok(())
    }

    fn note_fp8_ratio(&mut self, r: kv_dtype::Ratio, t: &kv_dtype::KvDtypeRatios) {
        note!(
            self.quiet,
            self.families,
            (
                "attention_mla_decode (FP8 KV)".into(),
                format!("the BF16 price times the {}", t.source()),
            )
        );
        note!(self.quiet, self.warnings, format!(
            "attention_mla_decode with an FP8 KV cache: priced as BF16 x the FP8/BF16 ratio measured on an H200 (x{:.2} here), transferred to {}{}",
            r.value,
            self.s.system.gpu.name,
            if r.extrapolated { "; outside the measured batch, KV length or head count: held at the nearest" } else { "" }
        ));
    }
}
