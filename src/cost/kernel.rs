//! Roofline cost of a compute kernel: a fixed cost plus the larger of its compute time and its
//! memory time, each at a calibrated fraction of the GPU's peak.

use super::profile::KernelParams;
use crate::spec::GpuSpec;
use crate::workload::Op;

pub fn kernel_us(op: &Op, k: &KernelParams, gpu: &GpuSpec) -> f64 {
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
    k.fixed_us + compute.max(memory)
}
