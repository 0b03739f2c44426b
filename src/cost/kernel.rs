//! Roofline cost of a compute kernel: a fixed cost plus the larger of its compute time and its
//! memory time, each at a calibrated fraction of the GPU's peak.

use super::profile::KernelParams;
use crate::scenario::GpuSpec;
use crate::workload::Op;

pub fn kernel_us(op: &Op, k: &KernelParams, gpu: &GpuSpec) -> f64 {
    kernel_parts(op, k, gpu).total()
}

/// The roofline's terms: the fixed cost, the compute time and the memory time (µs); the price
/// is the fixed cost plus the larger of the other two.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Parts {
    pub fixed: f64,
    pub compute: f64,
    pub memory: f64,
}

impl Parts {
    pub fn total(&self) -> f64 {
        self.fixed + self.compute.max(self.memory)
    }
}

pub fn kernel_parts(op: &Op, k: &KernelParams, gpu: &GpuSpec) -> Parts {
    let tflops = if op.family.uses_fp8_peak() {
        gpu.fp8_tflops
    } else {
        gpu.bf16_tflops
    };
    // TFLOP/s × 1e6 = FLOP per µs; GB/s × 1e3 = bytes per µs.
    let m = op.shape.m as f64;
    let ramp = if k.m_half > 0.0 {
        m / (m + k.m_half)
    } else {
        1.0
    };
    let compute = if op.flops > 0.0 {
        op.flops / (tflops * 1e6 * k.compute_efficiency * ramp.max(1e-6))
    } else {
        0.0
    };
    let memory = op.bytes / (gpu.memory_bandwidth_gbps * 1e3 * k.mem_efficiency);
    Parts {
        fixed: k.fixed_us,
        compute,
        memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Category;
    use crate::workload::op::{Shape, Stream};
    use crate::workload::CostFamily;

    fn gpu() -> GpuSpec {
        GpuSpec {
            name: "test".into(),
            display_name: "test".into(),
            compute_capability: "9.0".into(),
            sms: 1,
            memory_gb: 1.0,
            memory_total_mib: None,
            memory_bandwidth_gbps: 1000.0, // 1e6 bytes per us
            bf16_tflops: 100.0,            // 1e8 FLOP per us
            fp8_tflops: 200.0,
            int8_tops: 200.0,
            l2_mb: 1.0,
            nvlink: false,
        }
    }

    fn op(family: CostFamily, m: u64, flops: f64, bytes: f64) -> Op {
        Op {
            name: "t".into(),
            role: crate::workload::OpRole::OProj,
            kernel: "k",
            layer: 0,
            family,
            category: Category::Gemm,
            stream: Stream::Compute,
            shape: Shape {
                m,
                n: 1,
                k: 1,
                batch: 1,
            },
            weights: "-".into(),
            flops,
            bytes,
            message_bytes: 0,
            measure: None,
            group: 0,
            rank_scale: Vec::new(),
            waits_for: None,
            fused_norm: None,
            micro_batch: None,
            draft_pass: None,
        }
    }

    fn params(m_half: f64) -> KernelParams {
        KernelParams {
            fixed_us: 3.0,
            mem_efficiency: 0.5,
            compute_efficiency: 0.25,
            m_half,
            source: "test".into(),
            measured_m: None,
            measured_bytes: None,
        }
    }

    #[test]
    fn fixed_cost_plus_the_larger_of_memory_and_compute_time() {
        // Memory: 1e6 B / (1e6 B/us × 0.5) = 2 us; compute: 1e8 / (1e8 × 0.25) = 4 us → 3 + 4.
        let t = kernel_us(&op(CostFamily::GemmBf16, 1, 1e8, 1e6), &params(0.0), &gpu());
        assert!((t - 7.0).abs() < 1e-12, "{t}");
        // Memory-bound: 1e7 B → 20 us beats 4 us of compute → 3 + 20.
        let t = kernel_us(&op(CostFamily::GemmBf16, 1, 1e8, 1e7), &params(0.0), &gpu());
        assert!((t - 23.0).abs() < 1e-12, "{t}");
        // FP8 families use the FP8 peak: compute 1e8 / (2e8 × 0.25) = 2 us = memory → 3 + 2.
        let t = kernel_us(&op(CostFamily::GemmFp8, 1, 1e8, 1e6), &params(0.0), &gpu());
        assert!((t - 5.0).abs() < 1e-12, "{t}");
    }

    #[test]
    fn compute_efficiency_ramps_with_m() {
        // m = m_half: half the efficiency, so compute 8 us → 3 + 8.
        let t = kernel_us(
            &op(CostFamily::GemmBf16, 16, 1e8, 1e6),
            &params(16.0),
            &gpu(),
        );
        assert!((t - 11.0).abs() < 1e-12, "{t}");
        // No FLOPs: memory time only.
        let t = kernel_us(&op(CostFamily::Norm, 16, 0.0, 1e6), &params(16.0), &gpu());
        assert!((t - 5.0).abs() < 1e-12, "{t}");
    }
}
