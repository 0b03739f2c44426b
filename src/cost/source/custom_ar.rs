//! vLLM's custom all-reduce as a price source: which all-reduce `--allreduce` picks for a
//! scenario (vLLM's dispatch, resolved once per prepared pricer), and one call's price from
//! AIConfigurator's table where the collection machine ran the kernel, else the profile's law.

use crate::cost::choice::{CollectiveAlgo, CollectiveChoice};
use crate::cost::profile::CustomAllreduce;
use crate::cost::{aic, allreduce, CalibrationProfile, Pricer};
use crate::error::{Error, Result};
use crate::scenario::deployment::AllreduceImpl;
use crate::scenario::{CommPath, Scenario};
use crate::workload::{CostFamily, Op};
use std::collections::BTreeSet;

impl Pricer<'_> {
    /// An all-reduce of the TP group where `--allreduce` runs vLLM's custom kernel; None for
    /// any other op, or where vLLM hands this call to NCCL.
    pub(super) fn custom_ar_call(&mut self, op: &Op) -> Option<CollectiveChoice> {
        if op.family != CostFamily::AllReduce || !self.custom_ar || op.group != 0 {
            return None;
        }
        let c = self.custom_allreduce(op)?;
        Some(self.table_scaled(c))
    }

    /// vLLM's custom all-reduce for one call: the AIConfigurator table where the collection
    /// machine ran the custom kernel at this world size, else the profile's law; None when
    /// vLLM would hand this call to NCCL (size or alignment rule).
    fn custom_allreduce(&mut self, op: &Op) -> Option<CollectiveChoice> {
        let (n, bytes, p) = (self.s.layout.tp, op.message_bytes, self.p);
        let law = if self.custom_pcie {
            p.custom_allreduce_pcie.as_ref()?
        } else {
            p.custom_allreduce.as_ref()?
        };
        // With symmetric memory on, vLLM caps max_size per capability and world size
        // (`scenario::allreduce_rules`); the patched PCIe build keeps its own cutoff.
        let cap = (!self.custom_pcie)
            .then(|| self.s.allreduce_rules.custom_cap(n))
            .flatten();
        let max = cap.map_or(law.max_size_bytes, |c| c.bytes.min(law.max_size_bytes));
        if let Err(why) = allreduce::custom_ar_call(bytes, max) {
            let next = allreduce::next_path(&why, cap, self.s.allreduce_rules.symm_mem);
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "custom all-reduce: vLLM hands all_reduce of {} to {next} ({why})",
                    crate::units::bytes(bytes as f64)
                )
            );
            return None;
        }
        // Rows at or above the measured machine's own cap timed another path (a transferred
        // profile's GPU may allow larger messages): the law prices those sizes.
        let measured_max = match &p.measured_rules {
            Some(r) => r.custom_cap(n).map_or(max, |c| c.bytes.min(max)),
            None => max,
        };
        if bytes < measured_max {
            if let Some(c) = self.custom_ar_from_table(op, measured_max) {
                return Some(c);
            }
        } else {
            note!(self.quiet, self.warnings, format!(
                "custom all-reduce of {}: at or above the cap of the GPU its rows were measured on ({} B at {n} ranks), where they timed another path; priced by the profile's custom all-reduce law",
                crate::units::bytes(bytes as f64),
                measured_max
            ));
        }
        Some(self.custom_ar_by_law(op, law))
    }

    /// The call from AIConfigurator's custom all-reduce rows below `measured_max`, where the
    /// collection machine ran the custom kernel at this world size.
    fn custom_ar_from_table(&mut self, op: &Op, measured_max: u64) -> Option<CollectiveChoice> {
        let (n, bytes, mode) = (self.s.layout.tp, op.message_bytes, self.graph_mode());
        let (t, sec) = self.p.aic.as_ref().zip(self.p.aiconfigurator.as_ref())?;
        // A patched PCIe build never ran on the collection machine: its law prices it.
        if self.custom_pcie || !(sec.nvlink || n == 2) {
            return None;
        }
        let max = measured_max as f64;
        let rows: Vec<(f64, f64)> = t
            .custom_curve(mode, n)?
            .iter()
            .copied()
            .filter(|r| r.0 < max)
            .collect();
        let tp = aic::comm_price(&rows, bytes as f64)?;
        if tp.extrapolated {
            note!(self.quiet, self.warnings, format!(
                "custom all-reduce of {} is outside the measured rows of {} ({mode}, {n} ranks): extrapolated",
                crate::units::bytes(bytes as f64),
                crate::units::path(&t.dir.join("custom_allreduce.csv"))
            ));
        }
        Some(CollectiveChoice {
            op: op.family.key(),
            bytes,
            count: 1,
            path: self.path.name(),
            across_nodes: false,
            algo: CollectiveAlgo::VllmCustom.into(),
            proto: stage(n, bytes).into(),
            time_us: tp.us,
            source: format!(
                "measured: AIConfigurator custom_allreduce.csv ({}), vLLM {mode} mode, {n} ranks ({})",
                crate::units::path(&t.dir),
                sec.system
            ),
            latency_us: aic::comm_latency(&rows).min(tp.us),
        })
    }

    /// The call by the profile's custom all-reduce law (`allreduce::custom_law_us`).
    fn custom_ar_by_law(&mut self, op: &Op, law: &CustomAllreduce) -> CollectiveChoice {
        let (n, bytes, mode) = (self.s.layout.tp, op.message_bytes, self.graph_mode());
        let l = match (mode, &law.eager) {
            ("eager", Some(e)) => e,
            _ => &law.graph,
        };
        if !l.measured_nranks.is_empty() && !l.measured_nranks.contains(&n) {
            note!(
                self.quiet,
                self.warnings,
                format!(
                    "custom all-reduce law: measured at {:?} ranks, extrapolated to {n}",
                    l.measured_nranks
                )
            );
        }
        let (t, lat) = allreduce::custom_law_us(l, n, bytes);
        CollectiveChoice {
            op: op.family.key(),
            bytes,
            count: 1,
            path: self.path.name(),
            across_nodes: false,
            algo: CollectiveAlgo::VllmCustom.into(),
            proto: stage(n, bytes).into(),
            time_us: t,
            source: if self.custom_pcie {
                format!(
                    "hypothetical patched vLLM build (PCIe custom all-reduce): {}",
                    l.source
                )
            } else {
                l.source.clone()
            },
            latency_us: lat,
        }
    }

    /// vLLM's mode of the custom kernel's rows and laws: under CUDA graphs or eager.
    fn graph_mode(&self) -> &'static str {
        if self.s.cuda_graphs {
            "graph"
        } else {
            "eager"
        }
    }
}

/// The custom kernel's variant for `bytes` over `n` ranks, as the report names it.
fn stage(n: u32, bytes: u64) -> &'static str {
    if allreduce::one_stage(n, bytes) {
        "1stage"
    } else {
        "2stage"
    }
}

/// Which all-reduce carries the TP all-reduces (`--allreduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CustomAr {
    /// NCCL for every all-reduce.
    Off,
    /// vLLM's custom kernel, where mainline vLLM runs it.
    Mainline,
    /// A custom kernel over more than two PCIe-only GPUs: a patched build (hypothetical).
    PciePatched,
}

/// The note every report of a patched PCIe custom all-reduce carries.
pub const PCIE_CUSTOM_AR_NOTE: &str = "mainline vLLM disables its custom all-reduce on more than 2 PCIe GPUs; this prices a patched build";

/// Whether vLLM would run its custom all-reduce in this scenario (`--allreduce`): `nccl` never;
/// `custom` where vLLM allows it, an error naming the rule where it refuses, except over more
/// than two PCIe GPUs with P2P, which it prices as a patched build by the profile's
/// `[custom_allreduce_pcie]` law (warning that mainline refuses); `auto` as mainline vLLM's
/// dispatch does (cost::allreduce), with NCCL where the profile cannot price the custom kernel.
pub(crate) fn custom_ar_dispatch(
    s: &Scenario,
    p: &CalibrationProfile,
    quiet: bool,
    warnings: &mut BTreeSet<String>,
) -> Result<CustomAr> {
    if let Some(dispatch) = outside_vllm_rules(s) {
        return dispatch;
    }
    let full_nvlink = s.comm_path() == CommPath::Nvlink;
    let rule = allreduce::custom_ar_enabled(s.layout.tp, full_nvlink);
    match (s.comm.allreduce, rule) {
        (AllreduceImpl::Nccl, _) => Ok(CustomAr::Off),
        (AllreduceImpl::Custom, Err(why @ allreduce::Refusal::PcieOnly(_)))
            if s.comm_path() == CommPath::PcieP2p =>
        {
            let Some(law) = &p.custom_allreduce_pcie else {
                return Err(Error::field(
                    &p.path,
                    "custom_allreduce_pcie",
                    format!(
                        "missing: --allreduce custom on {} at TP={} prices a patched vLLM build ({why}), which needs a PCIe custom all-reduce law in this section (data/calibration/rtx-pro-6000/profile.toml has one fitted to published figures); or use --allreduce nccl or auto",
                        s.system.name, s.layout.tp
                    ),
                ));
            };
            note!(quiet, warnings, format!(
                "--allreduce custom on {} at TP={}: {PCIE_CUSTOM_AR_NOTE} (priced by [custom_allreduce_pcie]: {})",
                s.system.name, s.layout.tp, law.source
            ));
            Ok(CustomAr::PciePatched)
        }
        (AllreduceImpl::Custom, Err(why)) => Err(Error::ScenarioSetting {
            flag: "--allreduce",
            value: "custom".into(),
            problem: format!(
                ": vLLM would not run its custom all-reduce on {} at TP={}: {why}; use --allreduce nccl or auto",
                s.system.name, s.layout.tp
            ),
        }),
        (AllreduceImpl::Custom, Ok(())) if p.custom_allreduce.is_none() => Err(Error::field(
            &p.path,
            "custom_allreduce",
            "missing: --allreduce custom needs the custom all-reduce cost (write one with `decodesim calibrate --from-aiconfigurator`)",
        )),
        (AllreduceImpl::Custom, Ok(())) => Ok(CustomAr::Mainline),
        (AllreduceImpl::Auto, Err(_)) => Ok(CustomAr::Off),
        (AllreduceImpl::Auto, Ok(())) if p.custom_allreduce.is_none() => {
            note!(quiet, warnings, format!(
                "--allreduce auto: vLLM would run its custom all-reduce here, but profile '{}' cannot price it (no [custom_allreduce]); priced as NCCL",
                p.profile.name
            ));
            Ok(CustomAr::Off)
        }
        (AllreduceImpl::Auto, Ok(())) => Ok(CustomAr::Mainline),
    }
}

/// Where vLLM's rules are not asked: the reference runtime, and a TP group across nodes;
/// None elsewhere.
fn outside_vllm_rules(s: &Scenario) -> Option<Result<CustomAr>> {
    if s.runtime == crate::scenario::Runtime::Reference {
        // The project's reference step reduces with torch.distributed, i.e. NCCL.
        return Some(match s.comm.allreduce {
            AllreduceImpl::Custom => Err(Error::ScenarioSetting {
                flag: "--allreduce",
                value: "custom".into(),
                problem: ": the reference runtime reduces with torch.distributed (NCCL), not vLLM's custom kernel; use --runtime vllm".into(),
            }),
            _ => Ok(CustomAr::Off),
        });
    }
    if s.system.spans_nodes(s.layout.tp) {
        // vLLM disables its custom all-reduce when the group spans nodes (custom_all_reduce.py:
        // "Custom allreduce is disabled because this process group spans across nodes").
        return Some(match s.comm.allreduce {
            AllreduceImpl::Custom => Err(Error::Usage {
                flag: "--allreduce custom".into(),
                problem: format!(
                    "vLLM would not run its custom all-reduce on {} at TP={}: the group spans {} nodes (custom_all_reduce.py disables it across nodes); use --allreduce nccl or auto",
                    s.system.name,
                    s.layout.tp,
                    s.system.nodes_spanned(s.layout.tp)
                ),
            }),
            _ => Ok(CustomAr::Off),
        });
    }
    None
}
