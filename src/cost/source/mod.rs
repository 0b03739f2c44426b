//! Where an op's price comes from, and what acts on every price after: the two ordered lists
//! pricing walks. A new source is one variant of [`PriceSource`], its place in
//! `PriceSource::ORDER` and its function (one file here, or the module of its law); a new
//! correction of priced ops is one variant of [`Adjustment`] likewise.

mod custom_ar;
mod deepep;
mod fp8_kv;
mod internode;
mod kernels;

pub use custom_ar::PCIE_CUSTOM_AR_NOTE;
pub(crate) use custom_ar::{custom_ar_dispatch, CustomAr};

use super::choice::CollectiveChoice;
use super::{aic, link, physics, profile, transfer, Pricer, Pricing};
use crate::error::{Error, Result};
use crate::workload::{Op, Workload};

/// A source of an op's base price. They are tried in `PriceSource::ORDER` and the first that
/// prices an op prices it, so a source that takes some ops of a kind comes before the one that
/// takes every op of it (DeepEP's kernels before NCCL's, a measured table before the law).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PriceSource {
    /// An event fork, join or wait: no time of its own.
    Sync,
    /// A collective whose group spans nodes (`source::internode`).
    Internode,
    /// vLLM's custom all-reduce, where `--allreduce` runs it (`source::custom_ar`).
    CustomAllreduce,
    /// DeepEP's low-latency all-to-all inside a node (`source::deepep`).
    DeepepInsideNode,
    /// NCCL inside a node, from AIConfigurator's table or the profile's laws
    /// (`cost::nccl_price`): every collective the sources above left.
    Nccl,
    /// AIConfigurator's tables (`cost::aic`), resolved for the whole step before its first op.
    AiConfigurator,
    /// The profile's measured table (`source::kernels`).
    MeasuredTable,
    /// The roofline law (`source::kernels`): every kernel the sources above left.
    Law,
}

impl PriceSource {
    pub(crate) const ORDER: [PriceSource; 8] = [
        PriceSource::Sync,
        PriceSource::Internode,
        PriceSource::CustomAllreduce,
        PriceSource::DeepepInsideNode,
        PriceSource::Nccl,
        PriceSource::AiConfigurator,
        PriceSource::MeasuredTable,
        PriceSource::Law,
    ];
}

/// What a source priced: a collective (recorded for the report, its norm added under
/// `--fuse-allreduce-rms`) or a kernel's time and split (`Pricing::split_us`).
enum Priced {
    Collective(CollectiveChoice),
    Kernel(f64, f64),
}

/// What acts on every price once the sources priced the step, in `Adjustment::ORDER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Adjustment {
    /// Attention priced from BF16 data moved to an FP8 KV cache (`source::fp8_kv`).
    Fp8KvCache,
    /// Prices measured on another GPU moved to this one (`cost::transfer`), before anything
    /// that corrects or replaces this machine's behaviour.
    Transfer,
    /// The profile's factors (`profile::apply_factors`): they correct the machine's measured
    /// behaviour, so they come before a hypothetical link.
    Factors,
    /// A hypothetical link (`cost::link`): it replaces the link under the corrected machine.
    Link,
    /// Nothing beats its roofline, whatever priced it (`cost::physics`): last.
    PhysicsFloor,
}

impl Adjustment {
    pub(crate) const ORDER: [Adjustment; 5] = [
        Adjustment::Fp8KvCache,
        Adjustment::Transfer,
        Adjustment::Factors,
        Adjustment::Link,
        Adjustment::PhysicsFloor,
    ];
}

impl Pricer<'_> {
    /// Op `i` of `ops` priced by the first source of `PriceSource::ORDER` that prices it: its
    /// time and split. `aic`: AIConfigurator's prices of the step; `by_law`: the ops the law
    /// priced, which this appends to.
    pub(super) fn base_price(
        &mut self,
        ops: &[Op],
        i: usize,
        aic: &aic::Overrides,
        by_law: &mut Vec<usize>,
    ) -> Result<(f64, f64)> {
        let op = &ops[i];
        let from_aic = aic
            .us
            .get(i)
            .copied()
            .flatten()
            .map(|us| (us, aic.split[i]));
        for source in PriceSource::ORDER {
            let Some(priced) = self.price_from(source, op, ops.get(i + 1), from_aic)? else {
                continue;
            };
            if source == PriceSource::Law {
                by_law.push(i);
            }
            return match priced {
                Priced::Collective(c) => self.collective(op, c),
                Priced::Kernel(us, split) => Ok((us, split)),
            };
        }
        Err(Error::ScenarioPart {
            part: format!("op '{}'", op.name),
            problem: "no price source takes it".into(),
        })
    }

    /// `source`'s price of `op` (`next`: the op after it), None where it does not price it.
    fn price_from(
        &mut self,
        source: PriceSource,
        op: &Op,
        next: Option<&Op>,
        from_aic: Option<(f64, f64)>,
    ) -> Result<Option<Priced>> {
        let collective = op.family.is_collective();
        let kernel = |(us, split)| Priced::Kernel(us, split);
        Ok(match source {
            PriceSource::Sync => op.family.is_sync().then_some(Priced::Kernel(0.0, 0.0)),
            PriceSource::Internode if collective => self.internode(op)?.map(Priced::Collective),
            PriceSource::CustomAllreduce => self.custom_ar_call(op).map(Priced::Collective),
            PriceSource::DeepepInsideNode => self.deepep_inside_node(op).map(Priced::Collective),
            PriceSource::Nccl if collective => Some(Priced::Collective(self.nccl(op)?)),
            PriceSource::Internode | PriceSource::Nccl => None,
            PriceSource::AiConfigurator => from_aic.map(kernel),
            PriceSource::MeasuredTable => self.table_price(op, next).map(kernel),
            PriceSource::Law => Some(kernel(self.by_law(op)?)),
        })
    }

    /// Applies `step` to the step's prices `out` (`aic`, `by_law`: as the sources left them);
    /// returns the line the report gets where the physical floor raised a price.
    pub(super) fn adjust(
        &mut self,
        step: Adjustment,
        w: &Workload,
        aic: &aic::Overrides,
        by_law: &[usize],
        out: &mut Pricing,
    ) -> Result<Option<String>> {
        let (s, p) = (self.s, self.p);
        match step {
            Adjustment::Fp8KvCache => {
                if s.kv_bytes != 2.0 {
                    let (base_us, split_us) = (&mut out.base_us, &mut out.split_us);
                    self.fp8_kv_attention(w, &aic.us, by_law, base_us, split_us)?;
                }
            }
            Adjustment::Transfer => {
                if let Some(t) = &p.transfer {
                    transfer::apply(t, w, s, p, by_law, out);
                }
            }
            Adjustment::Factors => profile::apply_factors(&p.factors, w, out),
            Adjustment::Link => link::apply(w, s, out),
            Adjustment::PhysicsFloor => {
                let raised = physics::apply(w, s, out);
                if !self.quiet {
                    return Ok(raised.note());
                }
            }
        }
        Ok(None)
    }
}
