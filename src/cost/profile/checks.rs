//! Every number of a profile held against physics, each error naming the file, the field
//! and the value: latencies within a second, efficiencies in (0, 1], bandwidths within the
//! GPU's, ranges ordered, one collective entry per configuration.

use super::{
    CalibrationProfile, CollectiveParams, CustomAllreduce, KernelParams, MAX_US, TIME_SCALE,
};
use crate::cost::deepep::DeepEpLl;
use crate::error::{Error, Result};
use crate::scenario::{Algo, Proto};
use crate::workload::CostFamily;
use std::path::Path;

/// Checks of one profile's numbers, each error naming the file, the field and the value.
pub(super) struct Checker<'a> {
    pub(super) path: &'a Path,
}

impl Checker<'_> {
    pub(super) fn fail(&self, field: &str, v: impl std::fmt::Display, allowed: &str) -> Error {
        // A number as typed (`1e308`, not 309 digits), anything else clipped.
        let v = v.to_string();
        let v = match v.parse::<f64>() {
            Ok(x) if v.len() > 24 => crate::scenario::check::show(x),
            _ => crate::units::clip(&v, 80),
        };
        Error::field(self.path, field, format!("found {v}, expected {allowed}"))
    }

    /// A latency or fixed cost: finite, 0 ≤ v ≤ 1 s.
    pub(super) fn latency(&self, field: &str, v: f64) -> Result<()> {
        if v.is_finite() && (0.0..=MAX_US).contains(&v) {
            Ok(())
        } else {
            Err(self.fail(field, v, "a time in [0, 1e6] µs"))
        }
    }

    /// A fraction of a peak: 0.001 ≤ v ≤ 1 (nothing runs faster than the hardware's peak, and a
    /// kernel 1,000x below it is a unit mistake: `scenario::limits::EFFICIENCY`).
    fn efficiency(&self, field: &str, v: f64) -> Result<()> {
        let r = crate::scenario::limits::EFFICIENCY;
        if r.contains(v) {
            Ok(())
        } else {
            Err(self.fail(
                field,
                crate::scenario::check::show(v),
                &format!(
                    "a fraction of the GPU's peak in [{}, {}] (above 1 would beat the hardware)",
                    r.min, r.max
                ),
            ))
        }
    }

    fn range(&self, field: &str, r: Option<[f64; 2]>) -> Result<()> {
        match r {
            Some([lo, hi]) if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi) => {
                Err(self.fail(
                    field,
                    format!("[{lo}, {hi}]"),
                    "[low, high] with 0 <= low <= high",
                ))
            }
            _ => Ok(()),
        }
    }

    /// A law's bandwidth: at least the slowest GPU link's floor, at most the GPU's memory
    /// bandwidth (`bw`, when the profile names a GPU of the catalog), which bounds any transfer.
    fn link_bandwidth(&self, field: &str, v: f64, bw: Option<f64>) -> Result<()> {
        let max = bw.unwrap_or(crate::scenario::limits::LINK_GBPS.max);
        let min = crate::scenario::limits::BUS_BW_FLOOR_GBPS;
        if v.is_finite() && v >= min && v <= max {
            return Ok(());
        }
        Err(self.fail(
            field,
            crate::scenario::check::show(v),
            &format!("a bandwidth in [{min}, {max}] GB/s (the slowest GPU link; the GPU's memory bandwidth bounds any transfer)"),
        ))
    }

    /// A custom all-reduce law: latencies in [0, 1 s], bandwidths positive and within the GPU's
    /// memory bandwidth, `max_size` in [1, 2^40] bytes.
    fn custom_allreduce(&self, name: &str, ca: &CustomAllreduce, bw: Option<f64>) -> Result<()> {
        let laws = [("graph", Some(&ca.graph)), ("eager", ca.eager.as_ref())];
        for (mode, law) in laws {
            let Some(l) = law else { continue };
            let f = |s: &str| format!("{name}.{mode}.{s}");
            self.latency(&f("base_us"), l.base_us)?;
            self.latency(&f("per_rank_us"), l.per_rank_us)?;
            self.link_bandwidth(&f("bw_gbps"), l.bw_gbps, bw)?;
            self.range(&f("measured_bytes"), l.measured_bytes)?;
        }
        if ca.max_size_bytes == 0 || ca.max_size_bytes > 1 << 40 {
            return Err(self.fail(
                &format!("{name}.max_size_bytes"),
                ca.max_size_bytes,
                "bytes in [1, 2^40]",
            ));
        }
        Ok(())
    }

    /// DeepEP's laws: latencies in [0, 1 s], bandwidths positive and within the GPU's memory
    /// bandwidth, the measured ranks and payloads sane.
    fn deepep_ll(&self, d: &DeepEpLl, bw: Option<f64>) -> Result<()> {
        for (phase, l) in [("dispatch", &d.dispatch), ("combine", &d.combine)] {
            let f = |s: &str| format!("deepep_ll.{phase}.{s}");
            self.latency(&f("latency_us"), l.latency_us)?;
            self.link_bandwidth(&f("bw_gbps"), l.bw_gbps, bw)?;
            if l.measured_ranks.is_empty() || l.measured_ranks.contains(&0) {
                return Err(self.fail(
                    &f("measured_ranks"),
                    format!("{:?}", l.measured_ranks),
                    "the group sizes measured, each at least 1",
                ));
            }
            self.range(&f("measured_bytes"), Some(l.measured_bytes))?;
            if !(l.median_rel_err.is_finite() && l.median_rel_err >= 0.0) {
                return Err(self.fail(&f("median_rel_err"), l.median_rel_err, "a fraction ≥ 0"));
            }
        }
        Ok(())
    }

    fn kernel(&self, family: CostFamily, k: &KernelParams) -> Result<()> {
        let f = |s: &str| format!("kernels.{family}.{s}");
        if family.is_collective() || family.is_sync() {
            return Err(self.fail(
                &format!("kernels.{family}"),
                format!("'{family}'"),
                &format!(
                    "a kernel family: one of {}",
                    CostFamily::kernel_keys().join(", ")
                ),
            ));
        }
        self.latency(&f("fixed_us"), k.fixed_us)?;
        self.efficiency(&f("mem_efficiency"), k.mem_efficiency)?;
        self.efficiency(&f("compute_efficiency"), k.compute_efficiency)?;
        if !(k.m_half.is_finite() && (0.0..=1e9).contains(&k.m_half)) {
            return Err(self.fail(&f("m_half"), k.m_half, "a token count in [0, 1e9]"));
        }
        self.range(&f("measured_m"), k.measured_m)?;
        self.range(&f("measured_bytes"), k.measured_bytes)
    }

    /// `bw_limit`: the GPU's memory bandwidth, which no collective's bus bandwidth can exceed.
    fn collective(&self, i: usize, c: &CollectiveParams, bw_limit: Option<f64>) -> Result<()> {
        let f = |s: &str| format!("collectives[{i}].{s}");
        if c.algo == Algo::Auto {
            return Err(self.fail(&f("algo"), "'auto'", "the algorithm measured: ring or tree"));
        }
        if c.proto == Proto::Auto {
            return Err(self.fail(
                &f("proto"),
                "'auto'",
                "the protocol measured: LL, LL128 or Simple",
            ));
        }
        self.latency(&f("base_us"), c.base_us)?;
        self.latency(&f("hop_us"), c.hop_us)?;
        let max = bw_limit.unwrap_or(crate::scenario::limits::LINK_GBPS.max);
        let min = crate::scenario::limits::BUS_BW_FLOOR_GBPS;
        if !(c.bus_bw_gbps.is_finite() && c.bus_bw_gbps >= min && c.bus_bw_gbps <= max) {
            return Err(self.fail(
                &f("bus_bw_gbps"),
                crate::scenario::check::show(c.bus_bw_gbps),
                &match bw_limit {
                    Some(m) => format!(
                        "a bandwidth in [{min}, {m}] GB/s (the slowest GPU link; the GPU's memory bandwidth bounds any transfer)"
                    ),
                    None => format!(
                        "a bandwidth in [{min}, {max}] GB/s (scenario::limits::LINK_GBPS)"
                    ),
                },
            ));
        }
        if c.measured_nranks.contains(&0) {
            return Err(self.fail(&f("measured_nranks"), "0", "rank counts of at least 1"));
        }
        self.range(&f("measured_bytes"), c.measured_bytes)
    }
}

impl CalibrationProfile {
    /// Checks every number against physics: finite, latencies in [0, 1 s], efficiencies in
    /// (0, 1], bus bandwidths positive and within the named GPU's memory bandwidth, ranges ordered,
    /// coefficients of variation small enough that jittered durations stay positive.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let c = Checker { path };
        for (family, k) in &self.kernels {
            c.kernel(*family, k)?;
        }
        if self.collectives.is_empty() {
            return Err(Error::field(
                path,
                "collectives",
                "expected at least one entry",
            ));
        }
        let bw = self.gpu_bandwidth()?;
        for (i, e) in self.collectives.iter().enumerate() {
            c.collective(i, e, bw)?;
            // Two entries for one (op, path, algo, proto): the lookup would take the first and
            // silently ignore the other.
            if let Some(j) = self.collectives[..i]
                .iter()
                .position(|d| (d.op, d.path, d.algo, d.proto) == (e.op, e.path, e.algo, e.proto))
            {
                return Err(c.fail(
                    &format!("collectives[{i}]"),
                    format!(
                        "a second entry for {}/{}/{}/{} (the first is collectives[{j}])",
                        e.op.name(),
                        e.path,
                        e.algo.name(),
                        e.proto.name()
                    ),
                    "one entry per (op, path, algo, proto)",
                ));
            }
        }
        self.factors.check(&c)?;
        let l = &self.launch;
        let v = &self.variability;
        for (field, x) in [
            ("launch.graph_launch_us", l.graph_launch_us),
            ("launch.graph_kernel_gap_us", l.graph_kernel_gap_us),
            ("launch.eager_launch_us", l.eager_launch_us),
            ("launch.eager_kernel_gap_us", l.eager_kernel_gap_us),
            (
                "launch.graph_first_collective_us",
                l.graph_first_collective_us,
            ),
            ("variability.launch_skew_us", v.launch_skew_us),
        ] {
            c.latency(field, x)?;
        }
        if let Some(sd) = &self.spec_decode {
            c.latency("spec_decode.exposed_host_us", sd.exposed_host_us)?;
            c.latency("spec_decode.pass_gap_us", sd.pass_gap_us)?;
        }
        for (field, x) in [
            ("variability.kernel_cv", v.kernel_cv),
            ("variability.rank_skew_cv", v.rank_skew_cv),
            ("variability.collective_cv", v.collective_cv),
        ] {
            // Uniform jitter of this CV stays above zero duration only below 1/sqrt(3).
            if !(x.is_finite() && (0.0..0.5).contains(&x)) {
                return Err(c.fail(field, x, "a coefficient of variation in [0, 0.5)"));
            }
        }
        self.validate_comm_sections(&c, bw)
    }

    /// The sections of communication and table scales: each checked by its own part.
    fn validate_comm_sections(&self, c: &Checker, bw: Option<f64>) -> Result<()> {
        self.check_table_scales(c)?;
        self.check_comm_laws(c, bw)?;
        self.check_transfer(c)?;
        self.check_nccl(c)
    }

    /// Table price multipliers (`table_scales`, `aiconfigurator.scales`) within `TIME_SCALE`.
    fn check_table_scales(&self, c: &Checker) -> Result<()> {
        for (k, v) in &self.table_scales {
            if !(v.is_finite() && (TIME_SCALE[0]..=TIME_SCALE[1]).contains(v)) {
                return Err(c.fail(
                    &format!("table_scales.{k}"),
                    v,
                    "a scale in [0.001, 1000] (1 = the table as measured)",
                ));
            }
        }
        if let Some(a) = &self.aiconfigurator {
            for (k, v) in &a.scales {
                if !(v.is_finite() && (TIME_SCALE[0]..=TIME_SCALE[1]).contains(v)) {
                    return Err(c.fail(
                        &format!("aiconfigurator.scales.{k}"),
                        v,
                        "a scale in [0.001, 1000] (1 = the table as measured)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The custom all-reduce laws, DeepEP's and the fused all-reduce's: latencies in [0, 1 s],
    /// bandwidths positive and within the GPU's memory bandwidth, shares in (0, 1].
    fn check_comm_laws(&self, c: &Checker, bw: Option<f64>) -> Result<()> {
        for (name, ca) in [
            ("custom_allreduce", &self.custom_allreduce),
            ("custom_allreduce_pcie", &self.custom_allreduce_pcie),
        ] {
            if let Some(ca) = ca {
                c.custom_allreduce(name, ca, bw)?;
            }
        }
        if let Some(d) = &self.deepep_ll {
            c.deepep_ll(d, bw)?;
        }
        if let Some(f) = &self.fused_allreduce_rms {
            if !(f.dram_efficiency.is_finite()
                && f.dram_efficiency > 0.0
                && f.dram_efficiency <= 1.0)
            {
                return Err(c.fail(
                    "fused_allreduce_rms.dram_efficiency",
                    f.dram_efficiency,
                    "a share of the DRAM bandwidth above 0 and at most 1",
                ));
            }
        }
        Ok(())
    }

    /// `[transfer]`: the measured GPU's figures, positive and finite.
    fn check_transfer(&self, c: &Checker) -> Result<()> {
        if let Some(t) = &self.transfer {
            let figures = [
                ("memory_bandwidth_gbps", t.memory_bandwidth_gbps),
                ("bf16_tflops", t.bf16_tflops),
                ("fp8_tflops", t.fp8_tflops),
                ("link_gbps", t.link_gbps),
            ];
            for (k, v) in figures {
                if !(v.is_finite() && v > 0.0 && v < 1e7) {
                    return Err(c.fail(
                        &format!("transfer.{k}"),
                        v,
                        "a positive figure of the measured GPU (GB/s or TFLOPS)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// NCCL's defaults: the channel count within its MAXCHANNELS (64), buffer and slots sized.
    fn check_nccl(&self, c: &Checker) -> Result<()> {
        if let Some(n) = &self.nccl {
            if !(1..=64).contains(&n.default_nchannels) {
                return Err(c.fail(
                    "nccl.default_nchannels",
                    n.default_nchannels,
                    "a channel count in [1, 64] (NCCL's MAXCHANNELS)",
                ));
            }
            if !(1..=1 << 40).contains(&n.buffsize_bytes) {
                return Err(c.fail(
                    "nccl.buffsize_bytes",
                    n.buffsize_bytes,
                    "bytes in [1, 2^40]",
                ));
            }
            if !(1..=1024).contains(&n.steps_per_buffer) {
                return Err(c.fail(
                    "nccl.steps_per_buffer",
                    n.steps_per_buffer,
                    "a slot count in [1, 1024]",
                ));
            }
            c.latency("nccl.simple_hop_us", n.simple_hop_us)?;
        }
        Ok(())
    }
}
